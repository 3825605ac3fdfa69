"""The fast path's encoder: the arithmetic of fairseq's ``TransformerEncoderBase`` on re-laid weights.

Why: the encoder runs once per batch, but over every source token at once, and fairseq's modules run
its products through MKL, which is slow for a few dozen rows on this project's AMD CPU (a 10-token
source: 2.0 ms, 72% of it in ``addmm``) and add their per-module overhead. Here the products go through
``Product`` (oneDNN with packed weights), q/k/v are one product with the query scaling folded in,
and the states come out batch-first, as the decoder's encoder attention reads them. Encoders this
path does not reproduce are named by ``fast_encoder_obstacle`` and run through fairseq's module.
"""
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.models.transformer import TransformerEncoderBase
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from fairseq.utils import make_positions
from torch import Tensor

from pardec_fairseq.decoding.fast_ops import Norm, Product, attend, layer_norm
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


class _EncoderLayer:
    """One ``TransformerEncoderLayerBase``'s weights, re-laid."""

    def __init__(self, layer):
        attn = layer.self_attn
        self.heads, self.head_dim = attn.num_heads, attn.head_dim
        self.qkv = Product.of(attn.q_proj, attn.k_proj, attn.v_proj, scale_first=attn.scaling)
        self.out = Product.of(attn.out_proj)
        self.attn_norm = Norm(layer.self_attn_layer_norm, layer.normalize_before)
        self.fc1, self.fc2 = Product.of(layer.fc1), Product.of(layer.fc2)
        self.activation = layer.activation_fn
        self.ffn_norm = Norm(layer.final_layer_norm, layer.normalize_before)

    def forward(self, x: Tensor, hidden: Optional[Tensor]) -> Tensor:
        """``x`` ``[rows, src, d]``; ``hidden`` ``[rows, 1, 1, src]``: True at source padding."""
        rows, src, _ = x.shape
        residual, h = x, self.attn_norm.pre(x)
        q, k, v = self.qkv(h).view(rows, src, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        x = self.attn_norm.post(residual + self.out(attend(q, k, v, hidden)))
        residual, h = x, self.ffn_norm.pre(x)
        return self.ffn_norm.post(residual + self.fc2(self.activation(self.fc1(h))))


class FastEncoder:
    """A fairseq ``TransformerEncoderBase`` re-laid for the fast path."""

    def __init__(self, encoder):
        self.encoder = encoder
        self.refresh()

    def refresh(self):
        """Re-lay the weights from the encoder (after they changed)."""
        self.layers = [_EncoderLayer(layer) for layer in self.encoder.layers]

    def __call__(self, src_tokens: Tensor) -> Tuple[Tensor, Optional[Tensor]]:
        """The encoder states ``[rows, src, d]`` of ``src_tokens`` ``[rows, src]``, and the source
        padding ``[rows, src]`` (``None`` without any), as fairseq's encoder computes them."""
        encoder = self.encoder
        padding = src_tokens.eq(encoder.padding_idx)
        x = encoder.embed_scale * F.embedding(src_tokens, encoder.embed_tokens.weight.detach())
        if encoder.embed_positions is not None:
            positions = encoder.embed_positions
            x = x + embed_positions(positions, make_positions(src_tokens, positions.padding_idx))
        if encoder.layernorm_embedding is not None:
            x = layer_norm(x, encoder.layernorm_embedding)
        hidden = None
        if bool(padding.any()):
            x = x * (1 - padding.unsqueeze(-1).type_as(x))
            hidden = padding.view(padding.size(0), 1, 1, -1)
        for layer in self.layers:
            x = layer.forward(x, hidden)
        if encoder.layer_norm is not None:
            x = layer_norm(x, encoder.layer_norm)
        return x, None if hidden is None else padding
