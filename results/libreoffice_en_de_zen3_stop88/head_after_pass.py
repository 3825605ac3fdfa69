"""Stop 88 probe (not product code): the head's captured drafting call back to back, against the same call right
after a replayed verifier pass (the `gad` tree pass's compiled layers and projection), against after writing 32 MB:
how much of the call's cost in the loop the verifier's pass explains. Sequences take turns in rounds of 20 calls.
Run from the repository root: .venv/bin/python results/libreoffice_en_de_zen3_stop88/head_after_pass.py"""
import statistics
import sys
import time

import numpy as np

sys.path[:0] = ["results/libreoffice_en_de_zen3_stop86", "results/libreoffice_en_de_zen3_stop88"]
from hot import captured_call
from sequences import verifier_pass
from verifier_parts import captured_passes
from pardec_fairseq.decoding.drafters import compiled_head


def main():
    greedy, tree, output = captured_passes()
    head = captured_call()
    draft = compiled_head._remember_and_draft
    flush = np.ones(32 << 18, dtype=np.float32)
    before = {"back to back": lambda: None, "after a gad pass": lambda: verifier_pass(*tree, output),
              "after a greedy pass": lambda: verifier_pass(*greedy, output),
              "after writing 32 MB": lambda: flush.__iadd__(1.0)}
    for call in before.values():
        call()
    times = {name: [] for name in before}
    for _ in range(30):
        for name, call in before.items():
            for _ in range(20):
                call()
                began = time.perf_counter()
                draft(*head)
                times[name].append(time.perf_counter() - began)
    for name, seconds in times.items():
        print(f"head call {name:22s} median {statistics.median(seconds) * 1e6:7.1f} us")


if __name__ == "__main__":
    main()
