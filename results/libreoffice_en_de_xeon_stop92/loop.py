"""Stop 92 probe: one generator decoding the first N sentences again and again (for perf), its time a token.
Run from the repository root: .venv/bin/python results/libreoffice_en_de_xeon_stop92/loop.py N ALGORITHM [SECONDS]"""
import sys, time
import torch
sys.path.insert(0, "results/libreoffice_en_de_zen3_stop86")
from headcall import setup, GAD

ALGORITHM = {"gad": GAD, "greedy": "greedy", "gad++": f"{GAD},acceptance=top-beta,acceptance-top-k=3,acceptance-tau=1.0,draft-head-steps=5"}
runs, models, batches = setup(int(sys.argv[1]), [ALGORITHM.get(sys.argv[2], sys.argv[2])])
run = runs[0]
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 20
with torch.no_grad():
    for batch in batches[:5]:
        run.generator.generate(models, batch)
    began, tokens, rounds = time.perf_counter(), 0, 0
    while time.perf_counter() - began < seconds:
        for batch in batches:
            for hypos in run.generator.generate(models, batch):
                tokens += hypos[0]["tokens"].numel()
        rounds += 1
print(f"{run.name[-40:]}: {rounds} rounds, {(time.perf_counter() - began) / tokens * 1e3:.3f} ms a token")
