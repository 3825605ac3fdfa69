"""Drafters propose each row's next tokens; the engine verifies and accepts them.

A drafter is one object per generator: ``begin`` sets it up for a batch (with the verifier's
encoder states, for drafters that read them), ``propose`` drafts from
the accepted output so far, ``update`` sees the verifier's scores (``VerifierScores``) and the verdict
of the pass (before the output advances), and ``keep_rows`` follows finished rows out of the batch.
"""
import torch

from pardec_fairseq.decoding import vector_kernels
from pardec_fairseq.decoding.fast_ops import Product
from pardec_fairseq.decoding.proposals import Proposal
from pardec_fairseq.models.draft_head import first_words


class Drafter:
    # whether ``update`` reads the scores of every drafted position: the verifier then projects
    # them all in one go instead of only as far as the acceptance rule looks
    reads_all_scores = False
    # whether proposals are trees (several branches per row), which only the fast verifier scores
    drafts_trees = False

    def begin(self, net_input, max_len, encoded=None, verifier_cache=None):
        """``encoded``: the first model's encoder states ``[rows, src, d]`` and source padding
        ``[rows, src]`` (``None`` without any), as the verifier computed them; ``verifier_cache``: the
        verifier's cache of the batch, for drafters that run the verifier's own layers over it."""

    def propose(self, state) -> Proposal:
        raise NotImplementedError

    def update(self, scores, verdict, state):
        pass

    def keep_rows(self, rows):
        pass

    def allow_trees(self, allowed: bool):
        """Whether the generator's verifier and acceptance rule score trees, told once all three are built:
        a drafter whose trees are its own choice, not asked for, drafts chains where they do not."""


def output_tail(state, width):
    """Each row's last ``width`` output tokens (BOS included), right-aligned ``[rows, width]``, and
    where a column reaches back before BOS (it holds BOS again there)."""
    columns = state.lengths.unsqueeze(1) - width + 1 + torch.arange(width, device=state.lengths.device)
    return state.tokens.gather(1, columns.clamp(min=0)), columns < 0


def draft_products_precision(precision: str) -> str:
    """The precision of a drafter's own products (``--draft-precision``, ``Product``'s): 'auto' is int8
    where the CPU multiplies bytes (AVX2, AVX-512BW), else bfloat16. On the Zen 3 VM (AVX2) the draft head
    drafted 1.77 ms a token in int8's byte products, 2.01 in bfloat16 (widened in registers) and 2.18 in
    float32; on a Zen 4 VM (AVX-512 VNNI and bfloat16 dot products) `gad` ran at 1.29x plugin greedy
    drafting in int8 and 1.22x in bfloat16 (2026-11-28)."""
    if precision != "auto":
        return precision
    return "int8" if vector_kernels.has_byte_products() else "bfloat16"


def draft_projection(decoder, words: int, refinement=None, precision: str = "float32") -> Product:
    """``decoder``'s output projection onto its first ``words`` words (all of them with 0), re-laid:
    drafts among the most frequent words are verified as any others, so the output stays the same.
    ``refinement``: the one choosing drafts from the top-k lattice of these words, if any;
    ``precision``: that of the product on a CPU (``Product``)."""
    weight, bias = first_words(decoder.output_projection, words)
    if refinement is not None and weight.size(0) < refinement.top_k:
        raise ValueError(f"--draft-vocab {words} keeps fewer words than the lattice's --refine-top-k "
                         f"{refinement.top_k} candidates per position: raise --draft-vocab or lower --refine-top-k")
    return Product(weight.detach().t(), None if bias is None else bias.detach(), precision)


def source_to_target(src_dict, tgt_dict):
    """Source token ids -> target token ids by symbol (pad to pad), so drafters that copy the source
    work with separate dictionaries too; a symbol the target lacks becomes its unknown word."""
    to_target = torch.tensor([tgt_dict.index(src_dict[i]) for i in range(len(src_dict))])
    to_target[src_dict.pad()] = tgt_dict.pad()
    return to_target


class NoDraft(Drafter):
    """Nothing to propose: every pass yields the verifier's next token (greedy decoding)."""

    def __init__(self):
        self.empty = None  # the last empty proposal, reused while the batch keeps its rows

    def propose(self, state) -> Proposal:
        rows = state.lengths.size(0)
        if self.empty is None or self.empty.lengths.size(0) != rows:
            self.empty = Proposal(tokens=state.tokens.new_zeros(rows, 0), lengths=torch.zeros_like(state.lengths))
        return self.empty
