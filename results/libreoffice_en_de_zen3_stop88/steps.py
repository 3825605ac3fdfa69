"""Stop 88 probe (not product code): where one hot drafting step of the head goes: the reader layer's and the head layer's parts, timed with the
cycle counter inside one compiled call (a copy of pass_layers with timers).
Run from the repository root: .venv/bin/python results/libreoffice_en_de_zen3_stop88/steps.py"""
import sys, time, numpy as np, torch, numba
from numba import types
from numba.extending import intrinsic
from numba.core import cgutils
from llvmlite import ir
sys.path[:0] = ["results/libreoffice_en_de_zen3_stop86", "results/libreoffice_en_de_zen3_stop88"]
from hot import captured_call
from pardec_fairseq.decoding import vector_kernels
from pardec_fairseq.decoding.compiled_layers import (norm_rows, _self_attend_rows, _cross_attend_rows, _activate,
                                                     embed_rows, NO_TREE)
from pardec_fairseq.decoding.drafters import compiled_head as ch

@intrinsic
def cycles(typingctx):
    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(64), []), "llvm.readcyclecounter")
        return builder.call(fn, [])
    return types.int64(), codegen

@numba.njit
def layers_timed(x, first, cache_rows, sees, chain, cache_views, layer_weights, t, base):
    keys, values, enc_keys, enc_values, enc_padding, padded = cache_views
    products, biases, widths, norms, eps, heads, normalize_before, cross_attention, activation = layer_weights
    rows, n, d = x.shape
    flat = x.reshape((rows * n, d))
    for layer in range(len(keys)):
        w, b, width, norm, epsilon = products[layer], biases[layer], widths[layer], norms[layer], eps[layer]
        c = cycles()
        h = norm_rows(flat, norm[0, 0], norm[1, 0], epsilon[0])
        c1 = cycles(); t[base + 0] += c1 - c; c = c1
        qkv = vector_kernels.product(h, w[0], b[0], width[0]).reshape((rows, n, width[0]))
        c1 = cycles(); t[base + 1] += c1 - c; c = c1
        attended = _self_attend_rows(qkv, keys[layer], values[layer], first, cache_rows, sees, chain, heads)
        c1 = cycles(); t[base + 2] += c1 - c; c = c1
        flat = flat + vector_kernels.product(attended.reshape((rows * n, d)), w[1], b[1], width[1])
        c1 = cycles(); t[base + 3] += c1 - c; c = c1
        h = norm_rows(flat, norm[0, 1], norm[1, 1], epsilon[1])
        q = vector_kernels.product(h, w[2], b[2], width[2]).reshape((rows, n, d))
        c1 = cycles(); t[base + 4] += c1 - c; c = c1
        attended = _cross_attend_rows(q, enc_keys[layer], enc_values[layer], enc_padding, padded, cache_rows, heads)
        c1 = cycles(); t[base + 5] += c1 - c; c = c1
        flat = flat + vector_kernels.product(attended.reshape((rows * n, d)), w[3], b[3], width[3])
        c1 = cycles(); t[base + 6] += c1 - c; c = c1
        h = norm_rows(flat, norm[0, 2], norm[1, 2], epsilon[2])
        inner = vector_kernels.product(h, w[4], b[4], width[4])
        _activate(inner.reshape(-1), activation)
        c1 = cycles(); t[base + 7] += c1 - c; c = c1
        flat = flat + vector_kernels.product(inner, w[5], b[5], width[5])
        c1 = cycles(); t[base + 8] += c1 - c; c = c1
    return flat.reshape((rows, n, d))

@numba.njit
def step_timed(outputs, last_states, fuse, slot_embedding, final_norm, output, first, sees, cache_views, layer_weights,
               reader, t, reps):
    for _ in range(reps):
        c0 = cycles()
        decoder_inputs, rcache, rweights = reader
        rows = first.shape[0]
        tokens = np.empty(rows, dtype=np.int64); columns = np.empty(rows, dtype=np.int64)
        for r in range(rows):
            tokens[r] = outputs[r, first[r]]; columns[r] = first[r]
        x = embed_rows(tokens, columns, *decoder_inputs)
        c = cycles(); t[0] += c - c0
        x = layers_timed(x.reshape((rows, 1, x.shape[1])), first, np.arange(rows), NO_TREE, True, rcache, rweights, t, 1)
        c = cycles()
        width = x.shape[2]; k, d = slot_embedding.shape
        inputs = np.empty((rows, width + d), dtype=np.float32)
        for r in range(rows):
            inputs[r, :width] = x[r, 0]; inputs[r, width:] = last_states[r]
        fused = vector_kernels.product(inputs, *fuse)
        xs = np.empty((rows, k, d), dtype=np.float32)
        for r in range(rows):
            for i in range(k):
                xs[r, i] = fused[r] + slot_embedding[i]
        c1 = cycles(); t[10] += c1 - c; c = c1
        xs = layers_timed(xs, first, np.arange(rows), sees, False, cache_views, layer_weights, t, 11)
        c = cycles()
        features = norm_rows(xs.reshape((rows * k, d)), *final_norm)
        logits = vector_kernels.product(features, *output)
        c1 = cycles(); t[20] += c1 - c; c = c1
        best_two = np.empty(2, dtype=np.int64); best_two_scores = np.empty(2, dtype=np.float32)
        ch._best_words(logits[0], best_two, best_two_scores)
        c1 = cycles(); t[21] += c1 - c; t[22] += c1 - c0


def main():
    a = captured_call()
    (_, _, _, _, outputs, last_states, embeddings, fuse, slot_embedding, final_norm, output, column_words, first, steps,
     leaves, sees, cache_views, layer_weights, memory, reader) = a
    t = np.zeros(23, dtype=np.int64)
    step_timed(outputs, last_states, fuse, slot_embedding, final_norm, output, first, sees, cache_views, layer_weights, reader, t, 10)
    t[:] = 0
    reps = 20000
    b = time.perf_counter()
    step_timed(outputs, last_states, fuse, slot_embedding, final_norm, output, first, sees, cache_views, layer_weights, reader, t, reps)
    wall = (time.perf_counter() - b) / reps * 1e6
    ghz = t[22] / reps / wall / 1e3
    names = ["embed"] + [f"reader {p}" for p in ("norm", "qkv", "self attend", "self out", "norm+enc q", "cross attend", "enc out", "norm+fc1+act", "fc2")] + \
            ["fuse+slots"] + [f"head {p}" for p in ("norm", "qkv", "self attend", "self out", "norm+enc q", "cross attend", "enc out", "norm+fc1+act", "fc2")] + \
            ["final norm+projection", "best two", "step total"]
    print(f"a hot step: {wall:.1f} us ({ghz:.2f} GHz counter)")
    for name, v in zip(names, t):
        print(f"  {name:24s} {v / reps / ghz / 1e3:6.2f} us")
    print("output columns", output[2], "reader widths", reader[2][2][0], "head widths", layer_weights[2][0])


if __name__ == "__main__":
    main()
