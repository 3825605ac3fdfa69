"""Stop 86 probe (not product code): what numba's dispatcher costs for the arguments of the head's compiled drafting
call, against the call repeated hot with them. Run from the repository root:
PYTHONPATH=results/libreoffice_en_de_zen3_stop86 .venv/bin/python results/libreoffice_en_de_zen3_stop86/dispatch.py"""
import statistics
import time

import numba
import numpy as np
import torch

from headcall import GAD, setup
from pardec_fairseq.decoding.drafters import compiled_head


def arrays(value):
    return sum(arrays(part) for part in value) if isinstance(value, tuple) else int(isinstance(value, np.ndarray))


def median_us(call, repeats):
    seconds = []
    for _ in range(repeats):
        began = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds) * 1e6


@numba.njit(nogil=True)
def nothing(*args):
    return 0


def main():
    runs, models, batches = setup(20, [GAD])
    captured, draft = {}, compiled_head._remember_and_draft

    def capture(*args):
        captured["args"] = args
        return draft(*args)
    compiled_head._remember_and_draft = capture
    with torch.no_grad():
        runs[0].generator.generate(models, batches[3])
    args = captured["args"]
    print("arguments", len(args), "arrays", arrays(args))
    nothing(*args)
    print(f"dispatch of an empty function with them: {median_us(lambda: nothing(*args), 2000):.1f} us")
    print(f"the call repeated with them, hot: {median_us(lambda: draft(*args), 300):.1f} us")


if __name__ == "__main__":
    main()
