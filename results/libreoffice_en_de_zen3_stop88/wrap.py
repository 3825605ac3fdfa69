"""Stop 88 probe (not product code): ``CompiledHead.draft`` with timers around its compiled call: the Python before
(building the arguments), the call (numba's dispatch included) and after (torch views, the tree). Run from the
repository root: .venv/bin/python results/libreoffice_en_de_zen3_stop88/wrap.py"""
import collections, statistics, sys, time
import numpy as np, torch
sys.path.insert(0, "results/libreoffice_en_de_zen3_stop86")
from headcall import GAD, setup
from pardec_fairseq.decoding.drafters import compiled_head as ch
from pardec_fairseq.decoding.proposals import DraftTree
marks = collections.defaultdict(list)
def draft(self, cache, outputs, last_states, lengths, sees, steps=1, leaves=0, accepted=None, verifier_cache=None):
    t0 = time.perf_counter()
    first = lengths.numpy()
    drafted_reach = int(first.max()) + steps * self.slot_embedding.shape[0]
    cache.reserve(drafted_reach if accepted is None else max(drafted_reach, accepted.reach()))
    reader = None if self.input_layers is None else self.input_layers.operands(verifier_cache, drafted_reach)
    pending = ch._NOTHING_ACCEPTED if accepted is None else accepted.operands()
    a = (*pending, outputs.numpy(), last_states.numpy(), self.embeddings, self.fuse, self.slot_embedding,
         self.final_norm, *self.projection(), first, steps, leaves, sees.numpy(), cache.numpy_views(),
         self.layer_weights, self.memory, reader)
    t1 = time.perf_counter()
    out = ch._remember_and_draft(*a)
    t2 = time.perf_counter()
    drafted, counts, parents, tree_parents, depth, tree_sees = out
    tree = DraftTree(*(torch.from_numpy(part) for part in (tree_parents, depth, tree_sees))) if leaves else None
    r = torch.from_numpy(drafted), torch.from_numpy(counts), torch.from_numpy(parents) if leaves else None, tree
    t3 = time.perf_counter()
    marks["before"].append(t1 - t0); marks["call"].append(t2 - t1); marks["after"].append(t3 - t2)
    return r
ch.CompiledHead.draft = draft
runs, models, batches = setup(100, [GAD])
with torch.no_grad():
    for _ in range(2):
        for batch in batches:
            runs[0].generator.generate(models, batch)
for k, s in marks.items():
    print(f"{k:8s} n={len(s)} median {statistics.median(s)*1e6:6.1f} us")
