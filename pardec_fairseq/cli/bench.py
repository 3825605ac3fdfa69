"""Benchmark: fairseq's own greedy and beam search beside the plugin's algorithms, in one process.

Every generator decodes the same batches of the same model. Repetitions are interleaved batch by
batch, with the order of the generators rotated, so that machine noise hits all of them alike.
With several ``--threads`` every generator runs at each thread count (a row each). With
``--ctranslate2`` the checkpoint is converted and CTranslate2's greedy search runs beside them in
float32 and int8. Reported per row: BLEU (sacrebleu on de-BPE'd, detokenized text, with its
signature), the share of outputs identical to fairseq greedy, verifier iterations, tokens per
iteration, sentences per second, milliseconds per output token and wall-clock ratios against
fairseq greedy and beam search, each at its fastest thread count.
"""
import argparse
import ast
import dataclasses
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
import typing
from argparse import Namespace
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import sacrebleu
import torch
from fairseq import checkpoint_utils, utils
from fairseq.data import encoders
from fairseq.sequence_generator import SequenceGenerator

from pardec_fairseq.cli import ctranslate2_baseline
from pardec_fairseq.cli.module_profile import ModuleProfile
from pardec_fairseq.decoding import ALGORITHMS, build_generator
from pardec_fairseq.decoding.config import DecodingConfig, decoding_config
from pardec_fairseq.decoding.observers import PARTS
from pardec_fairseq.decoding.stats import DecodingStats
from pardec_fairseq.tasks.translation_pardec import TranslationPardecConfig, TranslationPardecTask

logger = logging.getLogger("pardec_fairseq.bench")

FAIRSEQ_GREEDY = "fairseq-greedy"


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


def model_and_data_parser(prog, description):
    """The arguments every command-line tool of the plugin shares: a model and a data split."""
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", help="binarized data folder (fairseq-preprocess --destdir)")
    parser.add_argument("--path", required=True, help="checkpoint of the autoregressive model (the verifier)")
    parser.add_argument("--source-lang", "-s", required=True)
    parser.add_argument("--target-lang", "-t", required=True)
    parser.add_argument("--subset", default="test", help="data split to decode")
    return parser


