"""What one verifier pass costs as it scores more new tokens: the bound on every algorithm here.

For each of the first sentences of a split (batch size 1) and each verifier path (``--verifiers``,
default the fast path beside the fairseq path, taking turns sentence by sentence) it runs the
encoder, caches a prefix of ``--prefix`` tokens, then times passes that score n new tokens on top of
it and rolls them back. Reported per n and path: the median time of the decoder layers alone and
with the projection of all n positions onto the vocabulary, each also relative to that path's
one-token pass. With every drafted token accepted an algorithm can be at most (n / relative cost)
times faster than greedy decoding, less the encoder's share, which no algorithm here shortens. The
``arithmetic`` path times the fast path's compiled calls alone (its decoder layers and its
projection, on a CPU in float32): the pass with the engine's bookkeeping stripped, what a pass
cannot cost less than on this machine. ``--limits`` measures the machine itself (``MachineLimits``):
the peak rate of the vector kernel's multiply-adds and the bandwidth at which one row reads the
verifier's weights, in cache and from memory, and from them the floor of an n-token pass (its bytes at
that bandwidth, or its multiply-adds at the peak, whichever takes longer).
"""
import math
import statistics
import time
from argparse import Namespace

import numba
import numpy as np
import torch

from pardec_fairseq.cli.bench_report import hardware
from pardec_fairseq.cli.loading import load_task_and_models, model_and_data_parser
from pardec_fairseq.decoding import vector_kernels
from pardec_fairseq.decoding.options import DecodingOptions
from pardec_fairseq.decoding.fast_verifier import FastVerifier
from pardec_fairseq.decoding.registry import build_verifier


class _Projection:
    """What ``time_pass`` reads of a pass: ``all()`` projects it onto the vocabulary."""

    def __init__(self, project):
        self.all = project


def kernel_decoder(verifier, option: str, compiled: bool = False):
    """The fast path's first decoder, whose products (with ``compiled``, its compiled calls) ``option``
    times on the vector kernel; refused with a message where the model runs none there (a model the fast
    path falls back to the fairseq path for, another output layer, not a CPU in float32)."""
    decoder = verifier.fast_decoders[0] if isinstance(verifier, FastVerifier) else None
    if decoder is None or (compiled and decoder.compiled is None) or decoder.own_output_layer \
            or not decoder.output.on_kernel:
        raise SystemExit(f"error: {option} times the fast path's {'compiled calls' if compiled else 'products'} "
                         "on the vector kernel, which this model does not run (they need the fast path, a CPU, "
                         "float32 and fairseq's own output layer)")
    return decoder


class CompiledArithmetic:
    """The fast path's compiled calls alone, on the fast verifier's cache: its decoder layers over the
    new tokens' inputs and the projection of their outputs, none of the embedding, the log-probabilities
    or the engine's bookkeeping around them (one model, one row)."""

    def __init__(self, fast_verifier):
        decoder = kernel_decoder(fast_verifier, "--verifiers arithmetic", compiled=True)
        self.fast, self.decoder = fast_verifier, decoder
        self.inputs = np.random.default_rng(0).standard_normal((self.fast.max_decoder_positions(),
                                                                decoder.embed_tokens.size(1)), dtype=np.float32)

    def max_decoder_positions(self):
        return self.fast.max_decoder_positions()

    def start(self, net_input, max_len):
        return self.fast.start(net_input, max_len)

    def score(self, cache, tokens, first_index, max_len):
        x = self.decoder.compiled.layers(cache.caches[0], self.inputs[None, :tokens.size(1)], first_index.numpy(),
                                         None)
        return _Projection(lambda: self.decoder.output.kernel_apply(x[0]))

    def rollback(self, cache, valid, kept, new_columns):
        """A chain needs none: the next pass writes over the columns."""


