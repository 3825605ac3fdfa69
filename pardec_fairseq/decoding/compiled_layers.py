"""The fast path's decoder layers on a CPU, compiled with numba.

Why: a decoding pass of a small batch reads each weight once, and the rest of its work (layer
norms, attention over a few dozen columns, residuals, cache writes) is hundreds of operations on a
few vectors. Issued one by one from Python each costs about a microsecond of call overhead (numpy) or
several (torch), more than the arithmetic: on this project's CPU the layers of one greedy step of the
3-layer d-256 demo model took 352 us as ~200 numpy calls and 173 us as one compiled call, whose time
is its matrix products. Two shapes of pass run compiled, both following ``_Layer.forward``
(fairseq's decoder layer) exactly: one row and one new token as a single call (``RowStep``: greedy at
batch 1, and every pass without a draft), and any other pass with its matrix products on OpenBLAS
or oneDNN and everything between them compiled (``CompiledLayers``). The compiled code is cached
beside this file, so only the first run on a machine compiles.
"""
import math

import numba
import numpy as np
import torch
import torch.nn.functional as F
from fairseq.modules import SinusoidalPositionalEmbedding
from fairseq.modules.gelu import gelu
from torch import Tensor

# the activations the kernels compute; a decoder with another one runs through the torch layers
_ACTIVATIONS = {F.relu: 0, gelu: 1}


@numba.njit(cache=True, nogil=True)
def _layer_norm(x, weight, bias, eps):
    """``F.layer_norm`` of one vector (biased variance)."""
    d = x.shape[0]
    mean = np.float32(0.0)
    for i in range(d):
        mean += x[i]
    mean /= d
    variance = np.float32(0.0)
    for i in range(d):
        centred = x[i] - mean
        variance += centred * centred
    scale = np.float32(1.0) / np.sqrt(variance / d + eps)
    out = np.empty_like(x)
    for i in range(d):
        out[i] = (x[i] - mean) * scale * weight[i] + bias[i]
    return out


@numba.njit(cache=True, nogil=True)
def _product(x, weight, bias):
    """``x @ weight + bias`` for one vector, ``weight`` ``(in, out)``: a pass over the weight's
    rows, each scaled into the output (which stays in the first-level cache)."""
    out = bias.copy()
    for i in range(weight.shape[0]):
        xi = x[i]
        for j in range(weight.shape[1]):
            out[j] += xi * weight[i, j]
    return out


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _dot(a, b):
    """A dot product, summed in any order (so that it vectorises)."""
    total = np.float32(0.0)
    for k in range(a.shape[0]):
        total += a[k] * b[k]
    return total


@numba.njit(cache=True, nogil=True)
def _norm_rows(x, weight, bias, eps):
    """``F.layer_norm`` of each row of ``x`` ``[m, d]``."""
    out = np.empty_like(x)
    for r in range(x.shape[0]):
        out[r] = _layer_norm(x[r], weight, bias, eps)
    return out


@numba.njit(cache=True, nogil=True)
def _softmax_into(out, weights, values, columns):
    """``out += softmax(weights[:columns]) @ values[:columns]`` (-inf weights drop out)."""
    highest = -np.inf
    for c in range(columns):
        highest = max(highest, weights[c])
    total = np.float32(0.0)
    for c in range(columns):
        weights[c] = np.exp(weights[c] - highest)
        total += weights[c]
    for c in range(columns):
        p = weights[c] / total
        if p != 0:
            for k in range(out.shape[0]):
                out[k] += p * values[c, k]


