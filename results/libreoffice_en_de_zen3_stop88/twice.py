"""Stop 88 probe (not product code): in the decoding loop, each verifier pass's compiled layers (``pass_layers``)
timed, then run again at once with the same arguments (they write the same keys and values again), timed too:
what the loop's state costs a pass against the same pass with its weights just read. Greedy and `gad` take turns
sentence by sentence. Run from the repository root:
.venv/bin/python results/libreoffice_en_de_zen3_stop88/twice.py 100"""
import collections
import statistics
import sys
import time

import torch

sys.path.insert(0, "results/libreoffice_en_de_zen3_stop86")
from headcall import GAD, setup
from pardec_fairseq.decoding import compiled_layers


def decode_in_turns(runs, models, batches, times, current=None):
    """Warm every run on the first 5 batches, empty ``times``, then decode every batch with each run in turn,
    twice, the runs' order reversed the second time; ``current[0]`` names the run decoding."""
    with torch.no_grad():
        for batch in batches[:5]:
            for run in runs:
                run.generator.generate(models, batch)
        times.clear()
        for round_ in range(2):
            for batch in batches:
                for run in (runs if round_ % 2 == 0 else runs[::-1]):
                    if current is not None:
                        current[0] = run.name[:6]
                    run.generator.generate(models, batch)


def main(sentences):
    runs, models, batches = setup(sentences, ["greedy", GAD])
    current, times = [None], collections.defaultdict(list)
    original = compiled_layers.pass_layers

    def twice(*args):
        began = time.perf_counter()
        out = original(*args)
        middle = time.perf_counter()
        original(*args)
        times[current[0], "first"].append(middle - began)
        times[current[0], "again"].append(time.perf_counter() - middle)
        return out
    compiled_layers.pass_layers = twice
    decode_in_turns(runs, models, batches, times, current)
    for key in sorted(times, key=str):
        print(f"{key[0]:6s} {key[1]:6s} n={len(times[key]):5d} median {statistics.median(times[key]) * 1e6:6.1f} us")


if __name__ == "__main__":
    main(int(sys.argv[1]))