@numba.njit(cache=True, nogil=True)
def _products_once(rows, panels, biases, columns):
    """Product ``i`` (``panels[i]``, ``biases[i]``, ``columns[i]``) of ``rows[i]``, each once, in order."""
    for i in range(len(panels)):
        vector_kernels.product(rows[i], panels[i], biases[i], columns[i])


def pass_floor(weight_bytes: int, multiply_adds: int, tokens: int, bandwidth: float, peak: float) -> float:
    """Seconds an n-token pass cannot beat: its weights read once at ``bandwidth`` (bytes/s) or its
    multiply-adds (``multiply_adds`` a token) at ``peak`` (per second), whichever takes longer."""
    return max(weight_bytes / bandwidth, tokens * multiply_adds / peak)


class MachineLimits:
    """What this machine does with the fast path's products, measured with the project's vector kernel
    (float32, the threads torch is told to use), each the best of several runs: what the machine can do
    when nothing else gets in its way. The peak: the kernel's rate of multiply-adds,
    16 rows by a (256, 1024) weight (16 multiply-adds per weight read: arithmetic-bound). The bandwidth:
    one row through the verifier's own products (its decoder layers', then the projection), in cache
    (back to back, again and again: weights that fit stay in the last-level cache) and from memory
    (each time after reading a buffer eight times their size, at most 1 GB). ``products_seconds[n]``: n rows through
    them in cache, the kernel's cost of an n-token pass's matrix work, beside its floor ``pass_floor``."""

    PEAK_ROWS, PEAK_SHAPE = 16, (256, 1024)

    def __init__(self, decoder, token_counts, repeats: int):
        parts = [product for layer in decoder.layers for product in
                 [layer.qkv, layer.self_out] + ([layer.enc_q, layer.enc_out] if layer.encoder_attention else [])
                 + [layer.fc1, layer.fc2]]
        parts += [product for product in (decoder.project_in, decoder.project_out) if product is not None]
        parts.append(decoder.output)
        self.products = len(parts)
        self.panels = tuple(part.panels for part in parts)
        self.biases = tuple(part.panel_bias for part in parts)
        self.columns = np.array([part.columns for part in parts], dtype=np.int64)
        self.depths = [part.weight.size(0) for part in parts]
        self.weight_bytes = sum(panels.nbytes for panels in self.panels)
        self.multiply_adds = sum(depth * columns for depth, columns in zip(self.depths, self.columns))
        rng = np.random.default_rng(0)
        self.rows = {n: tuple(rng.standard_normal((n, depth), dtype=np.float32) for depth in self.depths)
                     for n in token_counts}
        cycles = 10 * repeats
        self.peak = self._peak(rng, cycles)
        self.products_seconds = {n: self._cycle(n, cycles) for n in token_counts}
        self.bandwidth = self.weight_bytes / self.products_seconds[1]
        sweep = np.ones(min(max(8 * self.weight_bytes, 1 << 20), 1 << 30) // 4, dtype=np.float32)
        self.memory_seconds = min(self._timed(1, before=sweep.sum) for _ in range(cycles))
        self.memory_bandwidth = self.weight_bytes / self.memory_seconds

    def _peak(self, rng, calls: int) -> float:
        depth, columns = self.PEAK_SHAPE
        panels = vector_kernels.pack(rng.standard_normal((depth, columns), dtype=np.float32))
        bias = vector_kernels.pack_bias(None, columns)
        x = rng.standard_normal((self.PEAK_ROWS, depth), dtype=np.float32)
        best = math.inf
        for _ in range(calls + 1):
            start = time.perf_counter()
            vector_kernels.product(x, panels, bias, columns)
            best = min(best, time.perf_counter() - start)
        return self.PEAK_ROWS * depth * columns / best

    def _timed(self, n: int, before=None) -> float:
        if before is not None:
            before()
        start = time.perf_counter()
        _products_once(self.rows[n], self.panels, self.biases, self.columns)
        return time.perf_counter() - start

    def _cycle(self, n: int, cycles: int) -> float:
        """The best of ``cycles`` runs of n rows through every product, back to back (after as many
        unmeasured ones, so that whatever fits is in cache)."""
        for _ in range(cycles):
            self._timed(n)
        return min(self._timed(n) for _ in range(cycles))

    def floor(self, tokens: int, bandwidth: float) -> float:
        return pass_floor(self.weight_bytes, self.multiply_adds, tokens, bandwidth, self.peak)

    def report(self) -> str:
        """The limits and, per n, the products' cost in cache beside the floors, each against 1 token."""
        lines = [f"Machine limits (the vector kernel, float32): peak {self.peak / 1e9:.1f} G multiply-adds/s "
                 f"({self.PEAK_ROWS} rows x {self.PEAK_SHAPE}); the verifier's {self.products} products: "
                 f"{self.weight_bytes / 2 ** 20:.3g} MB of weights, {self.multiply_adds / 1e6:.3g} M multiply-adds "
                 f"a token; one row through them {1000 * self.products_seconds[1]:.3g} ms in cache "
                 f"({self.bandwidth / 1e9:.3g} GB/s), {1000 * self.memory_seconds:.3g} ms from memory "
                 f"({self.memory_bandwidth / 1e9:.3g} GB/s)", "",
                 "| new tokens | products in cache ms | vs 1 token | floor in cache ms | vs 1 token "
                 "| floor from memory ms | vs 1 token |", "|---:|---:|---:|---:|---:|---:|---:|"]
        one_in_cache, one_from_memory = self.floor(1, self.bandwidth), self.floor(1, self.memory_bandwidth)
        for n, seconds in self.products_seconds.items():
            cache, memory = self.floor(n, self.bandwidth), self.floor(n, self.memory_bandwidth)
            lines.append(f"| {n} | {1000 * seconds:.3f} | {seconds / self.products_seconds[1]:.2f}x "
                         f"| {1000 * cache:.3f} | {cache / one_in_cache:.2f}x "
                         f"| {1000 * memory:.3f} | {memory / one_from_memory:.2f}x |")
        lines += ["", "A pass of n tokens that keeps a of them (its first included) can be at most a / (its floor "
                  "against 1 token) times as fast per token as greedy decoding at greedy's own floor."]
        return "\n".join(lines)


def time_pass(verifier, cache, tokens, first_index, max_len, project):
    start = time.perf_counter()
    scores = verifier.score(cache, tokens, first_index, max_len)
    if project:
        scores.all()
    seconds = time.perf_counter() - start
    verifier.rollback(cache, first_index, torch.zeros_like(first_index), tokens.size(1))
    return seconds


def measure(verifiers, samples, token_counts, prefix, repeats):
    """Median seconds per verifier (a dict by name): encoder, and per n (layers only, layers +
    projection). The verifiers take turns sentence by sentence, so machine noise hits them alike."""
    timings = {name: ([], {n: [] for n in token_counts}, {n: [] for n in token_counts}) for name in verifiers}
    max_len = prefix + max(token_counts) + 1
    for sample in samples:
        source = sample["net_input"]["src_tokens"]
        filler = source[:, -1:].expand(1, prefix + max(token_counts))  # any tokens: only the cost matters
        first_index = torch.full((1,), prefix)
        for name, verifier in verifiers.items():
            encoder, layers, projected = timings[name]
            start = time.perf_counter()
            cache = verifier.start(sample["net_input"], max_len)
            encoder.append(time.perf_counter() - start)
            verifier.score(cache, filler[:, :prefix], torch.zeros(1, dtype=torch.long), max_len)
            verifier.rollback(cache, torch.zeros(1, dtype=torch.long), first_index, prefix)
            for _ in range(repeats):
                for n in token_counts:
                    layers[n].append(time_pass(verifier, cache, filler[:, :n], first_index, max_len, False))
                    projected[n].append(time_pass(verifier, cache, filler[:, :n], first_index, max_len, True))
    return {name: (statistics.median(encoder), {n: statistics.median(v) for n, v in layers.items()},
                   {n: statistics.median(v) for n, v in projected.items()})
            for name, (encoder, layers, projected) in timings.items()}


def parse_args(argv=None):
    parser = model_and_data_parser("pardec-pass-cost", __doc__)
    parser.add_argument("--sentences", type=int, default=50, help="first N sentences of the split")
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32],
                        help="new tokens per pass to time")
    parser.add_argument("--prefix", type=int, default=10, help="tokens already in the cache")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per sentence and n")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--verifiers", nargs="+", default=["fast", "fairseq"],
                        choices=["fast", "fairseq", "arithmetic"],
                        help="verifier paths to time (--verifier of the task), and 'arithmetic': the fast path's "
                        "compiled calls alone (layers and projection, the pass without the bookkeeping around them)")
    parser.add_argument("--limits", action="store_true",
                        help="measure the machine's limits too: the vector kernel's peak multiply-adds, the bandwidth "
                        "of one row through the verifier's products in cache and from memory, and the floor of each "
                        "n-token pass (the fast path's products on a CPU in float32)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if 1 not in args.tokens:
        args.tokens = [1, *args.tokens]
    device = torch.device("cpu")
    task, models = load_task_and_models(args, device)
    task.load_dataset(args.subset)
    dataset = task.dataset(args.subset)
    samples = [dataset.collater([dataset[i]]) for i in range(min(args.sentences, len(dataset)))]
    options = DecodingOptions.from_generation_args(Namespace(), "pass-cost")
    verifiers = {kind: CompiledArithmetic(build_verifier("fast", models, task.target_dictionary, options))
                 if kind == "arithmetic" else build_verifier(kind, models, task.target_dictionary, options)
                 for kind in args.verifiers}
    limits_decoder = None
    if args.limits:  # refused before the timings, on a fast verifier already built where there is one
        fast = next((verifier.fast if isinstance(verifier, CompiledArithmetic) else verifier
                     for verifier in verifiers.values() if isinstance(verifier, (CompiledArithmetic, FastVerifier))),
                    None)
        limits_decoder = kernel_decoder(fast or build_verifier("fast", models, task.target_dictionary, options),
                                        "--limits")
    positions = next(iter(verifiers.values())).max_decoder_positions()
    if args.prefix + max(args.tokens) >= positions:
        raise SystemExit(f"error: --prefix {args.prefix} plus {max(args.tokens)} tokens exceed the model's "
                         f"{positions} target positions")
    token_counts = sorted(set(args.tokens))
    with torch.no_grad():
        measured = measure(verifiers, samples, token_counts, args.prefix, args.repeats)
    encoders = ", ".join(f"{kind} {1000 * encoder:.2f}" for kind, (encoder, _, _) in measured.items())
    print(f"Verifier pass cost on {hardware(device)}, {len(samples)} sentences of `{args.subset}`, "
          f"{args.prefix} tokens cached; encoder ms per sentence: {encoders}")
    print()
    header = "| new tokens |"
    for kind in measured:
        header += (f" {kind}: layers ms | {kind}: layers vs 1 token | {kind}: with projection ms "
                   f"| {kind}: with projection vs 1 token |")
    print(header)
    print("|---:|" + "---:|---:|---:|---:|" * len(measured))
    for n in token_counts:
        row = f"| {n} |"
        for _, layers, projected in measured.values():
            row += (f" {1000 * layers[n]:.2f} | {layers[n] / layers[1]:.2f}x | {1000 * projected[n]:.2f} "
                    f"| {projected[n] / projected[1]:.2f}x |")
        print(row)
    if limits_decoder is not None:
        print()
        print(MachineLimits(limits_decoder, token_counts, args.repeats).report())

if __name__ == "__main__":
    main()