@numba.njit(cache=True, nogil=True)
def _self_attend_rows(qkv, keys, values, first, sees, chain, heads):
    """A pass's self-attention: ``qkv`` ``[rows, n, 3d]`` (q already scaled) of the new tokens, whose keys
    and values are written at columns ``first[r] + i`` of ``keys``/``values`` ``[rows, heads, capacity,
    hd]``; token ``i`` of row ``r`` attends to the columns before ``first[r]`` and to the new tokens it
    sees: those up to itself (``chain``) or ``sees[r, i]`` (a tree). Returns ``[rows, n, d]``."""
    rows, n, width = qkv.shape
    d = width // 3
    head_dim = d // heads
    for r in range(rows):
        for i in range(n):
            for h in range(heads):
                start = h * head_dim
                keys[r, h, first[r] + i, :] = qkv[r, i, d + start:d + start + head_dim]
                values[r, h, first[r] + i, :] = qkv[r, i, 2 * d + start:2 * d + start + head_dim]
    out = np.zeros((rows, n, d), dtype=np.float32)
    weights = np.empty(keys.shape[2], dtype=np.float32)
    for r in range(rows):
        columns = first[r] + n
        for i in range(n):
            for h in range(heads):
                start = h * head_dim
                q = qkv[r, i, start:start + head_dim]
                for c in range(columns):
                    j = c - first[r]
                    if j >= 0 and (j > i if chain else not sees[r, i, j]):
                        weights[c] = -np.inf
                    else:
                        weights[c] = _dot(q, keys[r, h, c])
                _softmax_into(out[r, i, start:start + head_dim], weights, values[r, h], columns)
    return out


@numba.njit(cache=True, nogil=True)
def _cross_attend_rows(q, enc_keys, enc_values, padding, padded, heads):
    """A pass's encoder attention: ``q`` ``[rows, n, d]`` (already scaled) over ``enc_keys``/
    ``enc_values`` ``[rows, heads, src, hd]``, skipping source padding ``[rows, src]`` (when ``padded``)."""
    rows, n, d = q.shape
    head_dim = d // heads
    src = enc_keys.shape[2]
    out = np.zeros((rows, n, d), dtype=np.float32)
    weights = np.empty(src, dtype=np.float32)
    for r in range(rows):
        for i in range(n):
            for h in range(heads):
                start = h * head_dim
                for c in range(src):
                    if padded and padding[r, c]:
                        weights[c] = -np.inf
                    else:
                        weights[c] = _dot(q[r, i, start:start + head_dim], enc_keys[r, h, c])
                _softmax_into(out[r, i, start:start + head_dim], weights, enc_values[r, h], src)
    return out


@numba.njit(cache=True, nogil=True)
def _attend(q, keys, values, columns, padding, padded):
    """One token's attention: ``q`` ``[heads, hd]`` (already scaled) over the first ``columns`` of
    ``keys``/``values`` ``[heads, capacity, hd]``, skipping the columns where ``padding`` holds (when
    ``padded``). Returns ``[heads * hd]``."""
    heads, head_dim = q.shape
    out = np.zeros(heads * head_dim, dtype=np.float32)
    weights = np.empty(columns, dtype=np.float32)
    for h in range(heads):
        for c in range(columns):
            weights[c] = -np.inf if padded and padding[c] else _dot(q[h], keys[h, c])
        _softmax_into(out[h * head_dim:(h + 1) * head_dim], weights, values[h], columns)
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


@numba.njit(cache=True, nogil=True)
def _layers(x, column, keys, values, enc_keys, enc_values, enc_padding, padded, products, biases, norms, eps,
            heads, normalize_before, cross_attention, activation):
    """Every decoder layer for the token at buffer column ``column``: writes its keys and values there
    and returns the last layer's output. Per layer ``l``: ``products[l]`` holds the weights of q/k/v,
    self-attention out, encoder-attention q and out, fc1 and fc2 (``biases[l]`` theirs), ``norms[l]``
    ``[3 (weight, bias), 3 (self, encoder, ffn), d]``, ``eps[l]`` their epsilons."""
    d = x.shape[0]
    head_dim = d // heads
    for layer in range(len(keys)):
        w, b, norm, epsilon = products[layer], biases[layer], norms[layer], eps[layer]
        h = _layer_norm(x, norm[0, 0], norm[1, 0], epsilon[0]) if normalize_before else x
        qkv = _product(h, w[0], b[0])
        keys[layer][:, column, :] = qkv[d:2 * d].reshape(heads, head_dim)
        values[layer][:, column, :] = qkv[2 * d:].reshape(heads, head_dim)
        attended = _attend(qkv[:d].reshape(heads, head_dim), keys[layer], values[layer], column + 1,
                           enc_padding, False)
        x = x + _product(attended, w[1], b[1])
        if not normalize_before:
            x = _layer_norm(x, norm[0, 0], norm[1, 0], epsilon[0])
        if cross_attention:
            h = _layer_norm(x, norm[0, 1], norm[1, 1], epsilon[1]) if normalize_before else x
            q = _product(h, w[2], b[2]).reshape(heads, head_dim)
            attended = _attend(q, enc_keys[layer], enc_values[layer], enc_keys[layer].shape[1], enc_padding, padded)
            x = x + _product(attended, w[3], b[3])
            if not normalize_before:
                x = _layer_norm(x, norm[0, 1], norm[1, 1], epsilon[1])
        h = _layer_norm(x, norm[0, 2], norm[1, 2], epsilon[2]) if normalize_before else x
        x = x + _product(_activate(_product(h, w[4], b[4]), activation), w[5], b[5])
        if not normalize_before:
            x = _layer_norm(x, norm[0, 2], norm[1, 2], epsilon[2])
    return x


