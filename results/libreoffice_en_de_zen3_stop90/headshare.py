"""Stop 90 probe (not product code): the head's compiled drafting call in the loop and the whole decode's ratio,
plugin greedy and `gad` taking turns sentence by sentence, for whichever copy of the package PYTHONPATH names
(here: byte products shared among numba's threads from 2^17 multiply-adds, against 2^20 as built).
Run from the repository root: PYTHONPATH=COPY .venv/bin/python results/libreoffice_en_de_zen3_stop90/headshare.py 200"""
import collections
import statistics
import sys
import time

import torch

sys.path[:0] = ["results/libreoffice_en_de_zen3_stop86"]
from headcall import GAD, setup  # noqa: E402
import pardec_fairseq  # noqa: E402
from pardec_fairseq.decoding import vector_kernels  # noqa: E402
from pardec_fairseq.decoding.drafters import compiled_head  # noqa: E402


def main(sentences):
    runs, models, batches = setup(sentences, ["greedy", GAD])
    calls, wall = [], collections.defaultdict(float)
    function = compiled_head._remember_and_draft

    def timed(*args):
        began = time.perf_counter()
        out = function(*args)
        calls.append(time.perf_counter() - began)
        return out
    compiled_head._remember_and_draft = timed
    with torch.no_grad():
        for batch in batches[:5]:
            for run in runs:
                run.generator.generate(models, batch)
        calls.clear()
        for round_ in range(2):
            for batch in batches:
                for run in (runs if round_ % 2 == 0 else runs[::-1]):
                    began = time.perf_counter()
                    run.generator.generate(models, batch)
                    wall[run.name] += time.perf_counter() - began
    print(f"{pardec_fairseq.__file__} PARALLEL_BYTE_WORK 2^{vector_kernels.PARALLEL_BYTE_WORK.bit_length() - 1}: "
          f"gad {wall[runs[0].name] / wall[runs[1].name]:.3f}x greedy; head call median "
          f"{statistics.median(calls) * 1e6:.0f} us (n={len(calls)})")


if __name__ == "__main__":
    main(int(sys.argv[1]))
