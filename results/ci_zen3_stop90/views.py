"""What a cache costs to hand the compiled calls: FastDecoder.start plus numpy_views, then a row leaving
and numpy_views again. A recipe-shaped random verifier (3 decoder layers, d 256, 4 heads); run from the
repository root with the checkout to measure first on sys.path: python views.py [rows] [src]."""
import sys
import time

import torch

sys.path.insert(0, ".")
sys.path.insert(0, "tests")
from tiny import build_transformer, make_dictionary  # noqa: E402
from pardec_fairseq.decoding.fast_verifier import FastDecoder  # noqa: E402

rows, src = (int(a) for a in sys.argv[1:3]) if len(sys.argv) > 2 else (1, 20)
torch.set_num_threads(2)
model = build_transformer(make_dictionary(8000), layers=3, embed_dim=256, heads=4, ffn_dim=1024,
                          decoder_normalize_before=True, encoder_normalize_before=True)
with torch.no_grad():
    decoder = FastDecoder(model.decoder)
    enc = torch.randn(rows, src, 256)
    padding = torch.zeros(rows, src, dtype=torch.bool)
    keep = torch.arange(max(rows - 1, 1))
    start, views, leave = [], [], []
    for i in range(2000):
        t0 = time.perf_counter()
        cache = decoder.start(enc, padding, rows, 64)
        t1 = time.perf_counter()
        cache.numpy_views()
        t2 = time.perf_counter()
        cache.keep_rows(keep)
        cache.numpy_views()
        t3 = time.perf_counter()
        if i >= 200:
            start.append(t1 - t0), views.append(t2 - t1), leave.append(t3 - t2)
median = lambda xs: sorted(xs)[len(xs) // 2] * 1e6  # noqa: E731
print(f"rows {rows} src {src}: start {median(start):.1f} us, numpy_views {median(views):.1f} us, "
      f"a row leaving and numpy_views {median(leave):.1f} us")