def compiles(decoder) -> bool:
    """Whether a ``FastDecoder``'s layers run compiled: on a CPU in float32 (where the products run on
    numpy and oneDNN), with an activation the kernels compute, and layers alike in what the kernels
    distinguish (fairseq builds them so)."""
    layers = decoder.layers
    first = layers[0]
    return all(layer.qkv.uses_numpy and layer.activation in _ACTIVATIONS and layer.activation is first.activation
               and layer.self_norm.before == first.self_norm.before
               and layer.encoder_attention == first.encoder_attention for layer in layers)


class _LayerKind:
    """What the kernels distinguish between decoders, read off the first layer (``compiles`` checks
    that every layer agrees)."""

    def __init__(self, layer):
        self.heads, self.normalize_before = layer.heads, layer.self_norm.before
        self.cross_attention, self.activation = layer.encoder_attention, _ACTIVATIONS[layer.activation]


def _norm_arrays(module):
    """A layer norm's weight, bias and epsilon as numpy (``None``: an absent norm)."""
    if module is None:
        return None
    return module.weight.detach().numpy(), module.bias.detach().numpy(), np.float32(module.eps)


class RowStep(_LayerKind):
    """The one-row, one-token decoder of a ``FastDecoder``: its re-laid weights handed to the kernel."""

    def __init__(self, decoder):
        self.decoder = decoder
        self.embed_tokens = decoder.embed_tokens.numpy()
        layers = decoder.layers
        super().__init__(layers[0])
        products, biases, norms, eps = [], [], [], []
        for layer in layers:
            parts = [layer.qkv, layer.self_out] + ([layer.enc_q, layer.enc_out] if self.cross_attention else []) \
                + [layer.fc1, layer.fc2]
            layer_norms = [layer.self_norm.module, layer.enc_norm.module if self.cross_attention else None,
                           layer.ffn_norm.module]
            if not self.cross_attention:  # type-stable placeholders the kernel never reads
                empty = np.zeros((0, 0), dtype=np.float32)
                parts = parts[:2] + [_Placeholder(empty), _Placeholder(empty)] + parts[2:]
            products.append(tuple(part.numpy_weight for part in parts))
            biases.append(tuple(np.zeros(part.numpy_weight.shape[1], np.float32) if part.numpy_bias is None
                                else part.numpy_bias for part in parts))
            # without encoder attention the self-attention's norm stands in for the absent one, unread
            arrays = [_norm_arrays(module or layer.self_norm.module) for module in layer_norms]
            norms.append(np.stack([np.stack([a[0] for a in arrays]), np.stack([a[1] for a in arrays])]))
            eps.append(np.array([a[2] for a in arrays], dtype=np.float32))
        self.products, self.biases, self.norms, self.eps = tuple(products), tuple(biases), tuple(norms), tuple(eps)
        fairseq_decoder = decoder.decoder
        self.embedding_norm = _norm_arrays(fairseq_decoder.layernorm_embedding)
        self.final_norm = _norm_arrays(fairseq_decoder.layer_norm)
        # fairseq's tables cover every position the verifier passes (it clamps them to the model's limit)
        positions = fairseq_decoder.embed_positions
        self.position_table = None
        if isinstance(positions, SinusoidalPositionalEmbedding):
            self.position_table = positions.weights.numpy()
        elif positions is not None:
            self.position_table = positions.weight.detach().numpy()

    def __call__(self, cache, token: int, positions, column: int) -> Tensor:
        decoder = self.decoder
        x = self.embed_tokens[token] * np.float32(decoder.embed_scale)
        if decoder.project_in is not None:
            x = decoder.project_in.numpy_apply(x)
        if positions is not None:
            x = x + self.position_table[int(positions)]
        if self.embedding_norm is not None:
            x = _layer_norm(x, *self.embedding_norm)
        cache.reserve(column + 1)
        keys, values, enc_keys, enc_values, enc_padding, padded = cache.one_row_views()
        x = _layers(x, column, keys, values, enc_keys, enc_values, enc_padding, padded, self.products, self.biases,
                    self.norms, self.eps, self.heads, self.normalize_before, self.cross_attention, self.activation)
        if self.final_norm is not None:
            x = _layer_norm(x, *self.final_norm)
        if decoder.project_out is not None:
            x = decoder.project_out.numpy_apply(x)
        return torch.from_numpy(x).view(1, 1, -1)


