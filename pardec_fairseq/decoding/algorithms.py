"""The plugin's algorithms, each a drafter registered under its ``--gen-algo`` name: greedy,
input-guided aggressive decoding and the Jacobi family need no extra training; blockwise parallel
decoding drafts with the heads of a ``blockwise_transformer`` (refined from their top-k lattice
by an n-gram or a small neural language model, Kim et al.), generalized aggressive decoding with
a trained ``block_nat`` drafter or a ``draft_head`` riding on the verifier (refined as bpd's
heads are; GAD++: the same
drafters, accepting by top-beta within tau);
lookahead decoding verifies the n-grams its Jacobi window produced; retrieval drafting continues
the output as target-side text of a corpus did."""
from typing import Optional

from pardec_fairseq.decoding.acceptance import build_gad_plus_plus_acceptance
from pardec_fairseq.decoding.drafters import NoDraft, draft_products_precision, source_to_target
from pardec_fairseq.decoding.drafters.block_nat import NATBlockDrafter
from pardec_fairseq.decoding.drafters.blockwise import BlockwiseHeadsDrafter
from pardec_fairseq.decoding.drafters.checkpoints import load_drafter_checkpoint
from pardec_fairseq.decoding.drafters.draft_head import DraftHeadDrafter, trained_draft_vocab
from pardec_fairseq.decoding.drafters.input_copy import InputCopyDrafter
from pardec_fairseq.decoding.drafters.jacobi import JacobiDrafter
from pardec_fairseq.decoding.drafters.lookahead import LookaheadDrafter
from pardec_fairseq.decoding.drafters.refinement import draft_refinement
from pardec_fairseq.decoding.drafters.retrieval import RetrievalDrafter, SuffixIndex
from pardec_fairseq.decoding.drafters.self_draft import SelfDrafter
from pardec_fairseq.decoding.drafters.shortlist import LexicalShortlist, nothing_to_add
from pardec_fairseq.decoding.registry import register_algorithm


@register_algorithm("greedy")
def greedy(cfg, src_dict, tgt_dict, models):
    return NoDraft()


@register_algorithm("iad")
def input_guided_aggressive_decoding(cfg, src_dict, tgt_dict, models):
    return InputCopyDrafter(src_dict, tgt_dict, cfg.iad_min_ngram, cfg.iad_max_ngram, cfg.iad_pass_tokens,
                           cfg.iad_reentry, cfg.iad_draft_length)


def jacobi_block_size(cfg, models):
    max_positions = min(model.max_decoder_positions() for model in models)
    if cfg.jacobi_block_size >= max_positions:
        raise ValueError(f"--jacobi-block-size {cfg.jacobi_block_size} does not fit the model's "
                         f"{max_positions} target positions; use a block size below {max_positions}")
    return cfg.jacobi_block_size


@register_algorithm("jacobi")
def parallel_jacobi(cfg, src_dict, tgt_dict, models):
    return JacobiDrafter(tgt_dict.pad())


@register_algorithm("gs-jacobi")
def gauss_seidel_jacobi(cfg, src_dict, tgt_dict, models):
    return JacobiDrafter(tgt_dict.pad(), jacobi_block_size(cfg, models))


@register_algorithm("hybrid-jacobi")
def hybrid_jacobi(cfg, src_dict, tgt_dict, models):
    block_size = jacobi_block_size(cfg, models)
    parallel_length = cfg.jacobi_parallel_length
    return JacobiDrafter(tgt_dict.pad(), block_size, 4 * block_size if parallel_length is None else parallel_length)


@register_algorithm("bpd")
def blockwise_parallel_decoding(cfg, src_dict, tgt_dict, models):
    decoder = models[0].decoder
    return BlockwiseHeadsDrafter(decoder, draft_refinement(cfg, tgt_dict, next(decoder.parameters())),
                                 cfg.draft_vocab or 0, draft_products_precision(cfg.draft_precision), cfg.bpd_heads)


