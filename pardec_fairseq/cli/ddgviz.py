"""DDGviz: how Jacobi or lookahead decoding reaches the greedy output, one picture per sentence.

For each chosen sentence it watches the decoding loop (an observer: nothing is replaced). For a
Jacobi algorithm it records every iterate, the verifier's prediction at each output position and
its probability, and writes
- ``ddg_ID.png``: a heatmap, iteration x position, cell = probability of the iterate's token, a
  dot where the token already equals the greedy output, a frame where it became final;
- ``ddg_ID.html``: the iterates as text and the decoding dependency graph: each token placed at
  the iteration that fixed it, tokens fixed by the same pass grouped, each linked to the token it
  was conditioned on.
For lookahead it records each pass's window, the pool n-grams it verified and where each fixed
token came from (the window, a pool n-gram or the verifier), and writes ``ddg_ID.png`` (tokens at
the pass that fixed them, coloured by origin) and ``ddg_ID.html`` (the dependency graph and, per
pass, the window, the n-grams and the tokens fixed).
"""
import html
import logging
from argparse import Namespace
from dataclasses import dataclass, field
from pathlib import Path
from typing import List

import torch

from pardec_fairseq.cli.loading import load_task_and_models, model_and_data_parser
from pardec_fairseq.decoding import build_generator
from pardec_fairseq.decoding.config import DecodingConfig
from pardec_fairseq.decoding.observers import LoopObserver

JACOBI_ALGORITHMS = ["jacobi", "gs-jacobi", "hybrid-jacobi"]


@dataclass
class Iterate:
    """One verifier pass: where the accepted prefix ended and what the verifier predicted after it."""

    start: int  # output index of the first prediction (accepted tokens before it)
    tokens: List[int]
    probabilities: List[float]
    kept: int  # predictions that became final in this pass


@dataclass
class Trace:
    iterates: List[Iterate] = field(default_factory=list)


class JacobiTracer(LoopObserver):
    """Records, for row 0, every iterate the verifier produced (an observer of the decoding loop)."""

    def __init__(self):
        self.trace = Trace()

    def after_pass(self, state, proposal, scores, verdict):
        probabilities, tokens = scores.all()[0].exp().max(-1)
        self.trace.iterates.append(Iterate(start=int(state.lengths[0]) + 1, tokens=tokens.tolist(),
                                           probabilities=probabilities.tolist(),
                                           kept=int(verdict.accepted[0]) + 1))


@dataclass
class LookaheadPass:
    """One lookahead pass of row 0: what it verified and what it fixed."""

    window: List[List[int]]  # levels x window tokens, level 0 (the trunk) first
    guesses: List[List[int]]  # the pool n-grams verified, each as its path of tokens
    tokens: List[int]  # the tokens the pass fixed: the accepted drafted ones, then the verifier's own
    origins: List[str]  # where each came from: "window", "pool" or "verifier"


class LookaheadTracer(LoopObserver):
    """Records, for row 0, each lookahead pass (an observer of the decoding loop)."""

    def __init__(self, levels, window):
        self.levels, self.window = levels, window
        self.passes: List[LookaheadPass] = []

    def after_pass(self, state, proposal, scores, verdict):
        count, nodes = int(proposal.lengths[0]), self.levels * self.window
        tokens, parents = proposal.tokens[0, :count].tolist(), proposal.parents[0, :count].tolist()
        has_child = set(parents[nodes:])
        guesses = []
        for position in range(nodes + 1, count + 1):  # the pool's trie: one path per leaf
            if position not in has_child:
                path = []
                while position > 0:
                    path.append(tokens[position - 1])
                    position = parents[position - 1]
                guesses.append(path[::-1])
        accepted = int(verdict.accepted[0])
        path = verdict.path[0, 1: accepted + 1].tolist()
        self.passes.append(LookaheadPass(
            window=[tokens[level * self.window: (level + 1) * self.window] for level in range(self.levels)],
            guesses=guesses, tokens=verdict.tokens[0, : accepted + 1].tolist(),
            origins=["window" if p <= nodes else "pool" for p in path] + ["verifier"]))


ORIGIN_COLOURS = {"window": "#f0a030", "pool": "#4a7bd0", "verifier": "#9a9a9a"}


