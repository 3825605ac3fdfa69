"""Stop 88 probe (not product code): one row through byte products (``pack_bytes``) called from compiled code, hot,
against 32 multiply-adds a cycle. Run from the repository root: .venv/bin/python results/libreoffice_en_de_zen3_stop88/bytes2.py"""
import time, numpy as np, numba
from pardec_fairseq.decoding import vector_kernels as vk
numba.set_num_threads(2)
rng = np.random.default_rng(0)

@numba.njit(cache=False)
def many(x, panels, bias, o, reps):
    s = 0.0
    for _ in range(reps):
        s += vk.product(x, panels, bias, o)[0, 0]
    return s

@numba.njit(cache=False)
def quads_only(x, reps):
    s = 0
    for _ in range(reps):
        s += vk.byte_quads(x)[0][0, 0]
    return s

for (i, o) in [(256, 64), (256, 256), (256, 512), (256, 1024), (1024, 256), (512, 256)]:
    w = rng.standard_normal((i, o)).astype(np.float32)
    panels, bias = vk.pack_bytes(w)
    x = rng.standard_normal((1, i)).astype(np.float32)
    reps = 20000
    many(x, panels, bias, o, 10)
    t = time.perf_counter(); many(x, panels, bias, o, reps); dt = (time.perf_counter() - t) / reps * 1e6
    quads_only(x, 10)
    t = time.perf_counter(); quads_only(x, reps); dq = (time.perf_counter() - t) / reps * 1e6
    print(f"({i},{o}) 1 row in compiled loop: {dt:6.2f} us = {i*o/dt/1e3:5.1f} GMAC/s; byte_quads alone {dq:5.2f} us; peak-at-32MAC/cyc@3GHz {i*o/96e3:5.2f} us")
