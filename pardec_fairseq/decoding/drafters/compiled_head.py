"""The draft head's drafting call and its cache writes on a CPU, each one compiled call.

Why: with the head's layer compiled, the rest of a drafting call still went through torch one
operation at a time: on this project's CPU (LibreOffice ``cpu40`` verifier, k = 4, 4,096 draft
words, batch 1) the layer took 0.16 ms of a 0.45 ms call, the slot inputs (embedding, fusion, slot
embedding) 0.11, the projection 0.13 and the argmax 0.05, and writing the accepted states' keys and
values 0.12 ms more. Here the slot inputs, the layers (``pass_layers``), the final norm, the
projection onto the draft words and each slot's argmax are one call (every step of an autoregressive
proposal in the same call), and the keys and values of the accepted states are projected and written
in another.
"""
import numba
import numpy as np
import torch
from torch import Tensor

from pardec_fairseq.decoding import vector_kernels
from pardec_fairseq.decoding.compiled_layers import CompiledLayers, norm_rows, pass_layers


@numba.njit(cache=True, nogil=True)
def _draft(tokens, last_states, embeddings, fuse, slot_embedding, final_norm, output, first, steps, sees,
           cache_views, layer_weights, memory):
    """Each row's drafted tokens ``[rows, steps * k]``: ``steps`` calls of the head, each drafting the top-1
    token of its ``k`` slots. Slot ``i``'s input is ``fuse(embedding of the row's last token, its last
    state) + slot_embedding[i]``; after a call, its slots' features stand in for the verifier's states
    not computed yet (their keys and values are written where the verifier's will be, the last slot's
    token and features are the next call's last token and state). ``fuse``/``output``: packed products
    ``(panels, bias, columns)``; ``final_norm``: ``(weight, bias, eps)``; ``memory`` as ``_remember``'s."""
    rows = tokens.shape[0]
    k, d = slot_embedding.shape
    width = embeddings.shape[1]
    drafted = np.empty((rows, steps * k), dtype=np.int64)
    inputs = np.empty((rows, width + d), dtype=np.float32)
    for r in range(rows):
        inputs[r, width:] = last_states[r]
    first = first.copy()
    for step in range(steps):
        for r in range(rows):
            inputs[r, :width] = embeddings[tokens[r] if step == 0 else drafted[r, step * k - 1]]
        fused = vector_kernels.product(inputs, *fuse)
        x = np.empty((rows, k, d), dtype=np.float32)
        for r in range(rows):
            for i in range(k):
                x[r, i] = fused[r] + slot_embedding[i]
        x = pass_layers(x, first, np.arange(rows), sees, False, *cache_views, *layer_weights)
        features = norm_rows(x.reshape((rows * k, d)), *final_norm)
        logits = vector_kernels.product(features, *output)
        for j in range(rows * k):
            drafted[j // k, step * k + j % k] = np.argmax(logits[j])
        if step + 1 < steps:
            _remember(features.reshape((rows, k, d)), first, memory, cache_views[0], cache_views[1])
            for r in range(rows):
                inputs[r, width:] = features[r * k + k - 1]
                first[r] += k
    return drafted


@numba.njit(cache=True, nogil=True)
def _remember(states, first, memory, keys, values):
    """Each layer's keys and values of ``states`` ``[rows, m, d]`` (``memory[l]``: the packed product
    ``(panels, bias, columns)``, keys then values), written at columns ``first[r] + j`` of
    ``keys[l]``/``values[l]`` ``[rows, heads, capacity, hd]``; ``states`` C-contiguous."""
    rows, m, d = states.shape
    flat = states.reshape((rows * m, d))
    for layer in range(len(keys)):
        heads, head_dim = keys[layer].shape[1], keys[layer].shape[3]
        width = heads * head_dim
        keys_values = vector_kernels.product(flat, *memory[layer])
        for r in range(rows):
            for j in range(m):
                column = first[r] + j
                for h in range(heads):
                    for c in range(head_dim):
                        keys[layer][r, h, column, c] = keys_values[r * m + j, h * head_dim + c]
                        values[layer][r, h, column, c] = keys_values[r * m + j, width + h * head_dim + c]


def _packed(product):
    return product.panels, product.panel_bias, product.columns


class CompiledHead:
    """A ``DraftHeadDrafter``'s weights as the compiled calls read them (its layers, fusion, final
    norm, draft projection and memory products re-laid by the drafter)."""

    def __init__(self, layers: CompiledLayers, embeddings: Tensor, fuse, slot_embedding: Tensor, final_norm,
                 output, memory):
        self.layer_weights = layers.weights
        self.embeddings = embeddings.detach().numpy()
        self.fuse, self.output = _packed(fuse), _packed(output)
        self.slot_embedding = slot_embedding.detach().numpy()
        self.final_norm = (final_norm.weight.detach().numpy(), final_norm.bias.detach().numpy(),
                           np.float32(final_norm.eps))
        self.memory = tuple(_packed(product) for product in memory)

    def draft(self, cache, tokens: Tensor, last_states: Tensor, lengths: Tensor, sees: Tensor,
              steps: int = 1) -> Tensor:
        """``[rows, steps * k]``: ``steps`` calls' slots' top-1 tokens after each row's last token
        ``tokens`` ``[rows]``, the slots written at columns ``lengths[r]`` on of ``cache``."""
        cache.reserve(int(lengths.max()) + steps * self.slot_embedding.shape[0])
        return torch.from_numpy(_draft(tokens.numpy(), last_states.numpy(), self.embeddings, self.fuse,
                                       self.slot_embedding, self.final_norm, self.output, lengths.numpy(), steps,
                                       sees.numpy(), cache.numpy_views(), self.layer_weights, self.memory))

    def remember(self, cache, states: Tensor, lengths: Tensor):
        """Write the keys and values of ``states`` ``[rows, m, d]`` (contiguous) at columns ``lengths[r]`` on."""
        cache.reserve(int(lengths.max()) + states.size(1))
        keys, values = cache.numpy_views()[:2]
        _remember(states.numpy(), lengths.numpy(), self.memory, keys, values)
