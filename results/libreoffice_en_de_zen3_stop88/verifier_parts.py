"""Stop 88 probe (not product code): the verifier's pass part by part, a greedy step (1 token) against a `gad` tree pass
(5 tokens), replayed from captured arguments with the cycle counter inside one compiled call (``steps.layers_timed``),
hot and after writing 32 MB before each pass (as the loop finds the weights). The two kinds alternate pass by pass.
Run from the repository root: .venv/bin/python results/libreoffice_en_de_zen3_stop88/verifier_parts.py"""
import sys
import time

import numba
import numpy as np
import torch

sys.path[:0] = ["results/libreoffice_en_de_zen3_stop86", "results/libreoffice_en_de_zen3_stop88"]
from headcall import GAD, setup
from steps import cycles, layers_timed
from pardec_fairseq.decoding import compiled_layers, vector_kernels

PARTS = ("norm", "qkv", "self attend", "self out", "norm+enc q", "cross attend", "enc out", "norm+fc1+act", "fc2")


@numba.njit
def pass_timed(x, first, cache_rows, sees, chain, cache_views, layer_weights, output, t):
    """The layers (into ``t[0:9]``, summed over layers) and the projection (``t[9]``) of one pass."""
    flat = layers_timed(x, first, cache_rows, sees, chain, cache_views, layer_weights, t, 0)
    c = cycles()
    logits = vector_kernels.product(flat.reshape((-1, flat.shape[2])), *output)
    t[9] += cycles() - c
    return logits[0, 0]


def captured_passes():
    """``pass_layers``'s arguments of a greedy step and of a `gad` tree pass in the middle of the fourth test
    sentence, and the verifier's packed output projection."""
    runs, models, batches = setup(20, ["greedy", GAD])
    captured, original = {}, compiled_layers.pass_layers

    def capture(x, *rest):
        captured.setdefault(x.shape[1], []).append((x.copy(),) + tuple(a.copy() if isinstance(a, np.ndarray) else a
                                                                          for a in rest))
        return original(x, *rest)
    compiled_layers.pass_layers = capture
    with torch.no_grad():
        for run in runs:
            run.generator.generate(models, batches[3])
    compiled_layers.pass_layers = original
    output = runs[0].generator.verifier.fast_decoders[0].output.operands
    return captured[1][len(captured[1]) // 2], captured[5][len(captured[5]) // 2], output


def main():
    greedy, tree, output = captured_passes()
    flush = np.ones(32 << 18, dtype=np.float32)
    totals = {(kind, cold): np.zeros(10, dtype=np.int64) for kind in ("greedy", "gad") for cold in (False, True)}
    for args, t in ((greedy, totals["greedy", False]), (tree, totals["gad", False])):
        pass_timed(*args, output, t)
    for t in totals.values():
        t[:] = 0
    reps = 300
    seconds = {key: 0.0 for key in totals}
    for _ in range(reps):
        for cold in (False, True):
            for kind, args in (("greedy", greedy), ("gad", tree)):
                if cold:
                    flush += 1.0
                began = time.perf_counter()
                pass_timed(*args, output, totals[kind, cold])
                seconds[kind, cold] += time.perf_counter() - began
    hz = sum(t.sum() for t in totals.values()) / sum(seconds.values())
    print(f"counter {hz / 1e9:.2f} GHz; microseconds a pass (medians not taken: means over {reps})")
    print(f"{'part':14s} {'greedy hot':>11s} {'gad hot':>9s} {'greedy cold':>12s} {'gad cold':>9s}")
    for i, name in enumerate(PARTS + ("projection",)):
        row = [totals[kind, cold][i] / reps / hz * 1e6 for cold in (False, True) for kind in ("greedy", "gad")]
        print(f"{name:14s} {row[0]:11.1f} {row[1]:9.1f} {row[2]:12.1f} {row[3]:9.1f}")
    row = [totals[kind, cold].sum() / reps / hz * 1e6 for cold in (False, True) for kind in ("greedy", "gad")]
    print(f"{'total':14s} {row[0]:11.1f} {row[1]:9.1f} {row[2]:12.1f} {row[3]:9.1f}")


if __name__ == "__main__":
    main()
