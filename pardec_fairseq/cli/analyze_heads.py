"""What the heads of a ``blockwise_transformer`` know, measured against its own greedy output.

For each sentence it decodes the greedy output of head 1 with fairseq's ``SequenceGenerator``
(beam 1), then runs the model once over that output with every head, which is what blockwise
parallel decoding sees, since it decodes exactly that output. It reports
- each head's entropy at every position (Kim et al. Figure 2): later heads are less sure;
- how often each head's top-k holds the greedy token it should predict;
- consecutive repetition in the heads' top-1 blocks against the greedy output's own (Kim Table 3);
- oracle block efficiency over the heads' top-k lattice (Kim Figure 6): tokens per pass of
  blockwise decoding if a drafted token were accepted whenever the greedy token is in its head's
  top k. With k = 1 this is exactly what ``--gen-algo bpd`` achieves, pass for pass.
Outputs: ``NAME.md`` (tables), ``NAME.json`` and ``NAME.png`` (entropy histograms, agreement).
"""
import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List

import torch
import torch.nn.functional as F
from fairseq.sequence_generator import SequenceGenerator

from pardec_fairseq.cli.loading import load_task_and_models, make_batches, model_and_data_parser
from pardec_fairseq.decoding.options import DecodingOptions


@dataclass
class HeadStatistics:
    """Sums over the analysed sentences; ``top_ks`` are the k of the top-k lattice."""

    heads: int
    top_ks: List[int]
    entropies: List[List[float]] = field(default_factory=list)  # [head] entropy (nats) at each position
    hits: Dict[int, List[int]] = field(default_factory=dict)  # k -> [head] positions with the greedy token in top k
    positions: List[int] = field(default_factory=list)  # [head] positions with a greedy token to predict
    passes: Dict[int, Dict[int, int]] = field(default_factory=dict)  # k -> sentence id -> oracle passes
    lengths: Dict[int, int] = field(default_factory=dict)  # sentence id -> greedy output tokens (with EOS)
    draft_pairs: int = 0
    draft_repeats: int = 0
    greedy_pairs: int = 0
    greedy_repeats: int = 0

    def __post_init__(self):
        self.entropies = self.entropies or [[] for _ in range(self.heads)]
        self.positions = self.positions or [0] * self.heads
        self.hits = self.hits or {k: [0] * self.heads for k in self.top_ks}
        self.passes = self.passes or {k: {} for k in self.top_ks}

    def block_efficiency(self, k):
        return sum(self.lengths.values()) / max(1, sum(self.passes[k].values()))


def oracle_passes(matches: List[int], length: int, max_len: int) -> int:
    """Passes of blockwise decoding over an output of ``length`` tokens (EOS included) when the
    draft made at position j keeps its first ``matches[j]`` tokens: the first pass yields one token,
    each later one the kept draft plus the verifier's own token. Drafts stop at output index
    ``max_len`` (a forced EOS after it is never drafted), as in the engine."""
    passes, position = 1, 0
    while position + 1 < length:
        kept = max(0, min(matches[position], max_len - position - 1))
        position += kept + 1
        passes += 1
    return passes


