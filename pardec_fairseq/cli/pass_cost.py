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
cannot cost less than on this machine.
"""
import statistics
import time
from argparse import Namespace

import numpy as np
import torch

from pardec_fairseq.cli.bench_report import hardware
from pardec_fairseq.cli.loading import load_task_and_models, model_and_data_parser
from pardec_fairseq.decoding.options import DecodingOptions
from pardec_fairseq.decoding.registry import build_verifier


class _Projection:
    """What ``time_pass`` reads of a pass: ``all()`` projects it onto the vocabulary."""

    def __init__(self, project):
        self.all = project


class CompiledArithmetic:
    """The fast path's compiled calls alone, on the fast verifier's cache: its decoder layers over the
    new tokens' inputs and the projection of their outputs, none of the embedding, the log-probabilities
    or the engine's bookkeeping around them (one model, one row)."""

    def __init__(self, fast_verifier):
        decoder = fast_verifier.fast_decoders[0]
        if decoder.compiled is None or decoder.own_output_layer or not decoder.output.on_kernel:
            raise SystemExit("error: --verifiers arithmetic times the fast path's compiled calls, which this "
                             "model does not run (they need a CPU, float32 and fairseq's own layers)")
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

if __name__ == "__main__":
    main()
