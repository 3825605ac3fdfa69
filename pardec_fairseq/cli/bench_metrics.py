"""What the benchmark reports per row: quality (BLEU, GLEU), agreement with fairseq greedy, passes
and speed, and the speedup by how much an output edits its source."""
import os
import subprocess
import sys
import tempfile
from argparse import Namespace
from pathlib import Path

import numpy as np
import sacrebleu
from fairseq.data import encoders

from pardec_fairseq.cli.bench_runs import FAIRSEQ_GREEDY, PLUGIN_GREEDY, base_name, fairseq_beam_name


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

    def repetition_seconds(run):  # [repetitions]: each timed pass over the data on its own
        return np.sum(run.batch_seconds, axis=0)

    def fastest(name, plugin=False):  # a baseline at its best thread count
        return min((run for run in runs if base_name(run.name) == name and run.plugin == plugin),
                   key=lambda run: batch_means(run).sum(), default=None)

    greedy, beam = fastest(FAIRSEQ_GREEDY), fastest(fairseq_beam_name(args.beam))
    plugin_greedy = fastest(PLUGIN_GREEDY, plugin=True)

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
        if plugin_greedy is not None:  # the issues' yardstick, and each repetition's own ratio (the machine's noise)
            row["speedup_vs_plugin_greedy"] = float(batch_means(plugin_greedy).sum()) / seconds
            row["speedup_vs_plugin_greedy_by_repetition"] = \
                (repetition_seconds(plugin_greedy) / repetition_seconds(run)).tolist()
        row.update(iteration_counts(run, row["tokens"]))
        if args.gec:
            row["gleu"] = round(gleu_score(sources, references, texts), 2)
        rows.append(row)
    return rows


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