def lookahead_fixed(passes: List[LookaheadPass], length: int):
    """The pass that fixed each of the ``length`` output tokens and the origin of each."""
    fixed_at, origins = [], []
    for t, one in enumerate(passes):
        for origin in one.origins[: length - len(fixed_at)]:
            fixed_at.append(t)
            origins.append(origin)
    return fixed_at, origins


def plot_lookahead(passes, labels, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fixed_at, origins = lookahead_fixed(passes, len(labels))
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(labels) + 2), max(3, 0.4 * len(passes) + 1.8)))
    for position, (t, origin, label) in enumerate(zip(fixed_at, origins, labels)):
        ax.add_patch(plt.Rectangle((position - 0.5, t - 0.5), 1, 1, color=ORIGIN_COLOURS[origin]))
        ax.text(position, t, label, ha="center", va="center", fontsize=6, rotation=60)
    ax.set_xlim(-0.5, len(labels) - 0.5)
    ax.set_ylim(len(passes) - 0.5, -0.5)
    ax.set_xticks(range(len(labels)), labels, rotation=70, fontsize=8)
    ax.set_yticks(range(len(passes)))
    ax.set_xlabel("output position (greedy output)")
    ax.set_ylabel("verifier pass")
    ax.set_title(title, fontsize=9)
    ax.legend(handles=[Patch(color=colour, label=f"from the {origin}" if origin != "verifier" else "verifier's own")
                       for origin, colour in ORIGIN_COLOURS.items()], loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_lookahead_html(passes, labels, symbol, path, title):
    fixed_at, origins = lookahead_fixed(passes, len(labels))
    counts = {origin: origins.count(origin) for origin in ORIGIN_COLOURS}

    def words(tokens):
        return " ".join(html.escape(symbol(t)) for t in tokens)

    rows = []
    for t, one in enumerate(passes):
        fixed = " ".join(f'<span style="background:{ORIGIN_COLOURS[o]}">{html.escape(symbol(tok))}</span>'
                         for tok, o in zip(one.tokens, one.origins))
        window = "<br>".join(f"{level}: {words(tokens)}" for level, tokens in enumerate(one.window))
        guesses = "<br>".join(words(guess) for guess in one.guesses) or "&ndash;"
        rows.append(f"<tr><th>{t}</th><td>{fixed}</td><td>{window}</td><td>{guesses}</td></tr>")
    Path(path).write_text(f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>
body {{ font-family: sans-serif; }} td, th {{ padding: 2px 8px; font-family: monospace; vertical-align: top; }}
span {{ color: white; padding: 0 2px; }}
</style></head><body>
<h2>{html.escape(title)}</h2>
<p>{len(passes)} verifier passes for {len(labels)} output tokens: {counts["window"]} accepted from the lookahead
window (its trunk and columns), {counts["pool"]} from pool n-grams, {counts["verifier"]} the verifier's own.</p>
<h3>Decoding dependency graph</h3>
<p>Each token sits at the pass that fixed it; a box groups the tokens one pass fixed together.</p>
{dependency_graph_svg(labels, fixed_at)}
<h3>Passes</h3>
<p>Per pass: the tokens it fixed (<span style="background:{ORIGIN_COLOURS["window"]}">window</span>
<span style="background:{ORIGIN_COLOURS["pool"]}">pool n-gram</span>
<span style="background:{ORIGIN_COLOURS["verifier"]}">verifier's own</span>), the window it verified
(level 0 is the trunk; column i of level l guesses the token l after trunk column i) and the pool n-grams
it verified after the last accepted token.</p>
<table><tr><th>pass</th><th>fixed</th><th>lookahead window</th><th>pool n-grams</th></tr>{"".join(rows)}</table>
</body></html>
""", encoding="utf-8")


def iterate_matrix(trace: Trace, output: List[int]):
    """[iterations, positions] probabilities (NaN where nothing was predicted), whether each
    prediction equals the output, and the iteration at which each position became final."""
    length = len(output)
    probabilities = torch.full((len(trace.iterates), length), float("nan"))
    correct = torch.zeros(len(trace.iterates), length, dtype=torch.bool)
    fixed_at = [0] * length
    for t, it in enumerate(trace.iterates):
        for offset, (token, probability) in enumerate(zip(it.tokens, it.probabilities)):
            position = it.start - 1 + offset  # 0-based output position
            if position >= length:
                break
            probabilities[t, position] = probability
            correct[t, position] = token == output[position]
            if offset < it.kept:
                fixed_at[position] = t
    return probabilities, correct, fixed_at


def plot_heatmap(trace, output, labels, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    probabilities, correct, fixed_at = iterate_matrix(trace, output)
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(output) + 2), max(3, 0.4 * len(trace.iterates) + 1.5)))
    image = ax.imshow(probabilities.numpy(), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    rows, cols = correct.nonzero(as_tuple=True)
    ax.scatter(cols.numpy(), rows.numpy(), s=12, c="white", marker="o", label="equals the greedy output")
    for position, t in enumerate(fixed_at):
        ax.add_patch(plt.Rectangle((position - 0.5, t - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.5))
    ax.set_xticks(range(len(output)), labels, rotation=70, fontsize=8)
    ax.set_yticks(range(len(trace.iterates)))
    ax.set_xlabel("output position (greedy output)")
    ax.set_ylabel("iteration")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper right", fontsize=7, handles=[
        ax.collections[0], plt.Rectangle((0, 0), 1, 1, fill=False, edgecolor="red", label="became final")])
    fig.colorbar(image, ax=ax, label="probability of the iterate's token")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def dependency_graph_svg(output_labels, fixed_at):
    """Tokens at (position, iteration fixed); one box per pass around what it fixed; an arrow from
    each token to the next, which was conditioned on it."""
    step_x, step_y, pad = 90, 60, 40
    iterations = max(fixed_at) + 1
    width, height = pad * 2 + step_x * len(output_labels), pad * 2 + step_y * iterations
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" '
             f'font-size="12"><defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="8" refY="4" '
             f'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>']
    for t in range(iterations):
        members = [p for p, f in enumerate(fixed_at) if f == t]
        if members:
            x0, x1 = pad + step_x * members[0] - 38, pad + step_x * members[-1] + 38
            y = pad + step_y * t - 18
            parts.append(f'<rect x="{x0}" y="{y}" width="{x1 - x0}" height="36" rx="8" fill="#e8f0fe" '
                         f'stroke="#4a7bd0"/><text x="4" y="{y + 22}" fill="#4a7bd0">{t}</text>')
    centres = [(pad + step_x * p, pad + step_y * t) for p, t in enumerate(fixed_at)]
    for (x0, y0), (x1, y1) in zip(centres, centres[1:]):
        parts.append(f'<line x1="{x0 + 30}" y1="{y0}" x2="{x1 - 32}" y2="{y1}" stroke="#555" '
                     f'marker-end="url(#arrow)"/>')
    for (x, y), label in zip(centres, output_labels):
        parts.append(f'<text x="{x}" y="{y + 4}" text-anchor="middle">{html.escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def write_html(trace, output, labels, symbol, path, title):
    probabilities, correct, fixed_at = iterate_matrix(trace, output)
    rows = []
    for t, it in enumerate(trace.iterates):
        cells = []
        for position in range(len(output)):
            if position < it.start - 1:
                cells.append('<td class="kept"></td>')
            elif torch.isnan(probabilities[t, position]):
                cells.append("<td></td>")
            else:
                token = it.tokens[position - it.start + 1]
                kind = "final" if fixed_at[position] == t else ("right" if correct[t, position] else "wrong")
                cells.append(f'<td class="{kind}" title="p={probabilities[t, position]:.3f}">'
                             f"{html.escape(symbol(token))}</td>")
        rows.append(f"<tr><th>{t}</th>{''.join(cells)}</tr>")
    header = "".join(f"<th>{html.escape(label)}</th>" for label in labels)
    Path(path).write_text(f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>
body {{ font-family: sans-serif; }} td, th {{ padding: 2px 6px; font-family: monospace; }}
.final {{ background: #4a7bd0; color: white; }} .right {{ background: #cde8cd; }}
.wrong {{ background: #f6d5d5; }} .kept {{ background: #eee; }}
</style></head><body>
<h2>{html.escape(title)}</h2>
<p>{len(trace.iterates)} verifier passes for {len(output)} output tokens.</p>
<h3>Decoding dependency graph</h3>
<p>Each token sits at the iteration that fixed it; a box groups the tokens one pass fixed together;
an arrow points from a token to the next one, whose prediction was conditioned on it.</p>
{dependency_graph_svg(labels, fixed_at)}
<h3>Iterates</h3>
<p>Row t: the verifier's predictions in pass t. Blue: became final in this pass; green: already
equal to the greedy output; red: not yet; grey: accepted before.</p>
<table><tr><th>iteration</th>{header}</tr>{''.join(rows)}</table>
</body></html>
""", encoding="utf-8")


def parse_args(argv=None):
    parser = model_and_data_parser("pardec-ddgviz", __doc__)
    parser.add_argument("--ids", type=int, nargs="+", required=True, help="sentence ids to draw")
    parser.add_argument("--gen-algo", default="jacobi", choices=JACOBI_ALGORITHMS + ["lookahead"])
    parser.add_argument("--jacobi-block-size", type=int, default=DecodingConfig.jacobi_block_size)
    parser.add_argument("--jacobi-parallel-length", type=int, default=None)
    parser.add_argument("--lookahead-window", type=int, default=DecodingConfig.lookahead_window)
    parser.add_argument("--lookahead-ngram", type=int, default=DecodingConfig.lookahead_ngram)
    parser.add_argument("--lookahead-guesses", type=int, default=DecodingConfig.lookahead_guesses)
    parser.add_argument("--lookahead-pool", type=int, default=DecodingConfig.lookahead_pool)
    parser.add_argument("--max-len-a", type=float, default=1.2)
    parser.add_argument("--max-len-b", type=int, default=10)
    parser.add_argument("--out-dir", default="ddgviz")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    task, models = load_task_and_models(args, torch.device("cpu"))
    task.load_dataset(args.subset)
    dataset = task.dataset(args.subset)
    tgt_dict = task.target_dictionary
    decoding = DecodingConfig(**{name: getattr(args, name) for name in (
        "jacobi_block_size", "jacobi_parallel_length", "lookahead_window", "lookahead_ngram", "lookahead_guesses",
        "lookahead_pool")})
    generation = Namespace(max_len_a=args.max_len_a, max_len_b=args.max_len_b, min_len=1, unkpen=0.0,
                           lenpen=1.0, temperature=1.0)
    generator = build_generator(args.gen_algo, models, tgt_dict, generation, decoding,
                                src_dict=task.source_dictionary)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for sentence_id in args.ids:
        if not 0 <= sentence_id < len(dataset):
            raise SystemExit(f"error: --ids {sentence_id}: the {args.subset} split has ids 0..{len(dataset) - 1}")
        sample = dataset.collater([dataset[sentence_id]])
        lookahead = args.gen_algo == "lookahead"
        tracer = LookaheadTracer(args.lookahead_ngram - 1, args.lookahead_window) if lookahead else JacobiTracer()
        generator.decoder.observers.append(tracer)
        with torch.no_grad():
            output = generator.generate(models, sample)[0][0]["tokens"].tolist()
        generator.decoder.observers.remove(tracer)
        labels = [tgt_dict[t] for t in output]
        source = task.source_dictionary.string(sample["net_input"]["src_tokens"][0])
        title = f"{args.gen_algo}, {args.subset} sentence {sentence_id}: {source}"
        png, page = out_dir / f"ddg_{sentence_id}.png", out_dir / f"ddg_{sentence_id}.html"
        if lookahead:
            passes = len(tracer.passes)
            plot_lookahead(tracer.passes, labels, png, title)
            write_lookahead_html(tracer.passes, labels, lambda t: tgt_dict[t], page, title)
        else:
            passes = len(tracer.trace.iterates)
            plot_heatmap(tracer.trace, output, labels, png, title)
            write_html(tracer.trace, output, labels, lambda t: tgt_dict[t], page, title)
        print(f"sentence {sentence_id}: {passes} iterations for {len(output)} tokens -> {png}, .html")


if __name__ == "__main__":
    main()