def parse_args(argv=None):
    parser = model_and_data_parser("pardec-bench", __doc__)
    parser.add_argument("--algorithms", nargs="*", default=["greedy"], metavar="ALGO[:OPTION=VALUE,...]",
                        help="plugin --gen-algo values to run beside fairseq greedy and beam search ("
                        + ", ".join(sorted(ALGORITHMS)) + "), each optionally with decoding options of its "
                        "own, e.g. iad:iad-pass-tokens=64 (a sweep in one process)")
    parser.add_argument("--drafter-path", default=None,
                        help="block_nat drafter of gad and gad++ (an algorithm's own drafter-path=... overrides it)")
    parser.add_argument("--max-sentences", type=int, default=None,
                        help="decode only sentences with id < N (the first N lines of the split)")
    parser.add_argument("--batch-size", type=int, default=1, help="sentences per batch (1 = latency)")
    parser.add_argument("--repetitions", type=int, default=2, help="timed passes over the data, interleaved")
    parser.add_argument("--beam", type=int, default=5, help="beam size of the fairseq beam-search baseline")
    parser.add_argument("--max-len-a", type=float, default=0.0)
    parser.add_argument("--max-len-b", type=int, default=200)
    parser.add_argument("--references", nargs="+", required=True,
                        help="raw (untokenized) reference file(s), one line per sentence id")
    parser.add_argument("--sources", default=None, help="raw source file; with --gec, GLEU uses it")
    parser.add_argument("--gec", action="store_true",
                        help="also report GLEU (PyPI package gleu) for grammatical error correction")
    parser.add_argument("--edit-ratio", action="store_true",
                        help="at batch size 1, also report each algorithm's speedup per bin of the greedy "
                        "output's edit ratio against the source, with a plot (needs a joined dictionary)")
    parser.add_argument("--remove-bpe", default="subword_nmt", help="BPE marker to remove, as in fairseq")
    parser.add_argument("--detok", default="moses", choices=["moses", "space"],
                        help="detokenizer applied after BPE removal")
    parser.add_argument("--profile", action="store_true",
                        help="after the timed passes, one more pass per plugin algorithm that reports where its "
                        "time goes: drafter, verifier layers, vocabulary projection, acceptance, engine")
    parser.add_argument("--cpu", action="store_true", help="decode on the CPU even if a GPU is present")
    parser.add_argument("--threads", type=int, nargs="+", default=None,
                        help="CPU threads: every generator runs at each of these counts, a row each "
                        "(default: torch's count)")
    parser.add_argument("--ctranslate2", action="store_true",
                        help="also convert the checkpoint with CTranslate2's fairseq converter and run its greedy "
                        "search in float32 and int8 (rows ct2-float32, ct2-int8) at each thread count and at 1 "
                        "thread; a checkpoint it cannot convert gets a note instead")
    parser.add_argument("--out-dir", default="bench_results", help="where the .md, .json and .png go")
    parser.add_argument("--name", default="bench", help="file name stem of the outputs")
    args = parser.parse_args(argv)
    try:
        args.variants = [algorithm_variant(spec) for spec in args.algorithms]
    except argparse.ArgumentTypeError as error:
        parser.error(f"--algorithms: {error}")
    if len(set(args.algorithms)) < len(args.algorithms):
        parser.error("--algorithms: each algorithm (with its options) can be given once")
    if args.edit_ratio and args.batch_size != 1:
        parser.error("--edit-ratio compares per-sentence timings: use it with --batch-size 1")
    if args.gec and not args.sources:
        parser.error("--gec needs --sources (GLEU compares the output with the source and the references)")
    if args.threads and min(args.threads) < 1:
        parser.error("--threads: thread counts are 1 or more")
    if args.threads and len(set(args.threads)) < len(args.threads):
        parser.error("--threads: each thread count can be given once")
    return args


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


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def load_task_and_models(args, device):
    state = checkpoint_utils.load_checkpoint_to_cpu(args.path)
    saved_task = state["cfg"].task
    cfg = TranslationPardecConfig(
        data=args.data, source_lang=args.source_lang, target_lang=args.target_lang, dataset_impl="mmap",
        left_pad_source=saved_task.get("left_pad_source", True),
        left_pad_target=saved_task.get("left_pad_target", False),
        required_seq_len_multiple=1, train_subset="train",
    )
    task = TranslationPardecTask.setup_task(cfg)
    models, _ = checkpoint_utils.load_model_ensemble([args.path], task=task, state=state)
    for model in models:
        model.eval().to(device)
    return task, models


def make_batches(task, models, args, device):
    """Length-sorted batches (as fairseq-generate makes them) of the first N sentences."""
    task.load_dataset(args.subset)
    dataset = task.dataset(args.subset)
    limit = len(dataset) if args.max_sentences is None else min(args.max_sentences, len(dataset))
    max_positions = utils.resolve_max_positions(task.max_positions(), *[m.max_positions() for m in models])
    too_long = [i for i in range(limit) if not dataset.src_sizes[i] <= max_positions[0]]
    if too_long:
        raise SystemExit(f"error: {len(too_long)} sources (ids {too_long[:5]}...) exceed the model's "
                         f"{max_positions[0]} source positions; shorten or split those lines")
    indices = dataset.ordered_indices()
    indices = indices[indices < limit]
    batches = [dataset.collater([dataset[i] for i in batch]) for batch in
               dataset.batch_by_size(indices, max_sentences=args.batch_size, required_batch_size_multiple=1)]
    return [utils.move_to_cuda(batch, device) for batch in batches] if device.type == "cuda" else batches


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


def decode_all(runs, models, batches, repetitions, device):
    """Time every generator on every batch, interleaved, rotating which generator goes first.
    Outputs and plugin statistics are kept from the first timed repetition."""
    for run in runs:  # warm-up: first calls allocate caches and select kernels
        if run.threads is not None:
            torch.set_num_threads(run.threads)
        run.generator.generate(models, batches[0])
    for run in runs:
        run.batch_seconds = [[] for _ in batches]
    for repetition in range(repetitions):
        for run in runs:
            if run.plugin:
                stats = run.generator.restart_stats()
                if repetition == 0:
                    run.stats = stats
        for b, batch in enumerate(batches):
            shift = (b + repetition) % len(runs)
            for run in runs[shift:] + runs[:shift]:
                if run.threads is not None:
                    torch.set_num_threads(run.threads)
                synchronize(device)
                start = time.perf_counter()
                hypos = run.generator.generate(models, batch)
                synchronize(device)
                run.batch_seconds[b].append(time.perf_counter() - start)
                if repetition == 0:
                    for sentence_id, sentence_hypos in zip(batch["id"].tolist(), hypos):
                        run.tokens[sentence_id] = sentence_hypos[0]["tokens"].tolist()


