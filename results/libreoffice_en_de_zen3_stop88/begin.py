"""Stop 88 probe (not product code): what the head's per-sentence ``begin`` spends, part by part, in the loop.
Run from the repository root: .venv/bin/python results/libreoffice_en_de_zen3_stop88/begin.py"""
import collections, statistics, sys, time
import torch
sys.path.insert(0, "results/libreoffice_en_de_zen3_stop86")
from headcall import GAD, setup
from pardec_fairseq.decoding.drafters import draft_head, shortlist
runs, models, batches = setup(100, [GAD])
times = collections.defaultdict(list)
def timed(owner, name, part):
    function = getattr(owner, name)
    def wrapper(*args, **kwargs):
        began = time.perf_counter(); out = function(*args, **kwargs)
        times[part].append(time.perf_counter() - began); return out
    setattr(owner, name, wrapper)
timed(draft_head, "encoder_keys_values", "encoder_keys_values")
timed(draft_head, "fast_cache_of", "fast_cache_of")
timed(draft_head, "FastCache", "FastCache")
timed(draft_head, "chain_steps", "chain_steps")
timed(draft_head, "AmongNew", "AmongNew")
timed(shortlist.LexicalShortlist, "words", "shortlist words")
timed(shortlist.ShortlistProjection, "select", "select")
timed(draft_head.DraftHeadDrafter, "begin", "begin")
with torch.no_grad():
    for _ in range(2):
        for batch in batches:
            runs[0].generator.generate(models, batch)
for k, s in times.items():
    print(f"{k:22s} n={len(s)} median {statistics.median(s)*1e6:7.1f} us")
