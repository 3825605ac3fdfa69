"""Stop 91 probe: the head's compiled drafting call in the loop (median) and hot (the same call repeated at once)."""
import collections, statistics, sys, time
import torch
sys.path.insert(0, "results/libreoffice_en_de_zen3_stop86")
from headcall import setup, turns, warm_up, GAD
from pardec_fairseq.decoding.drafters import compiled_head

ALGORITHMS = ["greedy", f"{GAD},draft-head-steps=1", f"{GAD},draft-head-steps=2", f"{GAD},draft-head-steps=3", GAD]
runs, models, batches = setup(int(sys.argv[1]), ALGORITHMS)
current, loop, hot, wall = [None], collections.defaultdict(list), collections.defaultdict(list), collections.defaultdict(float)
function = compiled_head._remember_and_draft
calls = [0]
def wrapper(*args):
    began = time.perf_counter()
    out = function(*args)
    loop[current[0]].append(time.perf_counter() - began)
    calls[0] += 1
    if calls[0] % 25 == 0:  # the same call again at once, its weights and cache hot
        for _ in range(5):
            began = time.perf_counter()
            function(*args)
            hot[current[0]].append(time.perf_counter() - began)
    return out
compiled_head._remember_and_draft = wrapper
with torch.no_grad():
    warm_up(runs, models, batches)
    loop.clear(); hot.clear()
    for run, batch in turns(runs, batches):
        current[0], began = run.name, time.perf_counter()
        run.generator.generate(models, batch)
        wall[run.name] += time.perf_counter() - began
for run in runs:
    line = f"{run.name[-30:]:30s} vs greedy {wall[runs[0].name] / wall[run.name]:.2f}x"
    if loop[run.name]:
        line += f" | in the loop: median {statistics.median(loop[run.name]) * 1e6:.0f} us (n={len(loop[run.name])})"
        line += f" | hot: median {statistics.median(hot[run.name]) * 1e6:.0f} us (n={len(hot[run.name])})"
    print(line)
