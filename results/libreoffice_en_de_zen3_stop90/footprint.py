"""Stop 90 probe (not product code): does the head's footprint between passes make the verifier's next pass
dearer? Plugin greedy, greedy reading a buffer as large as the head's weights before each pass (the same buffer
each time, as the head reads its weights every pass), and `gad` with the head take turns sentence by sentence;
the verifier's compiled layers and its projection are timed per pass, and the reads themselves.
A third greedy run waits (spinning) WAIT_US before each pass instead.
Run from the repository root: .venv/bin/python results/libreoffice_en_de_zen3_stop90/footprint.py 100 MB WAIT_US"""
import collections
import statistics
import sys
import time

import numba
import numpy as np

sys.path[:0] = ["results/libreoffice_en_de_zen3_stop86", "results/libreoffice_en_de_zen3_stop88"]
from headcall import GAD, setup  # noqa: E402
from twice import decode_in_turns  # noqa: E402
from pardec_fairseq.decoding import compiled_layers, engine, fast_verifier  # noqa: E402


@numba.njit(nogil=True)
def touch(buffer):
    """Read every cache line of ``buffer`` once (one thread, as the head's call reads its weights)."""
    total = np.int64(0)
    for i in range(0, buffer.size, 64):
        total += buffer[i]
    return total


def main(sentences, megabytes, wait):
    runs, models, batches = setup(sentences, ["greedy", "greedy:verifier=fast", "greedy:verifier=fast,iad-min-ngram=1",
                                              GAD])
    names = ["greedy", "greedy+read", "greedy+wait", "gad"]
    for run, name in zip(runs, names):
        run.name = name
    current, times = [None], collections.defaultdict(list)
    buffer = np.ones(int(megabytes * 2**20), dtype=np.int8)
    touch(buffer)

    def wrap(owner, name, part, before=None):
        function = getattr(owner, name)
        static = isinstance(owner.__dict__.get(name), staticmethod)

        def wrapper(*args, **kwargs):
            if before is not None:
                before()
            began = time.perf_counter()
            out = function(*args, **kwargs)
            times[current[0], part].append(time.perf_counter() - began)
            return out
        setattr(owner, name, staticmethod(wrapper) if static else wrapper)

    wrap(compiled_layers.CompiledPass, "__call__", "layers (compiled call)")
    wrap(fast_verifier.FastDecoder, "logits", "projection")

    original_pass_tokens = engine.DraftVerifyDecoder._pass_tokens

    def pass_tokens(*args):
        if current_name[0] == "greedy+read":
            began = time.perf_counter()
            touch(buffer)
            times["greedy+read", "the read"].append(time.perf_counter() - began)
        elif current_name[0] == "greedy+wait":  # as long away from the verifier as `gad`, touching nothing
            began = time.perf_counter()
            while time.perf_counter() - began < wait:
                pass
        return original_pass_tokens(*args)
    engine.DraftVerifyDecoder._pass_tokens = staticmethod(pass_tokens)

    current_name = [None]  # the run decoding
    for run in runs:
        generate = run.generator.generate

        def named(models_, batch, generate=generate, name=run.name, **kwargs):
            current_name[0] = current[0] = name
            return generate(models_, batch, **kwargs)
        run.generator.generate = named
    decode_in_turns(runs, models, batches, times, None)
    for (run, part), seconds in sorted(times.items()):
        print(f"{run:12s} {part:24s} n={len(seconds):5d} median {statistics.median(seconds) * 1e6:7.1f} us "
              f"mean {statistics.mean(seconds) * 1e6:7.1f} us")


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]) * 1e-6)
