"""``--gen-algo`` names and the drafters behind them, in the style of fairseq's registries. Every
algorithm is the shared engine around the verifier of ``--verifier`` and a drafter, with the
acceptance rule of ``--acceptance`` unless it brings its own (GAD++)."""
import logging
from dataclasses import dataclass
from typing import Callable

from pardec_fairseq.decoding.acceptance import build_acceptance
from pardec_fairseq.decoding.config import decoding_config
from pardec_fairseq.decoding.engine import DraftVerifyDecoder
from pardec_fairseq.decoding.fairseq_verifier import FairseqVerifier
from pardec_fairseq.decoding.fast_verifier import FastVerifier, fast_path_obstacle
from pardec_fairseq.decoding.generator import ParallelDecodingGenerator
from pardec_fairseq.decoding.options import DecodingOptions
from pardec_fairseq.decoding.verifier import Verifier

logger = logging.getLogger(__name__)


@dataclass
class Algorithm:
    build_drafter: Callable  # (cfg, src_dict, tgt_dict, models) -> Drafter
    build_acceptance: Callable  # (cfg) -> acceptance rule


ALGORITHMS = {}


def register_algorithm(name, acceptance=build_acceptance):
    """Register ``build_drafter(cfg, src_dict, tgt_dict, models) -> Drafter`` as ``name``, accepting by
    ``acceptance(cfg)`` (default: the rule of ``--acceptance``)."""

    def register(build_drafter):
        if name in ALGORITHMS:
            raise ValueError(f"--gen-algo {name} is registered twice")
        ALGORITHMS[name] = Algorithm(build_drafter, acceptance)
        return build_drafter

    return register


def build_verifier(kind, models, tgt_dict, options) -> Verifier:
    """The verifier path ``kind`` (``--verifier``): ``fast`` falls back to ``fairseq``, with a
    one-line notice, for a model with an option the fast path does not reproduce."""
    if kind == "fast":
        obstacle = next(filter(None, (fast_path_obstacle(model.decoder) for model in models)), None)
        if obstacle is None:
            return FastVerifier(models, tgt_dict, options)
        logger.warning(f"--verifier fast does not reproduce models with {obstacle}: decoding on the fairseq path")
    elif kind != "fairseq":
        raise ValueError(f"unknown --verifier {kind!r} (fast or fairseq)")
    return FairseqVerifier(models, tgt_dict, options)


def build_generator(algorithm, models, tgt_dict, generation_args, task_cfg, stats_path=None, src_dict=None,
                    drafter=None, acceptance=None):
    """The generator of ``--gen-algo algorithm``; ``drafter``/``acceptance``: parts built in code (a
    test's, a tool's) in place of the algorithm's own."""
    options = DecodingOptions.from_generation_args(generation_args, algorithm)
    cfg = decoding_config(task_cfg)
    registered = ALGORITHMS[algorithm]
    verifier = build_verifier(getattr(cfg.verifier, "value", cfg.verifier), models, tgt_dict, options)
    if acceptance is None:
        acceptance = registered.build_acceptance(cfg)
    if drafter is None:
        drafter = registered.build_drafter(cfg, src_dict if src_dict is not None else tgt_dict, tgt_dict, models)
    if drafter.drafts_trees and isinstance(verifier, FairseqVerifier):
        raise ValueError(f"--gen-algo {algorithm} verifies several drafts per pass as a tree, which only --verifier "
                         f"fast scores: drop --verifier fairseq (or, for a model the fast path does not reproduce, "
                         f"see the notice above, use another --gen-algo)")
    drafter.allow_trees(not isinstance(verifier, FairseqVerifier) and getattr(acceptance, "accepts_trees", False))
    decoder = DraftVerifyDecoder(verifier, drafter, acceptance, tgt_dict, options)
    return ParallelDecodingGenerator(algorithm, decoder, tgt_dict, options, stats_path)
