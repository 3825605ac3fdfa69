"""The fast path's encoder: the arithmetic of fairseq's ``TransformerEncoderBase`` on re-laid weights.

Why: the encoder runs once per batch, but over every source token at once, and fairseq's modules run
its products through MKL, which is slow for a few dozen rows on this project's AMD CPU (a 10-token
source: 2.0 ms, 72% of it in ``addmm``) and add their per-module overhead. An encoder layer is a
decoder layer without encoder attention whose tokens all see each other, so the encoder runs on the
decoder's re-laid layers (``fast_layers``; one compiled call for all layers on a CPU), and the states
come out batch-first, as the decoder's encoder attention reads them. Encoders this path does not reproduce are named by
``fast_encoder_obstacle`` and run through fairseq's module.
"""
from typing import Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from fairseq.models.transformer import TransformerEncoderBase
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from fairseq.utils import make_positions
from torch import Tensor

from pardec_fairseq.decoding.compiled_layers import CompiledLayers, compiles, norm_arrays, norm_rows, position_table
from pardec_fairseq.decoding.fast_layers import AmongNew, DecoderLayer, FastCache, run_layers
from pardec_fairseq.decoding.fast_ops import Norm, Product, layer_norm
from pardec_fairseq.decoding.verifier import embed_positions


def fast_encoder_obstacle(encoder) -> Optional[str]:
    """The first option of ``encoder`` the fast encoder does not reproduce, or ``None``."""
    if not isinstance(encoder, TransformerEncoderBase):
        return f"a {type(encoder).__name__} encoder"
    if not isinstance(encoder.embed_tokens, torch.nn.Embedding):
        return f"{type(encoder.embed_tokens).__name__} source embeddings"
    if encoder.quant_noise is not None:
        return "quant-noise"
    if encoder.dropout_module.apply_during_inference:
        return "--retain-dropout"
    for layer in encoder.layers:
        if not isinstance(layer, TransformerEncoderLayerBase) or type(layer).forward is not TransformerEncoderLayerBase.forward:
            return f"{type(layer).__name__} encoder layers"
        if layer.dropout_module.apply_during_inference:
            return "--retain-dropout"
        if layer.self_attn.bias_k is not None or layer.self_attn.add_zero_attn:
            return "attention bias_kv / zero_attn"
    return None


class FastEncoder:
    """A fairseq ``TransformerEncoderBase`` re-laid for the fast path."""

    def __init__(self, encoder):
        self.encoder = encoder
        self.refresh()

    def refresh(self):
        """Re-lay the weights from the encoder (after they changed)."""
        self.layers = [self._relaid(layer) for layer in self.encoder.layers]
        self.heads, self.head_dim = self.layers[0].heads, self.layers[0].head_dim
        self.compiled = CompiledLayers(self) if compiles(self) else None
        if self.compiled is not None:  # the tables ``_compiled_call`` reads
            encoder = self.encoder
            self.embed_table = encoder.embed_tokens.weight.detach().numpy()
            self.position_table = position_table(encoder.embed_positions)
            self.embedding_norm, self.final_norm = norm_arrays(encoder.layernorm_embedding), \
                norm_arrays(encoder.layer_norm)

    @staticmethod
    def _relaid(layer) -> DecoderLayer:
        attn, before = layer.self_attn, layer.normalize_before
        return DecoderLayer(attn.num_heads, Product.of(attn.q_proj, attn.k_proj, attn.v_proj, scale_first=attn.scaling),
                            Product.of(attn.out_proj), Norm(layer.self_attn_layer_norm, before), Product.of(layer.fc1),
                            Product.of(layer.fc2), layer.activation_fn, Norm(layer.final_layer_norm, before))

    def __call__(self, src_tokens: Tensor) -> Tuple[Tensor, Optional[Tensor]]:
        """The encoder states ``[rows, src, d]`` of ``src_tokens`` ``[rows, src]``, and the source
        padding ``[rows, src]`` (``None`` without any), as fairseq's encoder computes them."""
        if self.compiled is not None:
            encoded = self._compiled_call(src_tokens.numpy())
            if encoded is not None:
                return encoded
        encoder = self.encoder
        padding = src_tokens.eq(encoder.padding_idx)
        x = encoder.embed_scale * F.embedding(src_tokens, encoder.embed_tokens.weight.detach())
        if encoder.embed_positions is not None:
            positions = encoder.embed_positions
            x = x + embed_positions(positions, make_positions(src_tokens, positions.padding_idx))
        if encoder.layernorm_embedding is not None:
            x = layer_norm(x, encoder.layernorm_embedding)
        padded = bool(padding.any())
        if padded:
            x = x * (1 - padding.unsqueeze(-1).type_as(x))
        rows, src, _ = x.shape
        # every token sees every unpadded one: keys and values go to a buffer of one column per token
        buffers = x.new_empty(len(self.layers), 2, rows, self.heads, src, self.head_dim)
        cache = FastCache(buffers, None, None, None, None)
        sees = AmongNew((~padding).unsqueeze(1).expand(rows, src, src).contiguous())
        x = run_layers(self.layers, self.compiled, cache, x, padding.new_zeros(rows, dtype=torch.long), sees)
        if encoder.layer_norm is not None:
            x = layer_norm(x, encoder.layer_norm)
        return x, padding if padded else None

    def _compiled_call(self, tokens: np.ndarray) -> Optional[Tuple[Tensor, Optional[Tensor]]]:
        """``__call__`` in numpy around the compiled layers (the dozen torch operations around them took
        about 0.2 ms a batch on the Zen 3 VM); ``None`` for a source longer than the positions' table
        (fairseq's sinusoidal table grows on the fly, as the torch path's does)."""
        encoder = self.encoder
        rows, src = tokens.shape
        x = self.embed_table[tokens.reshape(-1)] * np.float32(encoder.embed_scale)
        if self.position_table is not None:  # fairseq's ``make_positions``
            pad = encoder.embed_positions.padding_idx
            counted = tokens != pad
            positions = np.cumsum(counted, axis=1) * counted + pad
            if positions.max() >= self.position_table.shape[0]:
                return None
            x += self.position_table[positions.reshape(-1)]
        if self.embedding_norm is not None:
            x = norm_rows(x, *self.embedding_norm)
        kept = tokens != encoder.padding_idx
        padded = not kept.all()
        if padded:
            x *= kept.reshape(-1, 1)
        buffers = torch.empty(len(self.layers), 2, rows, self.heads, src, self.head_dim)
        cache = FastCache(buffers, None, None, None, None)
        sees = np.ascontiguousarray(np.broadcast_to(kept.reshape(rows, 1, src), (rows, src, src)))
        x = self.compiled.layers(cache, x.reshape(rows, src, -1), np.zeros(rows, dtype=np.int64),
                                 AmongNew(torch.from_numpy(sees))).reshape(rows * src, -1)
        if self.final_norm is not None:
            x = norm_rows(x, *self.final_norm)
        return torch.from_numpy(x.reshape(rows, src, -1)), torch.from_numpy(~kept) if padded else None
