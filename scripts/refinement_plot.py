#!/usr/bin/env python3
"""Draft refinement at this project's scale (Kim et al. 2024, Figure 6 and Table 4): tokens per pass
of blockwise parallel decoding with the heads' top-1 draft, with the P best paths of their top-k
lattice by the heads alone, rescored by an n-gram model and by a neural one, against the oracle of
the top-k lattice (a drafted token kept whenever the greedy token is among its head's top k).
  scripts/refinement_plot.py HEADS.json BENCH.json OUT
HEADS.json: `pardec-analyze-heads ... --top-k 1 2 4 8` on the same sentences as BENCH.json, a
`pardec-bench` run with rows `bpd`, `bpd:refine-drafts=P`, `bpd:refine=ngram[,refine-drafts=P]`,
`bpd:refine=neural,...` (and `greedy`). Writes OUT.md (the table) and OUT.png (the plot)."""
import argparse
import json
import logging
import sys
from pathlib import Path

from pardec_fairseq.cli.bench_runs import algorithm_variant

KINDS = {"none": "heads alone", "ngram": "n-gram rescoring", "neural": "neural rescoring"}


def refined_rows(results):
    """``(kind, drafts, top_k, row)`` for each bpd row of a benchmark."""
    rows = []
    for row in results:
        try:
            name, options = algorithm_variant(row["algorithm"].split(" @")[0])
        except argparse.ArgumentTypeError:  # fairseq's and CTranslate2's rows
            continue
        if name != "bpd":
            continue
        rows.append((options.get("refine", "none"), options.get("refine_drafts", 1), options.get("refine_top_k", 4),
                     row))
    return rows


def tokens_per_pass(row):
    return row["tokens"] / row["iterations"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("heads", help="pardec-analyze-heads JSON")
    parser.add_argument("bench", help="pardec-bench JSON")
    parser.add_argument("out", help="output path without extension")
    args = parser.parse_args(argv)
    oracle = {int(k): v for k, v in json.loads(Path(args.heads).read_text())["block_efficiency"].items()}
    bench = json.loads(Path(args.bench).read_text())
    results = bench["results"]
    greedy = next((r for r in results if r["algorithm"].split(" @")[0] == "greedy"), None)
    rows = refined_rows(results)
    plain = next((row for kind, drafts, _, row in rows if kind == "none" and drafts == 1), None)
    if plain is None:
        sys.exit("refinement_plot.py: the benchmark has no plain `bpd` row to compare with")
    meta = bench["meta"]
    lines = [f"Draft refinement, `{meta['checkpoint']}`, {meta['sentences']} sentences of `{meta['subset']}`, batch "
             f"{meta['batch_size']}, {meta['hardware']}, {meta['date']}.", "",
             "| drafts | P | top-k | tokens / pass | vs plain bpd | ms / token | vs plugin greedy |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for kind, drafts, top_k, row in sorted(rows, key=lambda r: (list(KINDS).index(r[0]), r[1], r[2])):
        plain_draft = kind == "none" and drafts == 1
        vs_greedy = f"{greedy['ms_per_token'] / row['ms_per_token']:.2f}x" if greedy else "–"
        lines.append(f"| {'top-1 of each head' if plain_draft else KINDS[kind]} | {drafts} | "
                     f"{1 if plain_draft else top_k} | {tokens_per_pass(row):.3f} | "
                     f"{100 * (tokens_per_pass(row) / tokens_per_pass(plain) - 1):+.1f}% | "
                     f"{row['ms_per_token']:.2f} | {vs_greedy} |")
    lines += ["", "| oracle of the heads' top-k lattice | " + " | ".join(f"k = {k}" for k in sorted(oracle)) + " |",
              "|---|" + "---:|" * len(oracle),
              "| tokens / pass | " + " | ".join(f"{oracle[k]:.3f}" for k in sorted(oracle)) + " |"]
    Path(f"{args.out}.md").write_text("\n".join(lines) + "\n")

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # importing fairseq turned logging up
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for kind, label in KINDS.items():
        for top_k in sorted({k for rk, drafts, k, _ in rows if rk == kind and (drafts > 1 or kind != "none")}):
            # the heads alone's best path is each head's top-1, whatever the lattice's k
            points = sorted((drafts, tokens_per_pass(row)) for rk, drafts, k, row in rows
                            if rk == kind and (k == top_k or (kind == "none" and drafts == 1)))
            ax.plot(*zip(*points), marker="o", label=f"{label}, top-{top_k}")
    ax.plot([1], [tokens_per_pass(plain)], marker="s", color="black", linestyle="none", label="top-1 of each head")
    for k, value in sorted(oracle.items()):
        ax.axhline(value, linestyle="--", linewidth=1, color="grey")
        ax.annotate(f"oracle top-{k}", (0.98, value), xycoords=("axes fraction", "data"), ha="right", va="bottom",
                    fontsize=8, color="grey")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("drafts verified per pass (P)")
    ax.set_ylabel("tokens per pass")
    ax.set_title("blockwise parallel decoding: drafts from the heads' top-k lattice")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{args.out}.png", dpi=120)
    plt.close(fig)
    print("\n".join(lines))
    print(f"written: {args.out}.{{md,png}}")


if __name__ == "__main__":
    main()