def profile_modules(runs, models, batches):
    """One untimed pass per plugin run through ``ModuleProfile``: seconds per part, by run name. The
    pass counts into fresh statistics, so the reported ones stay the first timed repetition's."""
    profiles = {}
    for run in runs:
        if run.plugin:
            if run.threads is not None:
                torch.set_num_threads(run.threads)
            run.generator.restart_stats()
            profile = ModuleProfile()
            with profile.installed(run.generator):
                for batch in batches:
                    run.generator.generate(models, batch)
            profiles[run.name] = {part: profile.seconds[part] for part in PARTS}
    return profiles


def profile_table(profiles):
    lines = ["Where the time goes (one untimed pass; share of the algorithm's time, seconds in brackets):", "",
             "| algorithm | " + " | ".join(PARTS) + " |", "|---|" + "---:|" * len(PARTS)]
    for name, seconds in profiles.items():
        total = sum(seconds.values())
        lines.append(f"| {name} | " + " | ".join(f"{100 * seconds[part] / total:.1f}% ({seconds[part]:.2f})"
                                                  for part in PARTS) + " |")
    return "\n".join(lines) + "\n"


def detokenizer(args):
    if args.detok == "space":
        return lambda text: text
    tokenizer = encoders.build_tokenizer(Namespace(tokenizer="moses", source_lang=args.source_lang,
                                                   target_lang=args.target_lang, moses_no_dash_splits=False,
                                                   moses_no_escape=False))
    return tokenizer.decode


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def gleu_score(sources, references, hypotheses):
    """GLEU (Napoles et al.), in percent, through the ``gleu`` package's command-line tool."""
    with tempfile.TemporaryDirectory() as tmp:
        def write(name, lines):
            path = os.path.join(tmp, name)
            Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
            return path

        command = [str(Path(sys.executable).with_name("gleu")), "-f", "-s", write("src", sources),
                   "-o", write("hyp", hypotheses),
                   "-r", *[write(f"ref{i}", ref) for i, ref in enumerate(references)]]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return float(output.split()[-1])


def iteration_counts(run, n_tokens):
    """Verifier passes: counted by the plugin's engine; for fairseq greedy one pass per token."""
    if run.plugin:
        return {"iterations": run.stats.iterations, "mean_accepted": run.stats.mean_accepted,
                "drafting_share": run.stats.drafting_share}
    if base_name(run.name) == FAIRSEQ_GREEDY:
        return {"iterations": n_tokens, "mean_accepted": 1.0, "drafting_share": 0.0}
    return {"iterations": None, "mean_accepted": None, "drafting_share": None}


def summarize(runs, args, tgt_dict):
    ids = sorted(runs[0].tokens)
    references = [read_lines(path) for path in args.references]
    for path, lines in zip(args.references, references):
        if len(lines) <= ids[-1]:
            raise SystemExit(f"error: {path} has {len(lines)} lines but the data has sentence id {ids[-1]}")
    references = [[ref[i] for i in ids] for ref in references]
    sources = [read_lines(args.sources)[i] for i in ids] if args.sources else None
    detok = detokenizer(args)
    def batch_means(run):
        return np.mean(run.batch_seconds, axis=1)

    def fastest(name):  # a baseline at its best thread count
        return min((run for run in runs if base_name(run.name) == name), key=lambda run: batch_means(run).sum())

    greedy, beam = fastest(FAIRSEQ_GREEDY), fastest(fairseq_beam_name(args.beam))

    rows = []
    for run in runs:
        texts = [detok(tgt_dict.string(run.tokens[i], args.remove_bpe,
                                       extra_symbols_to_ignore={tgt_dict.eos()})) for i in ids]
        bleu = sacrebleu.metrics.BLEU()
        seconds = float(batch_means(run).sum())
        row = {
            "algorithm": run.name,
            "bleu": round(bleu.corpus_score(texts, references).score, 2),
            "bleu_signature": str(bleu.get_signature()),
            "identical_to_greedy": sum(run.tokens[i] == greedy.tokens[i] for i in ids) / len(ids),
            "tokens": sum(len(run.tokens[i]) for i in ids),
            "seconds": seconds,
            "sentences_per_second": len(ids) / seconds,
            "ms_per_token": 1000 * seconds / sum(len(run.tokens[i]) for i in ids),
            "speedup_vs_greedy": float(batch_means(greedy).sum()) / seconds,
            "speedup_vs_beam": float(batch_means(beam).sum()) / seconds,
            "per_batch_speedup_vs_greedy": (batch_means(greedy) / batch_means(run)).tolist(),
        }
        row.update(iteration_counts(run, row["tokens"]))
        if args.gec:
            row["gleu"] = round(gleu_score(sources, references, texts), 2)
        rows.append(row)
    return rows


