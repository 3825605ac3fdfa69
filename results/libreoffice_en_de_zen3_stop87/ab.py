"""Stop 87 probe (not product code): the compiled calls before (8938c81) and after inlining (3f6b457) in one
process: the head's drafting call, self-draft's chain and the verifier's layers, each call's captured arguments
(first N sentences) replayed, old and new alternating call by call, 32 MB read before each call (as the verifier's
pass evicts in the loop). The old modules come from git into /tmp/s87/oldpkg:
  mkdir -p /tmp/s87/oldpkg; git show 8938c81:pardec_fairseq/decoding/compiled_layers.py > /tmp/s87/oldpkg/old_compiled_layers.py
  for f in compiled_head self_draft; do git show 8938c81:pardec_fairseq/decoding/drafters/$f.py |
    sed 's/from pardec_fairseq.decoding.compiled_layers import/from old_compiled_layers import/' > /tmp/s87/oldpkg/old_$f.py; done
Run from the repository root: .venv/bin/python results/libreoffice_en_de_zen3_stop87/ab.py 20"""
import statistics, sys, time
sys.path.insert(0, "/tmp/s87/oldpkg")
sys.path.insert(0, "results/libreoffice_en_de_zen3_stop86")
import numpy as np, torch
import old_compiled_head, old_self_draft, old_compiled_layers
from headcall import GAD, setup
from pardec_fairseq.decoding.drafters import compiled_head, self_draft
from pardec_fairseq.decoding import compiled_layers

new = {"head": compiled_head._remember_and_draft, "self": self_draft._draft_chain,
       "layers": compiled_layers.pass_layers}
old = {"head": old_compiled_head._remember_and_draft, "self": old_self_draft._draft_chain,
       "layers": old_compiled_layers.pass_layers}
captured = {key: [] for key in new}
def capture(owner, name, key):
    f = getattr(owner, name)
    def w(*a):
        if len(captured[key]) < 300:
            captured[key].append(a)
        return f(*a)
    setattr(owner, name, w)
capture(compiled_head, "_remember_and_draft", "head")
capture(self_draft, "_draft_chain", "self")
capture(compiled_layers, "pass_layers", "layers")
runs, models, batches = setup(int(sys.argv[1]), [GAD, "self-draft:self-draft-steps=3"])
torch.set_num_threads(2)
with torch.no_grad():
    for batch in batches:
        for run in runs:
            run.generator.generate(models, batch)
print({k: len(v) for k, v in captured.items()})
junk = np.ones(8 * 1024 * 1024, dtype=np.float32)
def as_old(key, a):
    if key != "layers":
        return a
    x, first, rows, sees, chain, views, weights = a
    return (x, first, rows, sees, chain, *views, *weights)
for key in new:
    calls = captured[key]
    old[key](*as_old(key, calls[0])); new[key](*calls[0])  # compile both
    t = {"old": [], "new": []}
    for round_ in range(3):
        for a in calls:
            for version in (("old", "new") if round_ % 2 == 0 else ("new", "old")):
                junk.sum()
                f, args = (old[key], as_old(key, a)) if version == "old" else (new[key], a)
                began = time.perf_counter()
                f(*args)
                t[version].append(time.perf_counter() - began)
    o, n = statistics.median(t["old"]) * 1e6, statistics.median(t["new"]) * 1e6
    print(f"{key:7s} old {o:7.1f} us  new {n:7.1f} us  new/old {n / o:.3f}  (n={len(t['old'])})")
