"""Stop 91 probe: a head step's pieces, hot, on operands captured from a real drafting call."""
import sys, time
import numba, numpy as np, torch
sys.path.insert(0, "results/libreoffice_en_de_zen3_stop86")
from headcall import setup, GAD
from pardec_fairseq.decoding.drafters import compiled_head
from pardec_fairseq.decoding.compiled_layers import pass_layers, norm_rows, write_keys_values, NO_TREE
from pardec_fairseq.decoding import vector_kernels as vk

runs, models, batches = setup(60, ["greedy", GAD])
captured = []
original = compiled_head._remember_and_draft
def wrapper(*args):
    if len(captured) < 1 and args[12][0] > 12:  # a call well into a sentence
        captured.append(args)
    return original(*args)
compiled_head._remember_and_draft = wrapper
with torch.no_grad():
    for batch in batches:
        runs[1].generator.generate(models, batch)
        if captured: break
(accepted_states, path, accepted_first, accepted, outputs, last_states, embeddings, fuse, slot_embedding, final_norm,
 output, column_words, first, steps, leaves, sees, cache_views, layer_weights, memory, reader) = captured[0]
print("first", first, "steps", steps, "leaves", leaves, "src", cache_views[1].shape, "columns", output[2] if len(output) > 2 else None)
numba.set_num_threads(2)

@numba.njit
def t_head_layer(x, first, sees, cache_views, layer_weights, n):
    for _ in range(n):
        pass_layers(x, first, np.arange(1), sees, False, cache_views, layer_weights)

@numba.njit
def t_read(inputs, outputs, drafted, first, reader, n):
    for _ in range(n):
        compiled_head._read_tokens(inputs, outputs, drafted, first, 1, 1, reader)

@numba.njit
def t_draft(outputs, last_states, embeddings, fuse, slot_embedding, final_norm, output, column_words, first, steps,
            leaves, sees, cache_views, layer_weights, memory, reader, n):
    for _ in range(n):
        compiled_head._draft(outputs, last_states, embeddings, fuse, slot_embedding, final_norm, output, column_words,
                             first, steps, leaves, sees, cache_views, layer_weights, memory, reader)

@numba.njit
def t_tail(x, final_norm, output, n):
    for _ in range(n):
        f = norm_rows(x, *final_norm)
        vk.product(f, *output)

@numba.njit
def t_write(x, first, memory, buffers, n):
    for _ in range(n):
        write_keys_values(x, first, memory, buffers)

def timed(label, f, *args, n=2000):
    f(*args, 5)
    t = time.perf_counter(); f(*args, n); print(f"{label}: {(time.perf_counter() - t) / n * 1e6:.1f} us")

x = np.random.default_rng(0).standard_normal((1, 1, slot_embedding.shape[1])).astype(np.float32)
timed("head layer (pass_layers, 1 row)", t_head_layer, x, first.copy(), sees, cache_views, layer_weights)
inputs = np.zeros((1, embeddings.shape[1] + slot_embedding.shape[1]), dtype=np.float32)
drafted = np.full((1, 4), 5, dtype=np.int64)
timed("reader (_read_tokens, 1 token)", t_read, inputs, outputs, drafted, first.copy() + 1, reader)
timed("final norm + projection", t_tail, x.reshape(1, -1), final_norm, output)
timed("head key/value write", t_write, x, first.copy(), memory, cache_views[0])
for s in (1, 2, 4):
    timed(f"_draft, {s} steps, leaves {leaves}", t_draft, outputs, last_states, embeddings, fuse, slot_embedding,
          final_norm, output, column_words, first.copy(), s, leaves, sees, cache_views, layer_weights, memory, reader)
