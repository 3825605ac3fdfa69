"""Stop 89, run as `python ab.py TREE` (TREE: a checkout, this one or a worktree of the commit before): hot-path A/B: a recipe-shaped random verifier (3+3 layers, d 256, FFN 1024, 8,292 words), plugin greedy and
gad with an untrained one-slot head reading the verifier's first layer (int8), ms per output token."""
import argparse, sys, time
tree = sys.argv[1]
sys.path[:0] = [tree, tree + "/tests"]
import torch
torch.set_num_threads(2)
from types import SimpleNamespace
from tiny import build_transformer, make_batch, make_dictionary
from test_lossless_matches_fairseq import GENERATION_DEFAULTS
from test_draft_head import build_head
from pardec_fairseq.decoding import build_generator
from pardec_fairseq.decoding.drafters.draft_head import DraftHeadDrafter
import pardec_fairseq
assert pardec_fairseq.__file__.startswith(tree), pardec_fairseq.__file__
dictionary = make_dictionary(8288)
verifier = build_transformer(dictionary, seed=1, layers=3, embed_dim=256, heads=4, ffn_dim=1024, max_positions=256,
                             eos_bias=-30.0)
model = build_head(verifier, block_size=1, layers=1, seed=2, input_layers=1).eval()
import random
rng = random.Random(0)
batches = [make_batch(dictionary, [[rng.randrange(4, 8000) for _ in range(rng.randint(8, 25))]]) for _ in range(12)]
generation = argparse.Namespace(**dict(GENERATION_DEFAULTS, max_len_a=1.2, max_len_b=10))
greedy = build_generator("greedy", [verifier], dictionary, generation, SimpleNamespace(verifier="fast"))
drafter = DraftHeadDrafter(model, precision="int8")
gad = build_generator("greedy", [verifier], dictionary, generation, SimpleNamespace(verifier="fast"), drafter=drafter)
def run(generator):
    tokens, start = 0, time.perf_counter()
    for batch in batches:
        tokens += len(generator.generate([verifier], batch)[0][0]["tokens"])
    return 1000 * (time.perf_counter() - start) / tokens
with torch.no_grad():
    run(greedy); run(gad)  # compile / warm
    g, d = [], []
    for _ in range(5):
        g.append(run(greedy)); d.append(run(gad))
    g.sort(); d.sort()
print(f"{tree}: greedy min {g[0]:.3f} med {g[2]:.3f}, gad min {d[0]:.3f} med {d[2]:.3f} ms/token")