@register_algorithm("gad")
def generalized_aggressive_decoding(cfg, src_dict, tgt_dict, models):
    """The checkpoint of ``--drafter-path`` says which drafter it is."""
    state, arch = load_drafter_checkpoint(cfg.drafter_path)
    refinement = draft_refinement(cfg, tgt_dict, next(models[0].parameters()))
    if arch == "draft_head":
        return DraftHeadDrafter.from_state(cfg.drafter_path, state, src_dict, tgt_dict, models[0], refinement,
                                           cfg.draft_vocab, draft_products_precision(cfg.draft_precision),
                                           cfg.draft_head_steps, cfg.draft_head_branches, cfg.draft_head_threshold,
                                           cfg.draft_head_nodes, cfg.draft_head_leaves,
                                           draft_shortlist(cfg, state, src_dict, tgt_dict))
    if cfg.draft_head_steps is not None or cfg.draft_head_branches != 1 or cfg.draft_head_threshold != 0 \
            or cfg.draft_head_nodes != 0 or cfg.draft_head_leaves not in (None, 0) or cfg.draft_shortlist:
        raise ValueError(f"--draft-head-steps, --draft-head-branches, --draft-head-threshold, --draft-head-nodes, "
                         f"--draft-head-leaves, --draft-shortlist: --drafter-path {cfg.drafter_path} is a {arch} "
                         "drafter, not a draft_head; drop them")
    if refinement is not None:
        raise ValueError("--refine and --refine-drafts choose drafts from the lattice of a drafter's top-k tokens "
                         "per position: bpd's heads or a draft_head (--drafter-path); a block_nat drafter's "
                         "drafts are not refined, so drop them")
    return NATBlockDrafter.from_state(cfg.drafter_path, state, arch, src_dict, tgt_dict, models[0])


def draft_shortlist(cfg, state, src_dict, tgt_dict) -> Optional[LexicalShortlist]:
    """``--draft-shortlist``'s table for the draft head of checkpoint ``state``, or ``None``."""
    if cfg.draft_shortlist < 0:
        raise ValueError(f"--draft-shortlist {cfg.draft_shortlist}: translations per source word, 0 (none) or more")
    if not cfg.draft_shortlist:
        return None
    if cfg.draft_shortlist_corpus is None:
        raise ValueError("--draft-shortlist learns each source word's translations from a parallel corpus: pass "
                         "--draft-shortlist-corpus DIR/SPLIT.SRC-TGT (the task's data folder has no language pair "
                         "to find its train split)")
    first_words = trained_draft_vocab(state) if cfg.draft_vocab is None else cfg.draft_vocab
    if not first_words:
        raise ValueError(nothing_to_add(first_words))
    return LexicalShortlist.for_corpus(cfg.draft_shortlist_corpus, src_dict, tgt_dict,
                                       source_to_target(src_dict, tgt_dict), first_words, cfg.draft_shortlist)


@register_algorithm("self-draft")
def self_drafting(cfg, src_dict, tgt_dict, models):
    return SelfDrafter(models[0].decoder, draft_products_precision(cfg.draft_precision), cfg.self_draft_steps,
                       cfg.draft_vocab or 0)


@register_algorithm("lookahead")
def lookahead_decoding(cfg, src_dict, tgt_dict, models):
    return LookaheadDrafter(src_dict, tgt_dict, cfg.lookahead_window, cfg.lookahead_ngram, cfg.lookahead_guesses,
                            cfg.lookahead_pool)


@register_algorithm("retrieval")
def retrieval_drafting(cfg, src_dict, tgt_dict, models):
    if cfg.retrieval_corpus is None:
        raise ValueError("--gen-algo retrieval needs target-side text to draft from: pass --retrieval-corpus "
                         "PREFIX of a binarized split (the task's data folder has no language pair to find "
                         "its train split)")
    if cfg.retrieval_max_suffix < 1:
        raise ValueError(f"--retrieval-max-suffix must be at least 1 (got {cfg.retrieval_max_suffix})")
    index = SuffixIndex.for_corpus(cfg.retrieval_corpus, tgt_dict, key_tokens=cfg.retrieval_max_suffix)
    return RetrievalDrafter(index, tgt_dict.eos(), tgt_dict.pad(), cfg.retrieval_max_suffix, cfg.retrieval_depth,
                            cfg.retrieval_occurrences, cfg.retrieval_branches, cfg.retrieval_min_share)


register_algorithm("gad++", acceptance=build_gad_plus_plus_acceptance)(generalized_aggressive_decoding)
