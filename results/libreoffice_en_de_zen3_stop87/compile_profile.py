"""Stop 87 probe (not product code): numba's compile time per function (inclusive and exclusive of the
functions it compiled on the way) over a pytest selection. Run from the repository root with an empty cache:
NUMBA_CACHE_DIR=/tmp/empty .venv/bin/python results/libreoffice_en_de_zen3_stop87/compile_profile.py \
    tests/test_draft_head.py -q -n 0 -p no:cacheprovider -k test_a_head_reading_tokens"""
import collections
import sys
import time
import numba.core.event as ev
import pytest

records = []
class Listener(ev.Listener):
    def __init__(self):
        self.stack = []
    def on_start(self, event):
        self.stack.append([event.data["dispatcher"].py_func.__qualname__, time.perf_counter(), 0.0])
    def on_end(self, event):
        name, t0, child = self.stack.pop()
        dt = time.perf_counter() - t0
        records.append((name, dt, dt - child))
        if self.stack:
            self.stack[-1][2] += dt
ev.register("numba:compile", Listener())
code = pytest.main(sys.argv[1:])
total = collections.defaultdict(lambda: [0, 0.0, 0.0])
for name, inc, exc in records:
    t = total[name]; t[0] += 1; t[1] += inc; t[2] += exc
print(f"{'function':40s} {'n':>3s} {'inclusive':>9s} {'exclusive':>9s}")
for name, (n, inc, exc) in sorted(total.items(), key=lambda kv: -kv[1][2])[:30]:
    print(f"{name:40s} {n:3d} {inc:9.1f} {exc:9.1f}")
print("sum exclusive", sum(r[2] for r in records))
