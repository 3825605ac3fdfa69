"""Stop 89, run as `python hot.py TREE`: hot A/B of the compiled verifier pass (recipe-shaped random model): 1 and 5 tokens, median and min us."""
import sys, time
tree = sys.argv[1]
sys.path[:0] = [tree, tree + "/tests"]
import numpy as np, torch
torch.set_num_threads(2)
from tiny import build_transformer, make_dictionary
from pardec_fairseq.decoding.fast_verifier import FastDecoder
from pardec_fairseq.decoding import vector_kernels
import pardec_fairseq
assert pardec_fairseq.__file__.startswith(tree)
dictionary = make_dictionary(8288)
verifier = build_transformer(dictionary, seed=1, layers=3, embed_dim=256, heads=4, ffn_dim=1024, max_positions=256)
with torch.no_grad():
    fast = FastDecoder(verifier.decoder)
    vector_kernels.follow_torch_threads()
    enc = torch.randn(1, 20, 256)
    out = {}
    for n in (1, 5):
        cache = fast.start(enc, None, 1, 64)
        tokens = torch.randint(4, 8000, (1, n))
        first = torch.tensor([10])
        positions = (first + 2 + torch.arange(n)).view(1, n)
        times = []
        for i in range(3000):
            t = time.perf_counter_ns()
            fast.compiled(cache, tokens, positions, first, None)
            times.append(time.perf_counter_ns() - t)
        times = np.array(times[500:]) / 1000
        out[n] = (np.median(times), times.min())
print(f"{tree}: 1 token med {out[1][0]:.0f} min {out[1][1]:.0f} us; 5 tokens med {out[5][0]:.0f} min {out[5][1]:.0f} us")
