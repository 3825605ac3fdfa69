"""The decoder for one row and one new token (greedy at batch 1, and every pass without a draft),
compiled with numba.

Why: at batch 1 a decoding step reads each weight once, and the rest of its work (layer norms,
attention over a few dozen columns, residuals) is a few hundred operations on vectors of a few
hundred floats. Issued one by one from Python each costs about a microsecond of call overhead
(numpy) or several (torch), more than the arithmetic: on this project's CPU the layers of one step of
the 3-layer d-256 demo model took 352 us as ~200 numpy calls and 173 us as one compiled call, whose
time is its matrix products. The kernel follows ``_Layer.forward`` (fairseq's decoder layer)
exactly; its compiled code is cached beside this file, so only the first run on a machine compiles.
"""
import math

import numba
import numpy as np
import torch
import torch.nn.functional as F
from fairseq.modules import SinusoidalPositionalEmbedding
from fairseq.modules.gelu import gelu
from torch import Tensor

# the activations the kernel computes itself; a decoder with another one runs its one-row passes
# through the torch layers
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


@numba.njit(cache=True, nogil=True)
def _attend(q, keys, values, columns, padding, padded):
    """One token's attention: ``q`` ``[heads, hd]`` (already scaled) over the first ``columns`` of
    ``keys``/``values`` ``[heads, capacity, hd]``, skipping the columns where ``padding`` holds (when
    ``padded``). Returns ``[heads * hd]``."""
    heads, head_dim = q.shape
    out = np.zeros(heads * head_dim, dtype=np.float32)
    weights = np.empty(columns, dtype=np.float32)
    for h in range(heads):
        highest = -np.inf
        for c in range(columns):
            if padded and padding[c]:
                weights[c] = -np.inf
                continue
            score = np.float32(0.0)
            for k in range(head_dim):
                score += q[h, k] * keys[h, c, k]
            weights[c] = score
            highest = max(highest, score)
        total = np.float32(0.0)
        for c in range(columns):
            weights[c] = np.exp(weights[c] - highest)
            total += weights[c]
        for c in range(columns):
            p = weights[c] / total
            if p != 0:
                for k in range(head_dim):
                    out[h * head_dim + k] += p * values[h, c, k]
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


def _norm_arrays(module):
    """A layer norm's weight, bias and epsilon as numpy (``None``: an absent norm)."""
    if module is None:
        return None
    return module.weight.detach().numpy(), module.bias.detach().numpy(), np.float32(module.eps)


class RowStep:
    """The one-row, one-token decoder of a ``FastDecoder``: its re-laid weights handed to the kernel."""

    def __init__(self, decoder):
        self.decoder = decoder
        self.embed_tokens = decoder.embed_tokens.numpy()
        layers = decoder.layers
        first = layers[0]
        self.heads, self.normalize_before = first.heads, first.self_norm.before
        self.cross_attention, self.activation = first.encoder_attention, _ACTIVATIONS[first.activation]
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

    @staticmethod
    def applies(decoder) -> bool:
        """Where the products run on numpy (a CPU in float32) and the layers are alike in what the
        kernel distinguishes (fairseq builds them so)."""
        layers = decoder.layers
        first = layers[0]
        return all(layer.qkv.uses_numpy and layer.activation in _ACTIVATIONS and layer.activation is first.activation
                   and layer.self_norm.before == first.self_norm.before
                   and layer.encoder_attention == first.encoder_attention for layer in layers)

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
