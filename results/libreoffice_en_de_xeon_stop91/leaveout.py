"""Stop 91 probe: the head's _draft with one piece left out at a time (a copy of its chain-with-leaf path)."""
import sys, time
import numba, numpy as np, torch
sys.path.insert(0, "results/libreoffice_en_de_zen3_stop86")
exec(open("results/libreoffice_en_de_xeon_stop91/steppieces.py").read().split("numba.set_num_threads(2)")[0])
numba.set_num_threads(2)
from pardec_fairseq.decoding.compiled_layers import pass_layers, norm_rows, write_keys_values
from pardec_fairseq.decoding.drafters.compiled_head import _read_tokens, _best_words

@numba.njit
def draft(outputs, last_states, fuse, slot_embedding, final_norm, output, first, steps, sees, cache_views,
          layer_weights, memory, reader, skip):
    rows = outputs.shape[0]
    k, d = slot_embedding.shape
    width = reader[2][3].shape[1] if False else d
    drafted = np.zeros((rows, steps), dtype=np.int64)
    best_two = np.empty(2, dtype=np.int64)
    best_two_scores = np.empty(2, dtype=np.float32)
    inputs = np.zeros((rows, 2 * d), dtype=np.float32)
    first = first.copy()
    features = np.zeros((rows, d), dtype=np.float32)
    for step in range(steps):
        if skip != 1:
            _read_tokens(inputs, outputs, drafted, first, step, k, reader)
        fused = vk.product(inputs, *fuse)
        x = fused.reshape((rows, k, d))
        if skip != 2:
            x = pass_layers(x, first, np.arange(rows), sees, False, cache_views, layer_weights)
        if skip != 3:
            features = norm_rows(x.reshape((rows * k, d)), *final_norm)
            logits = vk.product(features, *output)
            if skip != 4:
                _best_words(logits[0], best_two, best_two_scores)
                drafted[0, step] = best_two[0] % 100 + 4
        if skip != 5 and step + 1 < steps:
            write_keys_values(features.reshape((rows, k, d)), first, memory, cache_views[0])
        inputs[0, d:] = features[0]
        first[0] += 1
    return drafted

names = ["nothing", "reader", "head layer", "norm+projection+top2", "top2", "key/value write"]
for skip in range(6):
    f = lambda n: [draft(outputs, last_states, fuse, slot_embedding, final_norm, output, first, 4, sees, cache_views,
                         layer_weights, memory, reader, skip) for _ in range(n)]
    f(5)
    best = []
    for _ in range(3):
        t = time.perf_counter(); f(1000); best.append((time.perf_counter() - t) / 1000 * 1e6)
    print(f"4 steps, {names[skip]:22s} left out: {min(best):.1f} us")
