"""The generators a benchmark times, one row each: fairseq's greedy and beam search, the plugin's
algorithms (each with decoding options of its own), CTranslate2's greedy search; at each thread count."""
import argparse
import ast
import dataclasses
import typing
from argparse import Namespace
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from fairseq.sequence_generator import SequenceGenerator

from pardec_fairseq.cli import ctranslate2_baseline
from pardec_fairseq.decoding import ALGORITHMS, build_generator
from pardec_fairseq.decoding.config import DecodingConfig, decoding_config
from pardec_fairseq.decoding.stats import DecodingStats


FAIRSEQ_GREEDY = "fairseq-greedy"
# the plugin's own greedy search, which drafting algorithms are meant to beat (issue targets are against it)
PLUGIN_GREEDY = "greedy"


def fairseq_beam_name(beam):
    return f"fairseq-beam{beam}"


def algorithm_variant(spec):
    """``NAME`` or ``NAME:option=value,...``: a plugin ``--gen-algo`` and decoding options that
    differ from the task's, e.g. ``iad:iad-pass-tokens=64`` or ``gs-jacobi:jacobi-block-size=2``."""
    name, _, overrides = spec.partition(":")
    if name not in ALGORITHMS:
        raise argparse.ArgumentTypeError(f"unknown algorithm {name!r}; choose from {', '.join(sorted(ALGORITHMS))}")
    options = {f.name for f in dataclasses.fields(DecodingConfig)}
    hints = typing.get_type_hints(DecodingConfig)
    values = {}
    for item in filter(None, overrides.split(",")):
        key, equals, value = item.partition("=")
        option = key.strip().lstrip("-").replace("-", "_")
        if not equals or option not in options:
            raise argparse.ArgumentTypeError(
                f"{spec!r}: {key!r} is not option=value with a decoding option of the task; choose from "
                + ", ".join(sorted(o.replace("_", "-") for o in options)))
        try:
            values[option] = None if value.lower() == "none" else ast.literal_eval(value)
        except (ValueError, SyntaxError):
            values[option] = value  # a word, such as an --acceptance rule
        if values[option] is None and type(None) not in typing.get_args(hints[option]):
            raise argparse.ArgumentTypeError(f"{spec!r}: {key.strip()} takes a value, not none")
    return name, values


@dataclass
class Run:
    """One generator's outputs and timings over the benchmark batches."""

    name: str
    generator: object
    plugin: bool
    threads: Optional[int] = None  # torch CPU threads while this generator runs (None: leave as is)
    batch_seconds: List[List[float]] = field(default_factory=list)  # [batch][repetition]
    tokens: Dict[int, List[int]] = field(default_factory=dict)  # sentence id -> output tokens
    stats: Optional[DecodingStats] = None  # plugin generators: the first timed repetition


def thread_name(name, threads, thread_counts):
    """A row's name: the generator's, with its thread count when it runs at several."""
    return f"{name} @{threads}t" if len(thread_counts) > 1 else name


def base_name(row_name):
    """The generator of a row (its name without the thread count)."""
    return row_name.split(" @")[0]


def build_runs(task, models, args, ctranslate2_dir=None):
    """Every generator at every thread count; fairseq greedy and beam search first."""
    tgt_dict = task.target_dictionary
    generation = Namespace(max_len_a=args.max_len_a, max_len_b=args.max_len_b, min_len=1, unkpen=0.0,
                           lenpen=1.0, temperature=1.0)

    def fairseq_search(beam):
        return SequenceGenerator(models, tgt_dict, beam_size=beam, max_len_a=args.max_len_a,
                                 max_len_b=args.max_len_b)

    thread_counts = args.threads or [None]
    runs = []
    for name, build in ((FAIRSEQ_GREEDY, lambda: fairseq_search(1)),
                        (fairseq_beam_name(args.beam), lambda: fairseq_search(args.beam))):
        runs += [Run(thread_name(name, threads, thread_counts), build(), plugin=False, threads=threads)
                 for threads in thread_counts]
    for spec, (algorithm, overrides) in zip(args.algorithms, args.variants):
        cfg = dataclasses.replace(decoding_config(task.cfg), **{"drafter_path": args.drafter_path, **overrides})
        for threads in thread_counts:
            generator = build_generator(algorithm, models, tgt_dict, generation, cfg, src_dict=task.source_dictionary)
            runs.append(Run(thread_name(spec, threads, thread_counts), generator, plugin=True, threads=threads))
    if ctranslate2_dir is not None:
        max_positions = min(model.max_decoder_positions() for model in models)
        ct2_threads = sorted({*(t or torch.get_num_threads() for t in thread_counts), 1}, reverse=True)
        for compute_type in ("float32", "int8"):
            for threads in ct2_threads:
                generator = ctranslate2_baseline.CTranslate2Greedy(
                    ctranslate2_dir, compute_type, threads, task.source_dictionary, tgt_dict, args.max_len_a,
                    args.max_len_b, max_positions)
                runs.append(Run(thread_name(f"ct2-{compute_type}", threads, ct2_threads), generator, plugin=False))
    return runs