def cpu_name():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_name()} ({os.cpu_count()} cores), {torch.get_num_threads()} torch threads"


def markdown_table(rows, args, meta):
    beam = fairseq_beam_name(args.beam)
    gleu = " GLEU |" if args.gec else ""
    lines = [
        f"Benchmark {meta['date']} on {meta['hardware']}: {meta['sentences']} sentences of "
        f"`{meta['subset']}`, batch size {args.batch_size}, {args.repetitions} interleaved repetitions.",
        "",
        f"| algorithm | BLEU |{gleu} identical to greedy | iterations | tokens / iteration | passes with a draft "
        f"| sentences / s | ms / token | speedup vs greedy | speedup vs {beam} |",
        "|---|---:|" + ("---:|" if args.gec else "") + "---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        iterations = "–" if row["iterations"] is None else str(row["iterations"])
        accepted = "–" if row["mean_accepted"] is None else f"{row['mean_accepted']:.2f}"
        drafting = "–" if row["drafting_share"] is None else f"{100 * row['drafting_share']:.0f}%"
        gleu_cell = f" {row['gleu']:.2f} |" if args.gec else ""
        lines.append(
            f"| {row['algorithm']} | {row['bleu']:.2f} |{gleu_cell} {100 * row['identical_to_greedy']:.1f}% "
            f"| {iterations} | {accepted} | {drafting} | {row['sentences_per_second']:.2f} | {row['ms_per_token']:.2f} "
            f"| {row['speedup_vs_greedy']:.2f}x | {row['speedup_vs_beam']:.2f}x |")
    lines += ["", f"BLEU signature: `{rows[0]['bleu_signature']}`"]
    if len({base_name(row["algorithm"]) for row in rows}) < len(rows):
        lines += ["", "`@Nt`: the row ran with N CPU threads; speedups are against fairseq greedy and beam search "
                  "each at its fastest thread count."]
    if meta.get("ctranslate2_note"):
        lines += ["", f"No CTranslate2 rows: {meta['ctranslate2_note']}"]
    return "\n".join(lines) + "\n"


def plot_speedups(rows, path, batch_size):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    rows = rows[::-1]  # first table row on top
    fig, ax = plt.subplots(figsize=(7, 0.6 * len(rows) + 1.5))
    ax.boxplot([row["per_batch_speedup_vs_greedy"] for row in rows], orientation="horizontal")
    ax.set_yticks(range(1, len(rows) + 1), [row["algorithm"] for row in rows])
    ax.axvline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    unit = "sentence" if batch_size == 1 else f"batch of {batch_size}"
    ax.set_xlabel(f"wall-clock speedup over fairseq greedy, per {unit}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def edit_ratio(source, output):
    """Token-level Levenshtein distance from the source to the output, over the source length."""
    previous = list(range(len(output) + 1))
    for i, a in enumerate(source, 1):
        current = [i]
        for j, b in enumerate(output, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a != b)))
        previous = current
    return previous[-1] / max(len(source), 1)


