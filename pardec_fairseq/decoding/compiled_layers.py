"""The fast path's decoder layers on a CPU, compiled with numba.

Why: a decoding pass of a small batch reads each weight once, and the rest of its work (layer
norms, attention over a few dozen columns, residuals, cache writes) is hundreds of operations on a
few vectors. Issued one by one from Python each costs about a microsecond of call overhead (numpy) or
several (torch), more than the arithmetic: on this project's CPU the layers of one greedy step of the
3-layer d-256 demo model took 352 us as ~200 numpy calls and 173 us as one compiled call, whose time
is its matrix products. Every pass runs its layers as one compiled call (``pass_layers``,
following ``DecoderLayer.forward``, fairseq's decoder layer, exactly) with the matrix products on the
vector kernel (``vector_kernels``); around that call a verifier's pass embeds and normalises in
numpy (``CompiledPass``). The compiled code is cached beside this file, so only the first run on a
machine compiles (and the first after a source of the package changed: ``compiled_cache``).
"""
import math
from typing import Optional

import numba
import numpy as np
import torch
import torch.nn.functional as F
from fairseq.modules import SinusoidalPositionalEmbedding
from fairseq.modules.gelu import gelu
from llvmlite import ir
from numba import types
from numba.extending import intrinsic
from torch import Tensor

from pardec_fairseq.decoding import vector_kernels

# the activations the kernels compute; a decoder with another one runs through the torch layers
_ACTIVATIONS = {F.relu: 0, gelu: 1}


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _layer_norm_into(x, weight, bias, eps, out):
    """``out = F.layer_norm(x)`` for one vector (biased variance); the sums in any order, so that they
    vectorise (summed one by one, the norms of a 16-row, 4-token pass took a third of its attention
    and norms)."""
    d = x.shape[0]
    mean = np.float32(0.0)
    for i in range(d):
        mean += x[i]
    mean /= np.float32(d)
    variance = np.float32(0.0)
    for i in range(d):
        centred = x[i] - mean
        variance += centred * centred
    scale = np.float32(1.0) / np.sqrt(variance / np.float32(d) + eps)
    for i in range(d):
        out[i] = (x[i] - mean) * scale * weight[i] + bias[i]


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _dot(a, b):
    """A dot product, summed in any order (so that it vectorises)."""
    total = np.float32(0.0)
    for k in range(a.shape[0]):
        total += a[k] * b[k]
    return total


@numba.njit(cache=True, nogil=True)
def norm_rows(x, weight, bias, eps):
    """``F.layer_norm`` of each row of ``x`` ``[m, d]``."""
    out = np.empty_like(x)
    for r in range(x.shape[0]):
        _layer_norm_into(x[r], weight, bias, eps, out[r])
    return out


