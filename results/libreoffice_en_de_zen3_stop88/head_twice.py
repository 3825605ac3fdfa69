"""Stop 88 probe (not product code): in the decoding loop, numba's dispatch of the head's drafting call's arguments
to a function that does nothing, then the call, then the call again at once with the same arguments (it writes
the same keys, values and states again): what the loop's state costs the call against the call just run. `gad`
and greedy take turns sentence by sentence. Run from the repository root:
.venv/bin/python results/libreoffice_en_de_zen3_stop88/head_twice.py 100"""
import collections
import statistics
import sys
import time

import numba

sys.path[:0] = ["results/libreoffice_en_de_zen3_stop86", "results/libreoffice_en_de_zen3_stop88"]
from headcall import GAD, setup
from twice import decode_in_turns
from pardec_fairseq.decoding.drafters import compiled_head


@numba.njit(nogil=True)
def nothing(*args):
    return 0


def main(sentences):
    runs, models, batches = setup(sentences, ["greedy", GAD])
    times = collections.defaultdict(list)
    original = compiled_head._remember_and_draft

    def twice(*args):
        began = time.perf_counter()
        nothing(*args)
        dispatched = time.perf_counter()
        out = original(*args)
        middle = time.perf_counter()
        original(*args)
        times["dispatch to nothing"].append(dispatched - began)
        times["call"].append(middle - dispatched)
        times["call again"].append(time.perf_counter() - middle)
        return out
    compiled_head._remember_and_draft = twice
    decode_in_turns(runs, models, batches, times)
    for name, seconds in times.items():
        print(f"{name:20s} n={len(seconds):5d} median {statistics.median(seconds) * 1e6:6.1f} us")


if __name__ == "__main__":
    main(int(sys.argv[1]))