def speedup_by_edit_ratio(runs, batches, rows, pad, bins=(0.0, 0.1, 0.2, 0.3, 0.5, float("inf"))):
    """At batch size 1, each plugin algorithm's mean speedup over fairseq greedy per bin of how
    much the greedy output edits the source (Ge et al., Figure 5). Sources and outputs are
    compared as token ids, so the dictionary must be joined."""
    greedy = next(run for run in runs if base_name(run.name) == FAIRSEQ_GREEDY)
    ratios = np.array([
        edit_ratio([t for t in batch["net_input"]["src_tokens"][0].tolist() if t != pad],
                   greedy.tokens[batch["id"][0].item()])
        for batch in batches])
    table = []
    for low, high in zip(bins, bins[1:]):
        in_bin = (ratios >= low) & (ratios < high)
        if not in_bin.any():
            continue
        entry = {"edit_ratio": f"[{low:g}, {high:g})", "sentences": int(in_bin.sum())}
        for row in rows:
            if base_name(row["algorithm"]) != FAIRSEQ_GREEDY:
                entry[row["algorithm"]] = float(np.mean(np.array(row["per_batch_speedup_vs_greedy"])[in_bin]))
        table.append(entry)
    return ratios, table


def edit_ratio_table(by_edit_ratio):
    algorithms = [key for key in by_edit_ratio[0] if key not in ("edit_ratio", "sentences")]
    lines = ["Mean per-sentence speedup over fairseq greedy by edit ratio of the greedy output:", "",
             "| edit ratio | sentences | " + " | ".join(algorithms) + " |",
             "|---|---:|" + "---:|" * len(algorithms)]
    for entry in by_edit_ratio:
        lines.append(f"| {entry['edit_ratio']} | {entry['sentences']} | "
                     + " | ".join(f"{entry[a]:.2f}x" for a in algorithms) + " |")
    return "\n".join(lines) + "\n"


def plot_edit_ratio(ratios, rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for row in rows:
        if row["algorithm"] != FAIRSEQ_GREEDY:
            ax.scatter(ratios, row["per_batch_speedup_vs_greedy"], s=6, alpha=0.4, label=row["algorithm"])
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("edit ratio of the greedy output (token edits / source tokens)")
    ax.set_ylabel("speedup over fairseq greedy (per sentence)")
    ax.legend(fontsize=8, markerscale=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO,
                        force=True)
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    if args.threads:
        torch.set_num_threads(max(args.threads))
    device = torch.device("cuda" if torch.cuda.is_available() and not args.cpu else "cpu")
    torch.manual_seed(0)
    task, models = load_task_and_models(args, device)
    batches = make_batches(task, models, args, device)
    ctranslate2_note = None
    with tempfile.TemporaryDirectory() as converted:
        if args.ctranslate2:
            ctranslate2_note = ctranslate2_baseline.convert(args.path, args.data, args.source_lang, args.target_lang,
                                                            converted)
            if ctranslate2_note:
                logger.warning(ctranslate2_note)
        runs = build_runs(task, models, args, converted if args.ctranslate2 and not ctranslate2_note else None)
        with torch.no_grad():
            decode_all(runs, models, batches, args.repetitions, device)
            profiles = profile_modules(runs, models, batches) if args.profile else None
    rows = summarize(runs, args, task.target_dictionary)
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "hardware": hardware(device) if not args.threads or len(args.threads) == 1 else
        f"{cpu_name()} ({os.cpu_count()} cores), {' and '.join(map(str, args.threads))} threads",
        "ctranslate2_note": ctranslate2_note,
        "torch": torch.__version__,
        "checkpoint": args.path,
        "subset": args.subset,
        "sentences": len(runs[0].tokens),
        "batch_size": args.batch_size,
        "repetitions": args.repetitions,
    }
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = markdown_table(rows, args, meta)
    report = {"meta": meta, "results": rows}
    if args.edit_ratio:
        ratios, by_edit_ratio = speedup_by_edit_ratio(runs, batches, rows, task.source_dictionary.pad())
        report["speedup_by_edit_ratio"] = by_edit_ratio
        table += "\n" + edit_ratio_table(by_edit_ratio)
        plot_edit_ratio(ratios, rows, out_dir / f"{args.name}_edit_ratio.png")
    if profiles is not None:
        report["profile_seconds"] = profiles
        table += "\n" + profile_table(profiles)
    (out_dir / f"{args.name}.md").write_text(table, encoding="utf-8")
    (out_dir / f"{args.name}.json").write_text(json.dumps(report, indent=1))
    plot_speedups(rows, out_dir / f"{args.name}.png", args.batch_size)
    print(table)
    print(f"written: {out_dir / args.name}.{{md,json,png}}")


if __name__ == "__main__":
    main()
