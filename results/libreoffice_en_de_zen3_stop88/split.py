"""Stop 88 probe (not product code): float32 products shaped as the verifier's 3 decoder layers (11 MB), 1 row, 5
rows, and 1 row then the other 4 (a split tile), each after reading 64 MB or cycling hot. Run from the repository
root: .venv/bin/python results/libreoffice_en_de_zen3_stop88/split.py"""
import time, numpy as np, numba, statistics
from pardec_fairseq.decoding import vector_kernels as vk
numba.set_num_threads(2)
rng = np.random.default_rng(0)
flush = np.ones(64 << 18, dtype=np.float32)  # 64 MB
shapes = [(256, 768), (256, 256), (256, 256), (256, 256), (256, 1024), (1024, 256)] * 3  # ~verifier layers
weights = [(vk.pack(rng.standard_normal(s).astype(np.float32)), vk.pack_bias(None, s[1]), s) for s in shapes]
x5 = {s[0]: rng.standard_normal((5, s[0])).astype(np.float32) for s in shapes}
def run(mode):
    for panels, bias, (i, o) in weights:
        x = x5[i]
        if mode == "one":
            vk.product(x[:1], panels, bias, o)
        elif mode == "five":
            vk.product(x, panels, bias, o)
        elif mode == "split":
            vk.product(x[:1], panels, bias, o); vk.product(x[1:], panels, bias, o)
        elif mode == "four":
            vk.product(x[1:], panels, bias, o)
for m in ("one", "five", "split", "four"): run(m)
res = {m: [] for m in ("one", "five", "split", "four")}
for rep in range(60):
    for m in res:
        flush += 1.0
        t = time.perf_counter(); run(m); res[m].append(time.perf_counter() - t)
for m, s in res.items():
    print(f"{m:6s} from memory: median {statistics.median(s)*1e6:7.1f} us")
res = {m: [] for m in ("one", "five", "split")}
for rep in range(200):
    for m in res:
        t = time.perf_counter(); run(m); res[m].append(time.perf_counter() - t)
for m, s in res.items():
    print(f"{m:6s} hot (11 MB > L3, cycling): median {statistics.median(s)*1e6:7.1f} us")
