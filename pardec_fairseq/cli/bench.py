"""Benchmark: fairseq's own greedy and beam search beside the plugin's algorithms, in one process.

Every generator decodes the same batches of the same model, in chunks of ``--chunk-batches`` batches:
each generator all of a chunk's batches in turn (as fairseq-generate decodes a test set), the order of
the generators rotated each chunk and repetition, so that machine noise hits all of them alike
(``--order runs``: each generator over all batches in turn; ``batches``: each batch by every generator).
With several ``--threads`` every generator runs at each thread count (a row each). With
``--ctranslate2`` the checkpoint is converted and CTranslate2's greedy search runs beside them in
float32 and int8. Reported per row: BLEU (sacrebleu on de-BPE'd, detokenized text, with its
signature), the share of outputs identical to fairseq greedy, verifier iterations, tokens per
iteration, sentences per second, milliseconds per output token and wall-clock ratios against
fairseq greedy and beam search, each at its fastest thread count.
"""
import argparse
import json
import logging
import os
import tempfile
import time
from pathlib import Path

import torch

from pardec_fairseq.cli import ctranslate2_baseline
from pardec_fairseq.cli.bench_metrics import speedup_by_edit_ratio, summarize
from pardec_fairseq.cli.bench_report import (cpu_name, edit_ratio_table, hardware, markdown_table, plot_edit_ratio,
                                             plot_speedups, profile_table)
from pardec_fairseq.cli.bench_runs import algorithm_variant, build_runs
from pardec_fairseq.cli.bench_timing import ORDERS, decode_all, profile_modules
from pardec_fairseq.cli.loading import load_task_and_models, make_batches, model_and_data_parser
from pardec_fairseq.decoding import ALGORITHMS


logger = logging.getLogger("pardec_fairseq.bench")


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
    parser.add_argument("--repetitions", type=int, default=2,
                        help="timed passes over the data, the generators' order rotated each time")
    parser.add_argument("--order", choices=ORDERS, default="chunks",
                        help="chunks: each chunk of --chunk-batches batches by every generator in turn, the order "
                        "rotated each chunk (a shared machine's load drifts over minutes: the generators meet it "
                        "alike, and only a chunk's first sentence starts cold); runs: each generator decodes every "
                        "batch, then the next one (as fairseq-generate decodes a test set); batches: each batch by "
                        "every generator in turn, the order rotated each batch (every sentence then starts after "
                        "other generators ran, as in a process that switches models between sentences)")
    parser.add_argument("--chunk-batches", type=int, default=50,
                        help="batches per chunk with --order chunks")
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
    if args.chunk_batches < 1:
        parser.error("--chunk-batches: give 1 or more batches per chunk")
    if args.threads and len(set(args.threads)) < len(args.threads):
        parser.error("--threads: each thread count can be given once")
    return args


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
            decode_all(runs, models, batches, args.repetitions, device, args.order, args.chunk_batches)
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
        "order": args.order,
        **({"chunk_batches": args.chunk_batches} if args.order == "chunks" else {}),
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