@intrinsic
def _float_from_bits(typingctx, bits):
    """The float32 whose bits are the low 32 of the integer ``bits`` (a bit cast LLVM vectorises)."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        value = args[0] if bits.bitwidth == 32 else builder.trunc(args[0], ir.IntType(32))
        return builder.bitcast(value, ir.FloatType())

    return types.float32(bits), codegen


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _exp(x):
    """``exp`` of a float32 at most 0 (a score minus its row's maximum), within 2 ulp, as arithmetic that
    vectorises: numba calls libm's ``exp`` one element at a time (no vector math library here), which
    took most of a softmax. Cephes' ``expf``: x = n ln 2 + r, a degree-6 polynomial of r, times 2^n
    built in the exponent bits; below -87 (under float32's normal range) 0, as for -inf."""
    if x < np.float32(-87.0):
        return np.float32(0.0)
    n = np.floor(x * np.float32(1.44269504088896341) + np.float32(0.5))
    r = x - n * np.float32(0.693359375) - n * np.float32(-2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    for coefficient in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = p * r + np.float32(coefficient)
    return (p * r * r + r + np.float32(1.0)) * _float_from_bits((np.int32(n) + 127) << 23)


@numba.njit(cache=True, nogil=True)
def largest_sum(x, shift):
    """The largest float32 ``x[c] + shift`` of a float32 vector (``-inf`` if none is above it; NaNs never
    are), over 16 running maxima so that the scan vectorises: one at a time it took half the time of
    an 8,296-word row's ``log_sum_exp`` on the Zen 3 VM."""
    lanes = np.full(16, -np.inf, dtype=np.float32)
    whole = x.shape[0] // 16 * 16
    for start in range(0, whole, 16):
        for lane in range(16):
            value = x[start + lane] + shift
            lanes[lane] = value if value > lanes[lane] else lanes[lane]
    largest = lanes.max()
    for c in range(whole, x.shape[0]):
        value = x[c] + shift
        largest = value if value > largest else largest
    return largest


@numba.njit(cache=True, nogil=True, fastmath={"contract", "reassoc", "nsz", "arcp"})
def log_sum_exp(x):
    """``log(sum(exp(x)))`` of a float32 vector in float32, its exponentials as ``_exp``'s (which vectorise),
    its maximum ``largest_sum``'s; a NaN, or an infinity, gives NaN."""
    highest = largest_sum(x, np.float32(0.0))
    total = np.float32(0.0)
    for c in range(x.shape[0]):
        total += _exp(x[c] - highest)
    return highest + np.log(total)


@numba.njit(cache=True, nogil=True)
def top_words(scores, tokens, values):
    """The ``len(tokens)`` highest of ``scores`` ``[words]``: their words into ``tokens`` and scores into
    ``values``, best first (the first of equal ones first, as ``argmax``)."""
    width = tokens.shape[0]
    for w in range(width):
        tokens[w], values[w] = 0, -np.inf
    for v in range(scores.shape[0]):
        x = scores[v]
        if x > values[width - 1]:
            j = width - 1
            while j > 0 and x > values[j - 1]:
                tokens[j], values[j] = tokens[j - 1], values[j - 1]
                j -= 1
            tokens[j], values[j] = v, x


@numba.njit(cache=True, nogil=True, fastmath={"contract", "reassoc", "nsz", "arcp"})
def _softmax_rows(scores):
    """Each row of ``scores`` ``[n, columns]`` becomes its softmax, in place (-inf scores become 0);
    like torch, each row is scaled by the reciprocal of its sum."""
    n, columns = scores.shape
    for i in range(n):
        highest = -np.inf
        for c in range(columns):
            highest = max(highest, scores[i, c])
        for c in range(columns):
            scores[i, c] = _exp(scores[i, c] - highest)
        total = np.float32(0.0)
        for c in range(columns):
            total += scores[i, c]
        scale = np.float32(1.0) / total
        for c in range(columns):
            scores[i, c] *= scale


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _weigh_values(out, probabilities, values, start):
    """``out[:, start:start + hd] = probabilities @ values[:columns]`` for ``probabilities`` ``[n,
    columns]`` (C-contiguous) and a head's ``values`` ``[capacity, hd]``. A head of one kernel panel's
    width (64) is a product on the vector kernel (its rows' sums stay in registers); others loop."""
    n, columns = probabilities.shape
    head_dim = values.shape[1]
    if head_dim == vector_kernels.PANEL:
        panel = values.reshape((1, 1, values.shape[0], head_dim))
        vector_kernels.panel_into(probabilities, panel, 0, _NO_BIAS, out, start)
        return
    for i in range(n):
        for k in range(head_dim):
            out[i, start + k] = 0.0
        for c in range(columns):
            p = probabilities[i, c]
            for k in range(head_dim):
                out[i, start + k] += p * values[c, k]


@numba.njit(cache=True, nogil=True)
def _self_attend_rows(qkv, keys, values, first, cache_rows, sees, chain, heads):
    """A pass's self-attention: ``qkv`` ``[rows, n, 3d]`` (q already scaled) of the new tokens of
    cache rows ``cache_rows``, whose keys and values are written at columns ``first[r] + i`` of
    ``keys``/``values`` ``[cache rows, heads, capacity, hd]``; token ``i`` of row ``r`` attends to the
    columns before ``first[r]`` and to the new tokens up to itself (``chain``), or in a tree to the
    columns ``sees[r, i]`` ``[m]`` names of the last ``m >= n`` (the new tokens and the ``m - n`` before
    them: a tree drafted a level at a time sees its earlier levels so) and to every column before those.
    Returns ``[rows, n, d]``."""
    rows, n, width = qkv.shape
    d = width // 3
    head_dim = d // heads
    seen = sees.shape[2]
    for r in range(rows):
        row = cache_rows[r]
        for i in range(n):
            column = first[r] + i
            for h in range(heads):
                start = h * head_dim
                for k in range(head_dim):  # element by element: numba's slice assignment costs ~100 ns
                    keys[row, h, column, k] = qkv[r, i, d + start + k]
                    values[row, h, column, k] = qkv[r, i, 2 * d + start + k]
    out = np.empty((rows, n, d), dtype=np.float32)
    for r in range(rows):
        row = cache_rows[r]
        columns = first[r] + n
        scores = np.empty((n, columns), dtype=np.float32)
        span = columns - seen  # the first column ``sees`` covers
        for h in range(heads):
            start = h * head_dim
            head_keys = keys[row, h]
            for i in range(n):
                q = qkv[r, i, start:start + head_dim]
                for c in range(columns):
                    if (c - first[r] > i) if chain else (c >= span and not sees[r, i, c - span]):
                        scores[i, c] = -np.inf
                    else:
                        scores[i, c] = _dot(q, head_keys[c])
            _softmax_rows(scores)
            _weigh_values(out[r], scores, values[row, h], start)
    return out


@numba.njit(cache=True, nogil=True)
def _cross_attend_rows(q, enc_keys, enc_values, padding, padded, cache_rows, heads):
    """A pass's encoder attention: ``q`` ``[rows, n, d]`` (already scaled) of cache rows ``cache_rows``
    over ``enc_keys``/``enc_values`` ``[cache rows, heads, src, hd]``, skipping source padding ``[cache
    rows, src]`` (when ``padded``)."""
    rows, n, d = q.shape
    head_dim = d // heads
    src = enc_keys.shape[2]
    out = np.empty((rows, n, d), dtype=np.float32)
    scores = np.empty((n, src), dtype=np.float32)
    for r in range(rows):
        row = cache_rows[r]
        for h in range(heads):
            start = h * head_dim
            head_keys = enc_keys[row, h]
            for i in range(n):
                for c in range(src):
                    if padded and padding[row, c]:
                        scores[i, c] = -np.inf
                    else:
                        scores[i, c] = _dot(q[r, i, start:start + head_dim], head_keys[c])
            _softmax_rows(scores)
            _weigh_values(out[r], scores, enc_values[row, h], start)
    return out


@numba.njit(cache=True, nogil=True)
def _activate(h, activation):
    if activation == 0:  # relu
        for i in range(h.shape[0]):
            h[i] = max(h[i], np.float32(0.0))
    else:  # gelu, as torch computes it: x * Phi(x)
        for i in range(h.shape[0]):
            h[i] = np.float32(0.5 * h[i] * (1.0 + math.erf(h[i] / math.sqrt(2.0))))
    return h


@numba.njit(cache=True, nogil=True, inline="always")
def pass_layers(x, first, cache_rows, sees, chain, cache_views, layer_weights):
    """Every decoder layer of a pass, as ``DecoderLayer.forward``: ``x`` ``[rows, n, d]`` the new tokens'
    inputs, token ``i`` of row ``r`` written at buffer column ``first[r] + i`` of layer ``l``'s keys and
    values (``buffers[l, 0]``/``buffers[l, 1]``, ``[cache rows, heads, capacity, hd]``) at cache row
    ``cache_rows[r]`` and attending as ``_self_attend_rows`` says. ``cache_views``:
    ``FastCache.numpy_views()``, whose layers may outnumber the weights' (a drafter reading the verifier's
    first layers runs those alone); ``layer_weights``: ``CompiledLayers.weights``, the layers stacked:
    ``products[j][l]`` the packed weight of layer ``l``'s q/k/v, self-attention out, encoder-attention q
    and out, fc1 and fc2 (``biases[j][l]`` its bias, ``widths[l, j]`` its output width), ``norms[l]``
    ``[3 (weight, bias), 3 (self, encoder, ffn), d]``, ``eps[l]`` their epsilons. Returns the last layer's
    output ``[rows, n, d]``. Inlined into the compiled calls that run it (the drafters'): numba compiles a
    function called from another one on its own too, and then again inside its caller, so each drafter's
    signature paid for these layers twice (8 s a signature on the Zen 3 VM); inlining takes the two tuples
    whole, as numba inlines no ``*args``."""
    buffers, encoder_kv, enc_padding, padded = cache_views
    products, biases, widths, norms, eps, heads, normalize_before, cross_attention, activation = layer_weights
    rows, n, d = x.shape
    flat = x.reshape((rows * n, d))
    for layer in range(widths.shape[0]):
        width, norm, epsilon = widths[layer], norms[layer], eps[layer]
        h = norm_rows(flat, norm[0, 0], norm[1, 0], epsilon[0]) if normalize_before else flat
        qkv = vector_kernels.product(h, products[0][layer], biases[0][layer], width[0]).reshape((rows, n, width[0]))
        attended = _self_attend_rows(qkv, buffers[layer, 0], buffers[layer, 1], first, cache_rows, sees, chain, heads)
        flat = flat + vector_kernels.product(attended.reshape((rows * n, d)), products[1][layer], biases[1][layer],
                                             width[1])
        if not normalize_before:
            flat = norm_rows(flat, norm[0, 0], norm[1, 0], epsilon[0])
        if cross_attention:
            h = norm_rows(flat, norm[0, 1], norm[1, 1], epsilon[1]) if normalize_before else flat
            q = vector_kernels.product(h, products[2][layer], biases[2][layer], width[2]).reshape((rows, n, d))
            attended = _cross_attend_rows(q, encoder_kv[layer, 0], encoder_kv[layer, 1], enc_padding, padded, cache_rows,
                                          heads)
            flat = flat + vector_kernels.product(attended.reshape((rows * n, d)), products[3][layer],
                                                 biases[3][layer], width[3])
            if not normalize_before:
                flat = norm_rows(flat, norm[0, 1], norm[1, 1], epsilon[1])
        h = norm_rows(flat, norm[0, 2], norm[1, 2], epsilon[2]) if normalize_before else flat
        inner = vector_kernels.product(h, products[4][layer], biases[4][layer], width[4])
        _activate(inner.reshape(-1), activation)
        flat = flat + vector_kernels.product(inner, products[5][layer], biases[5][layer], width[5])
        if not normalize_before:
            flat = norm_rows(flat, norm[0, 2], norm[1, 2], epsilon[2])
    return flat.reshape((rows, n, d))


@numba.njit(cache=True, nogil=True)
def write_keys_values(states, first, products, buffers):
    """Each layer's keys and values of ``states`` ``[rows, m, d]`` (``products``: ``stacked_products``' of
    the layers' packed products, keys then values side by side), written at columns ``first[r] + j`` of
    ``buffers[l, 0]``/``buffers[l, 1]`` (``[layers, 2, rows, heads, capacity, hd]``), the layout attention
    reads; ``states`` C-contiguous."""
    panels, biases, columns = products
    rows, m, d = states.shape
    flat = states.reshape((rows * m, d))
    heads, head_dim = buffers.shape[3], buffers.shape[5]
    width = heads * head_dim
    for layer in range(panels.shape[0]):
        keys_values = vector_kernels.product(flat, panels[layer], biases[layer], columns)
        keys, values = buffers[layer, 0], buffers[layer, 1]
        for r in range(rows):
            for j in range(m):
                column = first[r] + j
                for h in range(heads):
                    for c in range(head_dim):
                        keys[r, h, column, c] = keys_values[r * m + j, h * head_dim + c]
                        values[r, h, column, c] = keys_values[r * m + j, width + h * head_dim + c]


def stacked_products(products) -> tuple:
    """The packed products of alike layers (one per layer, ``Product``s or placeholders) as one operand of the
    compiled calls: ``(panels [layers, ...], biases [layers, ...], columns)``. One array over the layers
    rather than a tuple of them, so that a compiled call's signature does not depend on how many layers a
    model has (numba compiled each drafter once per layer count, 10-20 s a signature on the Zen 3 VM). Each
    product then reads its layer's part of the stacked arrays, so the weights are not held twice."""
    panels, biases = np.stack([p.panels for p in products]), np.stack([p.panel_bias for p in products])
    for layer, product in enumerate(products):
        product.panels, product.panel_bias = panels[layer], biases[layer]
    return panels, biases, products[0].columns


def compiles(decoder) -> bool:
    """Whether a ``FastDecoder``'s layers run compiled: on a CPU in float32 (where the products run on
    the vector kernel), with an activation the kernels compute, and layers alike in what the kernels
    distinguish (fairseq builds them so)."""
    layers = decoder.layers
    first = layers[0]
    return all(layer.qkv.on_kernel and layer.activation in _ACTIVATIONS and layer.activation is first.activation
               and layer.self_norm.before == first.self_norm.before
               and layer.encoder_attention == first.encoder_attention for layer in layers)


class Layers:
    """What ``compiles`` and ``CompiledLayers`` read of a decoder: its layers (``DecoderLayer``), for
    layers not in a ``FastDecoder`` (a drafter's)."""

    def __init__(self, layers):
        self.layers = layers


class _LayerKind:
    """What the kernels distinguish between decoders, read off the first layer (``compiles`` checks
    that every layer agrees)."""

    def __init__(self, layer):
        self.heads, self.normalize_before = layer.heads, layer.self_norm.before
        self.cross_attention, self.activation = layer.encoder_attention, _ACTIVATIONS[layer.activation]


def norm_arrays(module):
    """A layer norm's weight, bias and epsilon as numpy (``None``: an absent norm)."""
    if module is None:
        return None
    return module.weight.detach().numpy(), module.bias.detach().numpy(), np.float32(module.eps)


def norm_operands(module, width: int):
    """A compiled call's operands of an optional layer norm: its arrays (an absent one's stand-ins, never
    applied, of ``width``) and whether it is there."""
    if module is None:
        return (np.ones(width, dtype=np.float32), np.zeros(width, dtype=np.float32), np.float32(1e-5)), False
    return norm_arrays(module), True


class _CompiledWeights(_LayerKind):
    """A ``FastDecoder``'s layers as the kernel reads them: packed products, stacked norms."""

    def __init__(self, decoder):
        layers = decoder.layers
        super().__init__(layers[0])
        parts, widths, norms, eps = [], [], [], []
        for layer in layers:
            products = [layer.qkv, layer.self_out] + ([layer.enc_q, layer.enc_out] if self.cross_attention else []) \
                + [layer.fc1, layer.fc2]
            layer_norms = [layer.self_norm.module, layer.enc_norm.module if self.cross_attention else None,
                           layer.ffn_norm.module]
            if not self.cross_attention:  # type-stable placeholders the kernel never reads
                placeholder = _Placeholder(products[0].panels.dtype)
                products = products[:2] + [placeholder, placeholder] + products[2:]
            parts.append(products)
            widths.append([product.columns for product in products])
            # without encoder attention the self-attention's norm stands in for the absent one, unread
            arrays = [norm_arrays(module or layer.self_norm.module) for module in layer_norms]
            norms.append(np.stack([np.stack([a[0] for a in arrays]), np.stack([a[1] for a in arrays])]))
            eps.append(np.array([a[2] for a in arrays], dtype=np.float32))
        # per product: its layers' weights stacked (``stacked_products``)
        stacked = [stacked_products([products[j] for products in parts]) for j in range(len(parts[0]))]
        self.weights = (tuple(s[0] for s in stacked), tuple(s[1] for s in stacked), np.array(widths, dtype=np.int64),
                        np.stack(norms), np.stack(eps), self.heads, self.normalize_before, self.cross_attention,
                        self.activation)

    def layers(self, cache, x: np.ndarray, first: np.ndarray, tree, rows: Optional[np.ndarray] = None) -> np.ndarray:
        """``x`` ``[rows, n, d]``: the new tokens' inputs of the cache's ``rows`` (``None``: all);
        token ``i`` of row ``r`` at buffer column ``first[r] + i``, after its parent in ``tree``
        (``None``: a chain)."""
        cache.reserve(int(first.max()) + x.shape[1])
        sees = NO_TREE if tree is None else tree.sees.numpy()
        cache_rows = np.arange(x.shape[0]) if rows is None else rows
        return pass_layers(x, first, cache_rows, sees, tree is None, cache.numpy_views(), self.weights)


class CompiledPass(_CompiledWeights):
    """Every pass of a ``FastDecoder`` on a CPU, embedding to output in numpy around one compiled call of
    its layers: torch's per-call cost would be most of a one-token pass's time, and around a drafted
    pass's layers the embedding, positions, norms and conversions took 0.1-0.2 ms as torch operations
    on the Zen 3 VM."""

    def __init__(self, decoder):
        super().__init__(decoder)
        self.decoder = decoder
        self.embed_tokens = decoder.embed_tokens.numpy()
        fairseq_decoder = decoder.decoder
        self.embedding_norm = norm_arrays(fairseq_decoder.layernorm_embedding)
        self.final_norm = norm_arrays(fairseq_decoder.layer_norm)
        # fairseq's tables cover every position the verifier passes (it clamps them to the model's limit)
        self.position_table = position_table(fairseq_decoder.embed_positions)

    def __call__(self, cache, tokens: Tensor, positions: Optional[Tensor], first_index: Tensor, tree,
                 rows: Optional[Tensor] = None) -> Tensor:
        """The decoder output ``[rows, n, d]`` after ``tokens`` ``[rows, n]`` at fairseq ``positions``
        (``None``: a decoder without), as ``FastDecoder.features`` computes it."""
        decoder = self.decoder
        shape = tokens.shape
        x = self.embed_tokens[tokens.numpy().reshape(-1)] * np.float32(decoder.embed_scale)
        if decoder.project_in is not None:
            x = decoder.project_in.kernel_apply(x)
        if positions is not None:
            x += self.position_table[positions.numpy().reshape(-1)]
        if self.embedding_norm is not None:
            x = norm_rows(x, *self.embedding_norm)
        x = self.layers(cache, x.reshape(*shape, -1), first_index.numpy(), tree, None if rows is None else rows.numpy())
        x = x.reshape(-1, x.shape[-1])
        if self.final_norm is not None:
            x = norm_rows(x, *self.final_norm)
        if decoder.project_out is not None:
            x = decoder.project_out.kernel_apply(x)
        return torch.from_numpy(x.reshape(*shape, -1))


def position_table(module) -> Optional[np.ndarray]:
    """A fairseq positional embedding's table, a row per position, as numpy (``None``: no module)."""
    if module is None:
        return None
    if isinstance(module, SinusoidalPositionalEmbedding):
        return module.weights.numpy()
    return module.weight.detach().numpy()


class DecoderInputs:
    """A fairseq decoder's input of a token at an output column, as compiled drafting calls compute it
    (``embed_rows``): the scaled embedding, fairseq's position (pad + 1 + column) and the embedding's norm.
    For decoders whose embeddings are as wide as their layers (``self_draft_obstacle``)."""

    def __init__(self, decoder):
        table = position_table(decoder.embed_positions)
        self.operands = (decoder.embed_tokens.weight.detach().numpy(), np.float32(decoder.embed_scale),
                         np.zeros((1, 1), dtype=np.float32) if table is None else table, table is not None,
                         decoder.padding_idx,
                         *norm_operands(decoder.layernorm_embedding, decoder.embed_tokens.embedding_dim))


@numba.njit(cache=True, nogil=True)
def embed_rows(tokens, columns, embeddings, embed_scale, positions, has_positions, pad, embedding_norm,
               normalize_embedding):
    """``[n, d]``: the decoder inputs of ``tokens[i]`` at output columns ``columns[i]`` (``DecoderInputs``'
    operands after the first two)."""
    n = tokens.shape[0]
    x = np.empty((n, embeddings.shape[1]), dtype=np.float32)
    last_position = positions.shape[0] - 1
    for i in range(n):
        x[i] = embeddings[tokens[i]] * embed_scale
        if has_positions:
            x[i] += positions[min(pad + 1 + columns[i], last_position)]
    if normalize_embedding:
        x = norm_rows(x, *embedding_norm)
    return x


class _Placeholder:
    """A product slot the kernel never reads (no encoder attention), its panels of the layer's kind."""

    panel_bias = np.zeros(0, dtype=np.float32)
    columns = 0

    def __init__(self, dtype):
        self.panels = np.zeros((0, 1, 0, vector_kernels.PANEL), dtype=dtype)


class CompiledLayers(_CompiledWeights):
    """The decoder layers of any other pass (several rows or several new tokens, chains or trees), as
    one compiled call. Its products run on the vector kernel whatever the rows (on this project's CPU
    within 15% of oneDNN's single-threaded speed at 480 rows, faster below 160)."""

    def __call__(self, cache, x: Tensor, first_index: Tensor, tree, rows: Optional[Tensor] = None) -> Tensor:
        return torch.from_numpy(self.layers(cache, x.numpy(), first_index.numpy(), tree,
                                            None if rows is None else rows.numpy()))


# ``pass_layers``'s ``sees`` for a chain pass, which reads none
NO_TREE = np.zeros((0, 0, 0), dtype=np.bool_)
_NO_BIAS = np.zeros(vector_kernels.PANEL, dtype=np.float32)
