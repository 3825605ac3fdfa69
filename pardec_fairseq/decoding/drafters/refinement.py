"""Draft refinement (Kim et al. 2024): drafts chosen from the top-k lattice of a block drafter.

A block drafter (the heads of a ``blockwise_transformer``) predicts each drafted position on its
own, so its top-1 draft repeats tokens and grows unsure with distance. Its top-``k`` tokens per
position form a "sausage" lattice: any choice of one token per position is a draft. Global n-gram
rescoring scores every path by the drafter's log-probabilities (its logits, which rank paths alike)
plus ``weight`` times an n-gram model's scores, and dynamic programming over the lattice (a k-best
Viterbi whose states are the last ``order - 1`` choices) gives the ``drafts`` best paths; several
are verified together as a tree. With no language model the same search gives the paths the
drafter alone ranks best (Kim et al.'s "parallel base BPD"). Local neural rescoring instead walks
the positions in order, choosing each one's candidate by the drafter's log-probability plus
``weight`` times a small autoregressive language model's (logits for both: a position's candidates
compare alike), given the accepted output and the draft chosen so far: one draft, the model called
once per drafted position. Drafts only change speed: exact acceptance keeps the verifier's output.
"""
import os
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Optional

import numba
import numpy as np
import torch
from fairseq import checkpoint_utils
from fairseq import models as fairseq_models
from fairseq.data import Dictionary
from torch import Tensor

from pardec_fairseq.decoding.drafters import output_tail
from pardec_fairseq.decoding.drafters.ngram_lm import NgramLM, stupid_backoff
from pardec_fairseq.decoding.proposals import Proposal


@dataclass
class Lattice:
    """Each drafted position's ``k`` most likely tokens under the drafter, best first."""

    tokens: Tensor  # [rows, positions, k]
    # [rows, positions, k] the drafter's logits: its log-probabilities up to a constant per position,
    # which ranks every path alike (and saves normalising over the vocabulary each pass)
    scores: Tensor

    @classmethod
    def of(cls, logits: Tensor, k: int) -> "Lattice":
        """From the drafter's logits ``[rows, positions, vocab]``."""
        top = logits.topk(min(k, logits.size(-1)), -1)
        return cls(top.indices, top.values.float())


def _check_top_k(top_k):
    if top_k < 1:
        raise ValueError(f"--refine-top-k must be at least 1 (got {top_k})")


class LatticeRescoring:
    """The ``drafts`` best paths through a lattice of ``top_k`` tokens per position by drafter score +
    ``weight`` x ``lm`` score (``lm`` ``None``: by drafter score alone)."""

    def __init__(self, top_k: int, drafts: int, lm: Optional[NgramLM] = None, weight: float = 0.0):
        _check_top_k(top_k)
        if drafts < 1:
            raise ValueError(f"--refine-drafts must be at least 1 (got {drafts})")
        self.top_k, self.drafts, self.lm, self.weight = top_k, drafts, lm, weight
        # the choices a state remembers: what the n-gram model's context reaches back to
        self.remembered = lm.order - 1 if lm is not None else 1

    def propose(self, lattice: Lattice, state) -> Proposal:
        """The best paths as a proposal after each row's accepted output (``state``): a chain for one
        draft, else a tree of the paths sharing their common prefixes. One compiled call from the
        state's tokens to the proposal: with the context gathered in torch operations and the tree
        built in a second call, refinement added 0.20 ms a pass to BPD's drafting, now 0.06."""
        rows, positions, k = lattice.tokens.shape
        device = lattice.tokens.device
        if positions == 0:
            return Proposal(tokens=lattice.tokens[:, :, 0], lengths=torch.zeros_like(state.lengths))
        drafts = min(self.drafts, k ** positions)
        tables = self.lm.tables if self.lm is not None else _NO_TABLES
        draft, parents, lengths = _refined_proposal(
            lattice.tokens.cpu().numpy(), lattice.scores.cpu().numpy(), state.tokens.cpu().numpy(),
            state.lengths.cpu().numpy(), drafts, self.remembered, float(self.weight), self.lm is not None, *tables)
        draft, lengths = torch.from_numpy(draft).to(device), torch.from_numpy(lengths).to(device)
        if drafts == 1:
            return Proposal(tokens=draft, lengths=lengths)
        return Proposal(tokens=draft, lengths=lengths, parents=torch.from_numpy(parents).to(device))


_NO_TABLES = (np.zeros((2, 2), np.int64), np.zeros(2, np.int64), 1, 1, 2, 0.0)


@numba.njit(cache=True, nogil=True)
def _insert(values, origins, value, origin):
    """Put ``value`` into the descending list ``values`` (dropping its last), after equal ones."""
    at = values.size - 1
    while at > 0 and values[at - 1] < value:
        values[at], origins[at] = values[at - 1], origins[at - 1]
        at -= 1
    values[at], origins[at] = value, origin


