"""``--gen-algo`` names and the drafters behind them, in the style of fairseq's registries. Every
algorithm is the shared engine around a drafter, with the acceptance rule of ``--acceptance``
unless it brings its own (GAD++)."""
from dataclasses import dataclass
from typing import Callable

from pardec_fairseq.decoding.acceptance import build_acceptance
from pardec_fairseq.decoding.config import decoding_config
from pardec_fairseq.decoding.engine import DraftVerifyDecoder
from pardec_fairseq.decoding.generator import ParallelDecodingGenerator
from pardec_fairseq.decoding.options import DecodingOptions


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


def build_generator(algorithm, models, tgt_dict, generation_args, task_cfg, stats_path=None, src_dict=None):
    options = DecodingOptions.from_generation_args(generation_args, algorithm)
    cfg = decoding_config(task_cfg)
    registered = ALGORITHMS[algorithm]
    acceptance = registered.build_acceptance(cfg)
    drafter = registered.build_drafter(cfg, src_dict if src_dict is not None else tgt_dict, tgt_dict, models)
    decoder = DraftVerifyDecoder(drafter, acceptance, tgt_dict, options)
    return ParallelDecodingGenerator(algorithm, decoder, models, tgt_dict, options, stats_path)