def analyze_batch(model, sample, outputs, max_len, stats: HeadStatistics):
    """Add one batch: ``outputs`` are the greedy outputs (token tensors ending in EOS) of its rows."""
    eos, pad = model.decoder.dictionary.eos(), model.decoder.dictionary.pad()
    rows, heads = len(outputs), stats.heads
    lengths = torch.tensor([len(o) for o in outputs])
    width = int(lengths.max())
    greedy = torch.full((rows, width + heads), pad, dtype=torch.long)
    for row, output in enumerate(outputs):
        greedy[row, :len(output)] = output.cpu()
    prev_output_tokens = torch.cat([torch.full((rows, 1), eos), greedy[:, :width - 1]], 1)
    net_input = sample["net_input"]
    device = net_input["src_tokens"].device
    logits, _ = model(net_input["src_tokens"], net_input["src_lengths"], prev_output_tokens.to(device),
                      block_heads=list(range(heads)))
    positions = torch.arange(width)
    top = max(stats.top_ks)
    in_top = {k: [] for k in stats.top_ks}  # k -> [head] [rows, width] greedy token in the head's top k
    drafts = []
    for head, head_logits in enumerate(logits):
        head_logits = head_logits.float().cpu()
        target = greedy[:, head: head + width]  # head h + 1 at position j predicts output token j + h
        valid = (positions + head).unsqueeze(0) < lengths.unsqueeze(1)
        entropy = torch.special.entr(F.softmax(head_logits, -1)).sum(-1)
        stats.entropies[head].extend(entropy[valid].tolist())
        stats.positions[head] += int(valid.sum())
        ranked = head_logits.topk(min(top, head_logits.size(-1)), -1).indices
        drafts.append(ranked[..., 0])
        for k in stats.top_ks:
            hit = ranked[..., :k].eq(target.unsqueeze(-1)).any(-1) & valid
            in_top[k].append(hit)
            stats.hits[k][head] += int(hit.sum())
    block = torch.stack(drafts, -1)  # [rows, width, heads] the heads' top-1 block at each position
    whole = (positions + heads - 1).unsqueeze(0) < lengths.unsqueeze(1)
    stats.draft_pairs += int(whole.sum()) * (heads - 1)
    stats.draft_repeats += int(block[..., 1:].eq(block[..., :-1])[whole].sum())
    for row, output in enumerate(outputs):
        tokens = output[:-1].tolist()  # the EOS is not a repetition
        stats.greedy_pairs += max(0, len(tokens) - 1)
        stats.greedy_repeats += sum(a == b for a, b in zip(tokens, tokens[1:]))
    ids = sample["id"].tolist()
    for k in stats.top_ks:
        # drafted tokens kept at each position: consecutive heads 2.. whose top k holds the greedy token
        if heads > 1:
            kept = torch.stack(in_top[k][1:], -1).long().cumprod(-1).sum(-1)
        else:
            kept = torch.zeros(rows, width, dtype=torch.long)
        for row, sentence in enumerate(ids):
            stats.passes[k][sentence] = oracle_passes(kept[row].tolist(), int(lengths[row]), max_len)
    for row, sentence in enumerate(ids):
        stats.lengths[sentence] = int(lengths[row])


def analyze(models, tgt_dict, batches, max_len_a, max_len_b, top_ks) -> HeadStatistics:
    model = models[0]
    heads_module = getattr(model.decoder, "blockwise_heads", None)
    if heads_module is None:
        raise ValueError("the checkpoint is not a blockwise_transformer (no heads to analyse); train one with "
                         "--arch blockwise_transformer --block-heads K")
    greedy = SequenceGenerator(models, tgt_dict, beam_size=1, max_len_a=max_len_a, max_len_b=max_len_b)
    stats = HeadStatistics(heads=heads_module.heads, top_ks=sorted(set(top_ks)))
    length_limit = DecodingOptions(max_len_a=max_len_a, max_len_b=max_len_b)
    with torch.no_grad():
        for sample in batches:
            hypotheses = greedy.generate(models, sample)
            outputs = [h[0]["tokens"] for h in hypotheses]
            max_len = length_limit.max_len(sample["net_input"]["src_tokens"].size(1), model.max_decoder_positions())
            analyze_batch(model, sample, outputs, max_len, stats)
    return stats


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def report(stats: HeadStatistics, title) -> str:
    lines = [f"{title}", "",
             "| head | positions | mean entropy (nats) | median | 90th percentile | "
             + " | ".join(f"greedy token in top {k}" for k in stats.top_ks) + " |",
             "|---:|---:|---:|---:|---:|" + "---:|" * len(stats.top_ks)]
    for head in range(stats.heads):
        values, n = stats.entropies[head], max(1, stats.positions[head])
        lines.append(f"| {head + 1} | {stats.positions[head]} | {sum(values) / max(1, len(values)):.3f} | "
                     f"{percentile(values, 0.5):.3f} | {percentile(values, 0.9):.3f} | "
                     + " | ".join(f"{100 * stats.hits[k][head] / n:.1f}%" for k in stats.top_ks) + " |")
    lines += ["", "| acceptance | oracle tokens / pass |", "|---|---:|"]
    for k in stats.top_ks:
        rule = "exact (top 1): `--gen-algo bpd`" if k == 1 else f"greedy token in each head's top {k}"
        lines.append(f"| {rule} | {stats.block_efficiency(k):.2f} |")
    draft_rate = stats.draft_repeats / max(1, stats.draft_pairs)
    greedy_rate = stats.greedy_repeats / max(1, stats.greedy_pairs)
    lines += ["", f"Consecutive repetition: {100 * draft_rate:.1f}% of adjacent token pairs in the heads' "
              f"top-1 blocks are equal, {100 * greedy_rate:.1f}% in the greedy outputs.", ""]
    return "\n".join(lines)


