#!/usr/bin/env python3
"""M2 scores of several decodings of one test set, as a markdown table: precision, recall and F0.5
(examples/bea19_gec/m2scorer.py, the official scorer's computation) of each fairseq-generate log,
and how many of its outputs are identical to the first log's (fairseq's greedy search: the plugin's
lossless algorithms must give exactly its outputs).

    python examples/bea19_gec/m2_table.py GOLD.m2 --log NAME GENERATE_LOG [--log NAME GENERATE_LOG ...]
        [--out TABLE.md]
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from m2scorer import generate_hypotheses, load_annotation, score  # noqa: E402


def table(gold, logs, beta=0.5):
    sources, golds = load_annotation(gold)
    rows = [f"| decoding | sentences | P | R | F{beta:g} | correct / proposed / gold edits | identical to {logs[0][0]} |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    first = None
    for name, log in logs:
        hypotheses = generate_hypotheses(log)
        p, r, f, correct, proposed, gold_edits = score(hypotheses, sources, golds, beta)
        first = first or hypotheses
        same = sum(a == b for a, b in zip(hypotheses, first))
        rows.append(f"| {name} | {len(hypotheses)} | {100 * p:.2f} | {100 * r:.2f} | {100 * f:.2f} | "
                    f"{correct} / {proposed} / {gold_edits} | {same} / {len(first)} |")
    return "\n".join(rows) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gold", help="the M2 file of the test set")
    parser.add_argument("--log", nargs=2, action="append", required=True, metavar=("NAME", "GENERATE_LOG"),
                        help="a decoding's name and its fairseq-generate log; the first is the reference")
    parser.add_argument("--beta", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = parser.parse_args(argv)
    try:
        text = table(args.gold, args.log, args.beta)
    except (OSError, ValueError) as error:
        sys.exit(f"m2_table.py: {error}")
    print(text, end="")
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
