"""The benchmark's report: the markdown tables (results, profile, speedup by edit ratio), the
hardware line and the plots."""
import os
import platform

import torch

from pardec_fairseq.cli.bench_runs import FAIRSEQ_GREEDY, base_name, fairseq_beam_name
from pardec_fairseq.decoding.observers import PARTS


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
    against_plugin = "speedup_vs_plugin_greedy" in rows[0]
    lines = [
        f"Benchmark {meta['date']} on {meta['hardware']}: {meta['sentences']} sentences of "
        f"`{meta['subset']}`, batch size {args.batch_size}, {args.repetitions} repetitions, "
        + {"runs": "each generator over every batch in turn.",
           "batches": "batch by batch (`--order batches`).",
           "chunks": f"in chunks of {args.chunk_batches} batches, each generator over a chunk in turn "
                     "(`--order chunks`)."}[args.order],
        "",
        f"| algorithm | BLEU |{gleu} identical to greedy | iterations | tokens / iteration | passes with a draft "
        f"| sentences / s | ms / token | speedup vs greedy | speedup vs {beam} |"
        + (" vs plugin greedy |" if against_plugin else ""),
        "|---|---:|" + ("---:|" if args.gec else "") + "---:|---:|---:|---:|---:|---:|---:|---:|"
        + ("---:|" if against_plugin else ""),
    ]
    for row in rows:
        iterations = "–" if row["iterations"] is None else str(row["iterations"])
        accepted = "–" if row["mean_accepted"] is None else f"{row['mean_accepted']:.2f}"
        drafting = "–" if row["drafting_share"] is None else f"{100 * row['drafting_share']:.0f}%"
        gleu_cell = f" {row['gleu']:.2f} |" if args.gec else ""
        lines.append(
            f"| {row['algorithm']} | {row['bleu']:.2f} |{gleu_cell} {100 * row['identical_to_greedy']:.1f}% "
            f"| {iterations} | {accepted} | {drafting} | {row['sentences_per_second']:.2f} | {row['ms_per_token']:.2f} "
            f"| {row['speedup_vs_greedy']:.2f}x | {row['speedup_vs_beam']:.2f}x |"
            + (f" {against_plugin_greedy(row)} |" if against_plugin else ""))
    lines += ["", f"BLEU signature: `{rows[0]['bleu_signature']}`"]
    if len({base_name(row["algorithm"]) for row in rows}) < len(rows):
        lines += ["", "`@Nt`: the row ran with N CPU threads; speedups are against fairseq greedy and beam search "
                  "each at its fastest thread count."]
    if against_plugin and args.repetitions > 1:
        lines += ["", "vs plugin greedy: against the plugin's `greedy` row, over all repetitions (in brackets the "
                  "lowest and highest ratio of a single repetition)."]
    if meta.get("ctranslate2_note"):
        lines += ["", f"No CTranslate2 rows: {meta['ctranslate2_note']}"]
    return "\n".join(lines) + "\n"


def against_plugin_greedy(row):
    """A row's speedup over the plugin's greedy search, with the range of its repetitions where there are several."""
    ratios = row["speedup_vs_plugin_greedy_by_repetition"]
    spread = f" ({min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else ""
    return f"{row['speedup_vs_plugin_greedy']:.2f}x{spread}"


def profile_table(profiles):
    lines = ["Where the time goes (one untimed pass; share of the algorithm's time, seconds in brackets):", "",
             "| algorithm | " + " | ".join(PARTS) + " |", "|---|" + "---:|" * len(PARTS)]
    for name, seconds in profiles.items():
        total = sum(seconds.values())
        lines.append(f"| {name} | " + " | ".join(f"{100 * seconds[part] / total:.1f}% ({seconds[part]:.2f})"
                                                  for part in PARTS) + " |")
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
