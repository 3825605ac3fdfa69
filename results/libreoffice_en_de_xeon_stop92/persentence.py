"""Stop 92 probe: each sentence's decode time against its passes, generators taking turns sentence by sentence;
the least-squares line's intercept is what a sentence costs besides its passes (encoder, setup, leaving).
Run: .venv/bin/python results/libreoffice_en_de_xeon_stop92/persentence.py N"""
import collections, sys, time
import numpy as np
import torch
sys.path.insert(0, "results/libreoffice_en_de_zen3_stop86")
from headcall import setup, turns, warm_up, GAD

runs, models, batches = setup(int(sys.argv[1]), ["greedy", GAD])
points = collections.defaultdict(list)
with torch.no_grad():
    warm_up(runs, models, batches)
    for run, batch in turns(runs, batches):
        began = time.perf_counter()
        run.generator.generate(models, batch)
        points[run.name].append((run.generator.counter.sentences[0][0], time.perf_counter() - began))
for run in runs:
    passes, seconds = np.array(points[run.name]).T
    slope, intercept = np.polyfit(passes, seconds, 1)
    print(f"{run.name[:12]:12s} {len(passes)} sentences, {passes.mean():.2f} passes each: "
          f"{slope * 1e6:.0f} us a pass + {intercept * 1e6:.0f} us a sentence; mean {seconds.mean() * 1e3:.2f} ms")
