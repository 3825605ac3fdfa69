"""Stop 88 probe (not product code): what the head's per-sentence ``begin`` spends, part by part, in the loop.
Run from the repository root: .venv/bin/python results/libreoffice_en_de_zen3_stop88/begin.py"""
import collections
import statistics
import sys

import torch

sys.path[:0] = ["results/libreoffice_en_de_zen3_stop86", "results/libreoffice_en_de_zen3_stop88"]
from headcall import GAD, setup
from parts import timed
from pardec_fairseq.decoding.drafters import draft_head, shortlist

TIMED = [(draft_head, "encoder_keys_values"), (draft_head, "fast_cache_of"), (draft_head, "FastCache"),
         (draft_head, "chain_steps"), (draft_head, "AmongNew"), (shortlist.LexicalShortlist, "words"),
         (shortlist.ShortlistProjection, "select"), (draft_head.DraftHeadDrafter, "begin")]


def main():
    runs, models, batches = setup(100, [GAD])
    times = collections.defaultdict(list)
    for owner, name in TIMED:
        timed(owner, name, times[name].append)
    with torch.no_grad():
        for _ in range(2):
            for batch in batches:
                runs[0].generator.generate(models, batch)
    for name, seconds in times.items():
        print(f"{name:22s} n={len(seconds)} median {statistics.median(seconds) * 1e6:7.1f} us")


if __name__ == "__main__":
    main()
