"""Stop 88 probe (not product code): what a verifier pass costs replayed back to back, against the same pass with the
head's drafting call, or a wait as long, between passes (captured arguments; the compiled layers and projection
only, no Python between them beyond the calls). Sequences take turns in rounds of 20 passes.
Run from the repository root: .venv/bin/python results/libreoffice_en_de_zen3_stop88/sequences.py"""
import statistics
import sys
import time

import numba
import numpy as np

sys.path[:0] = ["results/libreoffice_en_de_zen3_stop86", "results/libreoffice_en_de_zen3_stop88"]
from hot import captured_call
from verifier_parts import captured_passes
from pardec_fairseq.decoding import compiled_layers, vector_kernels
from pardec_fairseq.decoding.drafters import compiled_head


@numba.njit(nogil=True)
def verifier_pass(x, first, cache_rows, sees, chain, cache_views, layer_weights, output):
    flat = compiled_layers.pass_layers(x, first, cache_rows, sees, chain, cache_views, layer_weights)
    return vector_kernels.product(flat.reshape((-1, flat.shape[2])), *output)[0, 0]


def wait(seconds):
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def main():
    greedy, tree, output = captured_passes()
    head = captured_call()
    draft = compiled_head._remember_and_draft
    between = {"back to back": lambda: None, "head call between": lambda: draft(*head),
               "450 us wait between": lambda: wait(450e-6), "1 ms wait between": lambda: wait(1e-3),
               "head call, 500 us wait": lambda: (draft(*head), wait(500e-6)),
               "3 ms wait between": lambda: wait(3e-3)}
    kinds = {"greedy": greedy, "gad": tree}
    for args in kinds.values():
        verifier_pass(*args, output)
    times = {(kind, name): [] for kind in kinds for name in between}
    for _ in range(30):
        for (kind, name) in times:
            args, gap = kinds[kind], between[name]
            for _ in range(20):
                gap()
                began = time.perf_counter()
                verifier_pass(*args, output)
                times[kind, name].append(time.perf_counter() - began)
    for (kind, name), seconds in times.items():
        print(f"{kind:7s} {name:22s} median {statistics.median(seconds) * 1e6:7.1f} us a pass")


if __name__ == "__main__":
    main()