class _Placeholder:
    """A product slot the kernel never reads (no encoder attention)."""

    def __init__(self, weight):
        self.numpy_weight, self.numpy_bias = weight, None


class CompiledLayers(_LayerKind):
    """The decoder layers of any other pass (several rows or several new tokens, chains or trees): the
    matrix products through ``Product`` (OpenBLAS or oneDNN by rows), everything between them compiled."""

    def __init__(self, decoder):
        self.layers = decoder.layers
        super().__init__(self.layers[0])
        self.norms = [(_norm_arrays(layer.self_norm.module),
                       _norm_arrays(layer.enc_norm.module) if self.cross_attention else None,
                       _norm_arrays(layer.ffn_norm.module)) for layer in self.layers]

    def __call__(self, cache, x: Tensor, first_index: Tensor, tree) -> Tensor:
        """``x`` ``[rows, n, d]``: the new tokens' inputs; token ``i`` of row ``r`` at buffer column
        ``first_index[r] + i``, after its parent in ``tree`` (``None``: a chain)."""
        n = x.size(1)
        cache.reserve(int(first_index.max()) + n)
        first = first_index.numpy()
        sees = _NO_TREE if tree is None else tree.sees.numpy()
        padded = cache.enc_mask is not None
        padding = cache.enc_mask[:, 0, 0].numpy() if padded else _NO_PADDING
        x = x.numpy()
        for i, (layer, (self_norm, enc_norm, ffn_norm)) in enumerate(zip(self.layers, self.norms)):
            h = self._norm(x, self_norm) if self.normalize_before else x
            attended = _self_attend_rows(_apply(layer.qkv, h), cache.buffers[i, 0].numpy(),
                                         cache.buffers[i, 1].numpy(), first, sees, tree is None, self.heads)
            x = x + _apply(layer.self_out, attended)
            if not self.normalize_before:
                x = self._norm(x, self_norm)
            if self.cross_attention:
                h = self._norm(x, enc_norm) if self.normalize_before else x
                attended = _cross_attend_rows(_apply(layer.enc_q, h), cache.enc_keys[i].numpy(),
                                              cache.enc_values[i].numpy(), padding, padded, self.heads)
                x = x + _apply(layer.enc_out, attended)
                if not self.normalize_before:
                    x = self._norm(x, enc_norm)
            h = _apply(layer.fc1, self._norm(x, ffn_norm) if self.normalize_before else x)
            x = x + _apply(layer.fc2, _activate(h.reshape(-1), self.activation).reshape(h.shape))
            if not self.normalize_before:
                x = self._norm(x, ffn_norm)
        return torch.from_numpy(x)

    @staticmethod
    def _norm(x, norm):
        return _norm_rows(x.reshape(-1, x.shape[-1]), *norm).reshape(x.shape)


def _apply(product, x: np.ndarray) -> np.ndarray:
    """A ``Product`` on numpy rows (its library chosen by their number)."""
    return product(torch.from_numpy(x)).numpy()


_NO_TREE = np.zeros((0, 0, 0), dtype=np.bool_)
_NO_PADDING = np.zeros((0, 0), dtype=np.bool_)