@numba.njit(cache=True, nogil=True)
def _best_paths(tokens, scores, context, context_lengths, drafts, remembered, weight, use_lm,
                slots, offsets, total, bits, order, log_backoff):
    """k-best Viterbi per row. The state after position j is the last ``min(j + 1, remembered)``
    choices, a number in base k (the latest choice least significant); each state keeps its
    ``drafts`` best partial paths and, per path, the index (state x drafts + rank) of the path it
    extends. A step's score is the drafter's log-probability plus ``weight`` x the n-gram score of
    the token after the accepted context and the state's choices."""
    rows, positions, k = tokens.shape
    width = context.shape[1]
    paths = np.zeros((rows, drafts, positions), np.int64)
    found = np.zeros((rows, drafts), np.bool_)
    most = k ** remembered
    history = np.empty(width, np.int64)
    for row in range(rows):
        best = np.full((most, drafts), -np.inf)
        best[0, 0] = 0.0
        pointers = np.zeros((positions, most, drafts), np.int64)
        states = 1
        for j in range(positions):
            held = min(j, remembered)  # choices the states before position j remember
            grows = held < remembered  # else the oldest choice drops out
            kept = k ** max(held - 1, 0)
            extended = np.full((most, drafts), -np.inf)
            for state in range(states):
                if best[state, 0] == -np.inf:
                    continue
                if use_lm:
                    for i in range(width - held):
                        history[i] = context[row, i + held]
                    for i in range(held):
                        history[width - held + i] = tokens[row, j - held + i, (state // k ** (held - 1 - i)) % k]
                known = min(width, context_lengths[row] + j)  # context tokens the n-gram sees
                for c in range(k):
                    step = scores[row, j, c]
                    if use_lm:
                        step += weight * stupid_backoff(history, known, tokens[row, j, c], slots, offsets, total,
                                                        bits, order, log_backoff)
                    target = state * k + c if grows else (state % kept) * k + c
                    for rank in range(drafts):
                        value = best[state, rank] + step
                        if not value > extended[target, drafts - 1]:
                            break  # the state's later paths score less
                        _insert(extended[target], pointers[j, target], value, state * drafts + rank)
            best = extended
            states = states * k if grows else states
        final, origin = np.full(drafts, -np.inf), np.zeros(drafts, np.int64)
        for state in range(states):
            for rank in range(drafts):
                if not best[state, rank] > final[drafts - 1]:
                    break
                _insert(final, origin, best[state, rank], state * drafts + rank)
        for q in range(drafts):
            if final[q] == -np.inf:
                continue
            found[row, q] = True
            at = origin[q]
            for j in range(positions - 1, -1, -1):
                state = at // drafts
                paths[row, q, j] = tokens[row, j, state % k]
                at = pointers[j, state, at % drafts]
    return paths, found


@numba.njit(cache=True, nogil=True)
def _refined_proposal(tokens, scores, output, lengths, drafts, remembered, weight, use_lm, slots, offsets, total, bits,
                      order, log_backoff):
    """``LatticeRescoring.propose`` from the lattice and the state's ``output`` ``[rows, columns]`` (BOS,
    then ``lengths[r]`` accepted tokens): each row's last ``remembered`` tokens as the n-gram's context
    (BOS repeated before the output's start), the best paths, and the draft: the best path with
    ``drafts`` 1 (no parents: a chain), else the tree of the paths (``tree_of_paths``)."""
    rows, positions = tokens.shape[0], tokens.shape[1]
    context = np.empty((rows, remembered), np.int64)
    context_lengths = np.empty(rows, np.int64)
    for r in range(rows):
        for i in range(remembered):
            context[r, i] = output[r, max(lengths[r] - remembered + 1 + i, 0)]
        context_lengths[r] = min(lengths[r] + 1, remembered)
    paths, found = _best_paths(tokens, scores, context, context_lengths, drafts, remembered, weight, use_lm, slots,
                               offsets, total, bits, order, log_backoff)
    path_lengths = found.astype(np.int64) * positions
    if drafts == 1:
        return paths[:, 0].copy(), np.empty((rows, 0), np.int64), path_lengths[:, 0].copy()
    return tree_of_paths(paths, path_lengths)


class LocalNeuralRescoring:
    """Kim et al.'s local rescoring with a fairseq ``transformer_lm`` of the target side, greedy."""

    drafts = 1

    def __init__(self, top_k: int, lm, weight: float, pad: int):
        _check_top_k(top_k)
        self.top_k, self.lm, self.weight, self.pad = top_k, lm, weight, pad
        self.max_positions = lm.max_positions()

    def propose(self, lattice: Lattice, state) -> Proposal:
        """Rows right-aligned (the language model reads padding on the left as fairseq's decoders do),
        so each step appends one column and reads the last one; an output longer than the model's
        positions is read through its latest ones."""
        rows, positions, _ = lattice.tokens.shape
        width = int(state.lengths.max()) + 1
        history, before_bos = output_tail(state, width)
        history = history.masked_fill(before_bos, self.pad)
        for j in range(positions):
            logits, _ = self.lm(history[:, -self.max_positions:])
            # logits, not log-probabilities: the same up to a constant among a position's candidates
            lm_scores = logits[:, -1].float().gather(1, lattice.tokens[:, j])
            choice = (lattice.scores[:, j] + self.weight * lm_scores).argmax(-1, keepdim=True)
            history = torch.cat([history, lattice.tokens[:, j].gather(1, choice)], 1)
        return Proposal(tokens=history[:, width:], lengths=torch.full_like(state.lengths, positions))


def draft_refinement(cfg, tgt_dict, like: Tensor):
    """The refinement of ``--refine``/``--refine-drafts`` (``None``: each position's top-1), its
    language model on ``like``'s device and dtype."""
    refine = getattr(cfg.refine, "value", cfg.refine)
    if refine == "neural":
        if cfg.refine_drafts != 1:
            raise ValueError("--refine neural chooses one draft per pass (greedy local rescoring): drop "
                             "--refine-drafts or use --refine ngram for several")
        lm = load_rescoring_lm(cfg.refine_lm_path, tgt_dict, like)
        return LocalNeuralRescoring(cfg.refine_top_k, lm, cfg.refine_lm_weight, tgt_dict.pad())
    if refine == "none":
        return LatticeRescoring(cfg.refine_top_k, cfg.refine_drafts) if cfg.refine_drafts != 1 else None
    if cfg.refine_corpus is None:
        raise ValueError("--refine ngram counts the n-grams of target-side text: pass --refine-corpus PREFIX of a "
                         "binarized split (the task's data folder has no language pair to find its train split)")
    lm = NgramLM.for_corpus(cfg.refine_corpus, tgt_dict, cfg.refine_ngram_order)
    return LatticeRescoring(cfg.refine_top_k, cfg.refine_drafts, lm, cfg.refine_lm_weight)


def load_rescoring_lm(path, tgt_dict, like: Tensor):
    """The ``transformer_lm`` of ``--refine-lm-path`` on ``like``'s device and dtype, refusing a model
    of another vocabulary than the verifier's target dictionary."""
    if not path or not os.path.isfile(path):
        raise ValueError(f"--refine neural rescores drafts with a target-side language model: pass its checkpoint "
                         f"with --refine-lm-path (trained by scripts/train_rescoring_lm.sh); got {path!r}")
    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    cfg = state["cfg"]
    task = getattr(cfg.task, "_name", None)
    if task not in ("target_language_modeling", "language_modeling"):
        raise ValueError(f"--refine-lm-path {path} is not a language model (task {task}): train one with "
                         f"scripts/train_rescoring_lm.sh")
    folder = str(cfg.task.data).split(os.pathsep)[0]
    saved_dict = os.path.join(folder, f"dict.{cfg.task.target_lang}.txt" if task == "target_language_modeling"
                              else "dict.txt")
    symbols = Dictionary.load(saved_dict).symbols if os.path.isfile(saved_dict) else None
    vocabulary = state["model"]["decoder.embed_tokens.weight"].size(0)
    if (symbols is not None and symbols != tgt_dict.symbols) or vocabulary != len(tgt_dict):
        raise ValueError(f"--refine-lm-path {path} was trained with another dictionary than the verifier's target "
                         f"dictionary ({vocabulary} vs {len(tgt_dict)} words): train it on the target side of data "
                         f"binarized with the verifier's dictionaries")
    model = fairseq_models.build_model(cfg.model, SimpleNamespace(source_dictionary=tgt_dict,
                                                                   target_dictionary=tgt_dict))
    model.load_state_dict(state["model"], strict=True, model_cfg=cfg.model)
    return model.to(device=like.device, dtype=like.dtype).eval()


@numba.njit(cache=True, nogil=True)
def tree_of_paths(paths, lengths):
    """Paths ``[rows, p, depth]`` (the first ``lengths[r, i]`` tokens of path i) as one tree per row
    whose paths share their common prefixes: node tokens ``[rows, nodes]`` (0 after a row's nodes),
    each node's parent as a pass position (0: the last accepted token, j + 1: node j), node counts
    ``[rows]``. Nodes are numbered path by path, so a parent always comes before its children."""
    rows, p, depth = paths.shape
    tokens = np.zeros((rows, p * depth), np.int64)
    parents = np.zeros((rows, p * depth), np.int64)
    nodes = np.zeros(rows, np.int64)
    for row in range(rows):
        for i in range(p):
            parent = 0
            for d in range(lengths[row, i]):
                token, node = paths[row, i, d], -1
                for other in range(nodes[row]):  # a node with the same parent and token: a shared prefix
                    if parents[row, other] == parent and tokens[row, other] == token:
                        node = other
                        break
                if node < 0:
                    node = nodes[row]
                    tokens[row, node], parents[row, node] = token, parent
                    nodes[row] += 1
                parent = node + 1
    width = nodes.max() if rows else 0
    return tokens[:, :width], parents[:, :width], nodes
