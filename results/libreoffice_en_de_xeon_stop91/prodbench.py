import time, numpy as np, numba
from pardec_fairseq.decoding import vector_kernels as vk
numba.set_num_threads(2)
@numba.njit(cache=False)
def repeat(x, panels, bias, columns, n):
    s = np.float32(0)
    for _ in range(n):
        s += vk.product(x, panels, bias, columns)[0, 0]
    return s
@numba.njit(cache=False)
def quads(x, n):
    s = 0
    for _ in range(n):
        s += vk.byte_quads(x)[0][0, 0]
    return s
rng = np.random.default_rng(0)
x = rng.standard_normal((1, 256)).astype(np.float32)
for (i, o) in [(256, 768), (256, 256), (256, 1024), (1024, 256), (256, 576), (512, 256), (256, 512)]:
    xi = rng.standard_normal((1, i)).astype(np.float32)
    w = rng.standard_normal((i, o)).astype(np.float32)
    panels, bias = vk.pack_bytes(w)
    pf = vk.pack(w); bf = vk.pack_bias(None, o)
    for name, (p, b) in (("int8", (panels, bias)), ("fp32", (pf, bf))):
        repeat(xi, p, b, o, 10)
        n = 20000
        t = time.perf_counter(); repeat(xi, p, b, o, n); dt = (time.perf_counter() - t) / n
        print(f"{name} 1 x ({i},{o}): {dt*1e6:.2f} us, {i*o/dt/1e9:.1f} GMAC/s")
quads(x, 10); t = time.perf_counter(); quads(x, 100000); print("byte_quads 256:", (time.perf_counter()-t)/100000*1e6, "us")
