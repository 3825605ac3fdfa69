"""Stop 88 probe (not product code): the verifier's 5-row float32 tile (a `gad` tree pass's) with its weights asked
for ahead in other ways, against the tile as built, in one process: each variant's tile is generated with
``vector_kernels``' prefetch settings patched while its caller compiles. Every variant runs the products of the
verifier's three decoder layers and its output projection (19.5 MB, in turn, so they come partly from L3) over
5 rows, as ``product`` shares panels between 2 threads; variants alternate round by round.
Run from the repository root: .venv/bin/python results/libreoffice_en_de_zen3_stop88/tile_prefetch.py"""
import statistics
import time

import numba
import numpy as np

from pardec_fairseq.decoding import vector_kernels as vk

VARIANTS = {  # name: (locality for exact tiles, rows ahead for exact multi-row tiles); None: no prefetch
    "built (NTA, 8 KB)": (0, vk.EXACT_ROWS_PREFETCH_BYTES // (4 * vk.STRIPE)),
    "NTA, 2 KB": (0, 32),
    "NTA, 16 KB": (0, 256),
    "L1/all levels (3), 8 KB": (3, 128),
    "L2 (2), 8 KB": (2, 128),
    "L2 (2), 16 KB": (2, 256),
    "none": (None, 128),
}


def variant_product(locality, rows_ahead):
    """A compiled ``(x, panels, bias, out)`` product of 5 rows through a 5-row tile generated with these settings."""
    saved = vk._prefetch_locality, vk._prefetch_rows
    vk._prefetch_locality = lambda rows, exact: locality
    vk._prefetch_rows = lambda rows, exact: rows_ahead
    tile = vk._tile(5, vk.TILE_COLUMNS[5])
    columns = vk.TILE_COLUMNS[5]

    @numba.njit(parallel=True, nogil=True)
    def run(x, panels, bias, out):
        for p in numba.prange(panels.shape[0]):
            for q in range(0, vk.PANEL, columns):
                tile(x, 0, panels, p, q, bias, out, 0, p * vk.PANEL)
        return out[0, 0]
    x = np.zeros((5, 256), dtype=np.float32)
    panels = vk.pack(np.zeros((256, 64), dtype=np.float32))
    run(x, panels, vk.pack_bias(None, 64), np.zeros((5, 64), dtype=np.float32))  # compile with the patched settings
    vk._prefetch_locality, vk._prefetch_rows = saved
    return run


def main():
    numba.set_num_threads(2)
    rng = np.random.default_rng(0)
    shapes = [(256, 768), (256, 256), (256, 256), (256, 256), (256, 1024), (1024, 256)] * 3 + [(256, 8320)]
    weights = [(vk.pack(rng.standard_normal(s).astype(np.float32)), vk.pack_bias(None, s[1])) for s in shapes]
    xs = {depth: rng.standard_normal((5, depth)).astype(np.float32) for depth in (256, 1024)}
    outs = [np.empty((5, panels.shape[0] * vk.PANEL), dtype=np.float32) for panels, _ in weights]
    runs = {name: variant_product(*settings) for name, settings in VARIANTS.items()}
    seconds = {name: [] for name in runs}
    for _ in range(40):
        for name, run in runs.items():
            for _ in range(3):
                began = time.perf_counter()
                for (panels, bias), out in zip(weights, outs):
                    run(xs[panels.shape[2]], panels, bias, out)
                seconds[name].append(time.perf_counter() - began)
    for name, values in seconds.items():
        print(f"{name:26s} median {statistics.median(values) * 1e6:7.1f} us a pass (19 products, 5 rows)")


if __name__ == "__main__":
    main()
