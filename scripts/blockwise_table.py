#!/usr/bin/env python3
"""One table (Stern et al. Table 1 style) from the models of examples/libreoffice_en_de/run_blockwise.sh:
for each <targets>_<mode>[_lr<LR>]_k<k> folder, BLEU, mean accepted block (tokens per pass) and wall-clock
speedup over fairseq greedy of the same model, for exact, top-2 and top-3 acceptance."""
import argparse
import json
import re
import sys
from pathlib import Path

RULES = [("exact", "bpd"), ("top-2", "bpd:acceptance=top-k,acceptance-top-k=2"),
         ("top-3", "bpd:acceptance=top-k,acceptance-top-k=3")]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", help="runs/libreoffice_en_de/blockwise")
    parser.add_argument("--batch-size", type=int, default=1)
    args = parser.parse_args(argv)
    rows = []
    for model in sorted(Path(args.folder).iterdir()):
        match = re.fullmatch(r"(raw|distilled)_(frozen|fine-tuned)(?:_lr([0-9.e-]+))?_k(\d+)", model.name)
        bench = model / f"bench_b{args.batch_size}.json"
        if not match or not bench.exists():
            continue
        results = {r["algorithm"]: r for r in json.loads(bench.read_text())["results"]}
        meta = json.loads(bench.read_text())["meta"]
        target, mode, lr, k = match.group(1), match.group(2), match.group(3), int(match.group(4))
        if lr:
            mode = f"{mode}, lr {lr}"
        cells = [target, mode, str(k), f"{results['fairseq-greedy']['bleu']:.2f}"]
        for _, algorithm in RULES:
            r = results.get(algorithm)
            cells += ["–"] * 3 if r is None else [f"{r['bleu']:.2f}", f"{r['mean_accepted']:.2f}",
                                                   f"{r['speedup_vs_greedy']:.2f}x"]
        rows.append(((target, mode, k), cells, meta))
    if not rows:
        sys.exit(f"blockwise_table.py: no <targets>_<mode>_k<k>/bench_b{args.batch_size}.json under {args.folder}")
    rows.sort(key=lambda row: (row[0][0], row[0][1], row[0][2]))
    meta = rows[0][2]
    # models benchmarked on other days or with other thread counts say so in a column of their own
    mixed = len({(m["hardware"], m["date"]) for _, _, m in rows}) > 1
    where = "" if mixed else f", {meta['hardware']}, {meta['date']}"
    print(f"Blockwise parallel decoding, {meta['sentences']} sentences of `{meta['subset']}`, batch size "
          f"{meta['batch_size']}{where}. BLEU of fairseq greedy (head 1); per acceptance rule: BLEU, mean "
          "accepted block (tokens per pass), wall-clock speedup over fairseq greedy of the same model.\n")
    print("| targets | base | k | greedy BLEU | " + " | ".join(f"{n} BLEU | {n} block | {n} speedup" for n, _ in RULES)
          + " |" + (" measured on |" if mixed else ""))
    print("|---|---|---:|---:|" + "---:|" * 3 * len(RULES) + ("---|" if mixed else ""))
    for _, cells, row_meta in rows:
        if mixed:
            cells = cells + [f"{row_meta['hardware']}, {row_meta['date']}"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