def plot(stats: HeadStatistics, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (entropy_axis, agreement_axis) = plt.subplots(1, 2, figsize=(12, 4.5))
    top = max((max(v) for v in stats.entropies if v), default=1.0)
    for head, values in enumerate(stats.entropies):
        if not values:  # outputs too short for this head
            continue
        entropy_axis.hist(values, bins=40, range=(0, top), histtype="step", density=True, label=f"head {head + 1}")
    entropy_axis.set_xlabel("entropy (nats)")
    entropy_axis.set_ylabel("density")
    entropy_axis.set_title("entropy of each head's distribution")
    entropy_axis.legend()
    heads = list(range(1, stats.heads + 1))
    for k in stats.top_ks:
        shares = [100 * stats.hits[k][h] / max(1, stats.positions[h]) for h in range(stats.heads)]
        agreement_axis.plot(heads, shares, marker="o",
                            label=f"top {k} (oracle {stats.block_efficiency(k):.2f} tokens / pass)")
    agreement_axis.set_xlabel("head")
    agreement_axis.set_ylabel("% positions with the greedy token")
    agreement_axis.set_xticks(heads)
    agreement_axis.set_title("greedy token in the head's top k")
    agreement_axis.legend()
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def parse_args(argv=None):
    parser = model_and_data_parser("pardec-analyze-heads", __doc__)
    parser.add_argument("--max-sentences", type=int, default=None, help="analyse only sentences with id < N")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--top-k", type=int, nargs="+", default=[1, 2, 3, 5],
                        help="k of the top-k lattice for agreement and oracle block efficiency")
    parser.add_argument("--max-len-a", type=float, default=0.0)
    parser.add_argument("--max-len-b", type=int, default=200)
    parser.add_argument("--cpu", action="store_true", help="run on the CPU even if a GPU is present")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--out-dir", default="heads_analysis")
    parser.add_argument("--name", default="heads")
    args = parser.parse_args(argv)
    if min(args.top_k) < 1:
        parser.error("--top-k values must be at least 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.cpu else "cpu")
    task, models = load_task_and_models(args, device)
    batches = make_batches(task, models, args, device)
    try:
        stats = analyze(models, task.target_dictionary, batches, args.max_len_a, args.max_len_b, args.top_k)
    except ValueError as error:
        raise SystemExit(f"error: {error}")
    title = (f"Heads of `{args.path}` ({stats.heads} heads) on {len(stats.lengths)} sentences of "
             f"`{args.subset}`, against head 1's greedy output")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = report(stats, title)
    (out_dir / f"{args.name}.md").write_text(text + "\n", encoding="utf-8")
    summary = asdict(stats)
    summary["entropies"] = None  # the histogram is in the plot; the means are in the table
    summary["block_efficiency"] = {k: stats.block_efficiency(k) for k in stats.top_ks}
    (out_dir / f"{args.name}.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    plot(stats, out_dir / f"{args.name}.png", title)
    print(text)
    print(f"written: {out_dir}/{args.name}.{{md,json,png}}")


if __name__ == "__main__":
    main()
