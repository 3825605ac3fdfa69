"""The fast verifier path: the arithmetic of fairseq's ``TransformerDecoder`` without its per-call
overhead.

Why: a decoding step of a small model reads its weights once and is bound by memory, not
arithmetic, yet fairseq's modules spend more time in Python, ``nn.Module`` calls and tensor
allocations than in the matrix products (issue 13: 5.5 ms per token through fairseq against 2.3 ms
for a plain step). Here each decoder's weights are re-laid once per generator (again when
``refresh`` is called, e.g. at each validation during training): matrices ``(in, out)``-contiguous
for the matrix library that is fastest for the product at hand (``Product``), the self-attention's
q/k/v fused into one product with the query scaling folded into q, the encoder-attention's k/v fused
and computed once per batch. The self-attention
keys and values of every layer live in a preallocated buffer ``[rows, heads, capacity, head_dim]``;
a pass writes its new tokens at each row's own positions and each new token attends to the
columns up to its own position (in a tree: the accepted columns and its ancestors), so a rejected
chain needs no rollback (the next pass writes over it); only a tree's accepted path moves. On a CPU
the small operations between the products run compiled (``compiled_layers``), and the encoder runs
re-laid too (``fast_encoder``). Decoders this path does not reproduce are named by
``fast_path_obstacle`` and decode on the fairseq path.
"""
import logging
from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import torch
import torch.nn.functional as F
from fairseq.models.transformer import TransformerDecoderBase
from torch import Tensor

from pardec_fairseq.decoding.compiled_layers import CompiledLayers, RowStep, compiles
from pardec_fairseq.decoding.fast_encoder import FastEncoder, fast_encoder_obstacle
from pardec_fairseq.decoding.fast_ops import Norm, Product, attend, layer_norm
from pardec_fairseq.decoding.proposals import DraftTree
from pardec_fairseq.decoding.verifier import Verifier, VerifierScores, embed_positions
from pardec_fairseq.models.decoder_steps import encoder_states

logger = logging.getLogger(__name__)


def fast_path_obstacle(decoder) -> Optional[str]:
    """The first option of ``decoder`` the fast path does not reproduce, or ``None``."""
    if not isinstance(decoder.embed_tokens, torch.nn.Embedding):
        return f"{type(decoder.embed_tokens).__name__} token embeddings"
    if decoder.quant_noise is not None:
        return "quant-noise"
    if decoder.dropout_module.apply_during_inference:
        return "--retain-dropout"
    for layer in decoder.layers:
        if layer.cross_self_attention:
            return "--cross-self-attention"
        if layer.c_attn is not None:
            return "--scale-heads"
        if layer.attn_ln is not None:
            return "--scale-attn"
        if layer.ffn_layernorm is not None:
            return "--scale-fc"
        if layer.w_resid is not None:
            return "--scale-resids"
        if layer.dropout_module.apply_during_inference:
            return "--retain-dropout"
        for attention in (layer.self_attn, layer.encoder_attn):
            if attention is not None and (attention.bias_k is not None or attention.add_zero_attn):
                return "attention bias_kv / zero_attn"
    return None


class DecoderLayer:
    """One pre- or post-norm decoder layer's weights, re-laid: a fairseq ``TransformerDecoderLayerBase``
    (``of``), or any layer of the same arithmetic (the draft head's)."""

    def __init__(self, heads: int, qkv: Product, self_out: Product, self_norm: Norm, fc1: Product, fc2: Product,
                 activation, ffn_norm: Norm, encoder: Optional[tuple] = None):
        """``qkv``: q (scaled), k and v side by side; ``encoder``: the encoder attention's ``(q
        (scaled), k and v side by side, out, norm)``, or ``None`` without one."""
        self.heads, self.head_dim = heads, qkv.weight.size(1) // 3 // heads
        self.qkv, self.self_out, self.self_norm = qkv, self_out, self_norm
        self.encoder_attention = encoder is not None
        if self.encoder_attention:
            self.enc_q, self.enc_kv, self.enc_out, self.enc_norm = encoder
        self.fc1, self.fc2, self.activation, self.ffn_norm = fc1, fc2, activation, ffn_norm

    @classmethod
    def of(cls, layer) -> "DecoderLayer":
        self_attn, before = layer.self_attn, layer.normalize_before
        encoder = None
        if layer.encoder_attn is not None:
            attn = layer.encoder_attn
            encoder = (Product.of(attn.q_proj, scale_first=attn.scaling), Product.of(attn.k_proj, attn.v_proj),
                       Product.of(attn.out_proj), Norm(layer.encoder_attn_layer_norm, before))
        return cls(self_attn.num_heads,
                   Product.of(self_attn.q_proj, self_attn.k_proj, self_attn.v_proj, scale_first=self_attn.scaling),
                   Product.of(self_attn.out_proj), Norm(layer.self_attn_layer_norm, before),
                   Product.of(layer.fc1), Product.of(layer.fc2), layer.activation_fn,
                   Norm(layer.final_layer_norm, before), encoder)

    def encoder_keys_values(self, enc: Tensor):
        """``enc`` ``[rows, src, d]`` -> keys and values ``[rows, heads, src, head_dim]``."""
        kv = self.enc_kv(enc)
        kv = kv.view(kv.size(0), kv.size(1), 2, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return kv[0].contiguous(), kv[1].contiguous()

    def forward(self, x: Tensor, keys: Tensor, values: Tensor, write: "_Write", enc_keys, enc_values, enc_mask):
        rows, n, _ = x.shape
        residual, h = x, self.self_norm.pre(x)
        qkv = self.qkv(h).view(rows, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        write.into(keys, qkv[1])
        write.into(values, qkv[2])
        h = attend(qkv[0], keys[:, :, :write.columns], values[:, :, :write.columns], write.hidden)
        x = self.self_norm.post(residual + self.self_out(h))
        if self.encoder_attention:
            residual, h = x, self.enc_norm.pre(x)
            q = self.enc_q(h).view(rows, n, self.heads, self.head_dim).transpose(1, 2)
            h = attend(q, enc_keys, enc_values, enc_mask)
            x = self.enc_norm.post(residual + self.enc_out(h))
        residual, h = x, self.ffn_norm.pre(x)
        h = self.fc2(self.activation(self.fc1(h)))
        return self.ffn_norm.post(residual + h)


@dataclass
class _Write:
    """Where a pass's new tokens go in the self-attention buffers, and what each one sees."""

    index: Optional[Tensor]  # [rows, heads, n, hd] buffer columns per row, or None: one slice
    start: int  # the slice's first column when ``index`` is None
    columns: int  # buffer columns the pass attends over
    hidden: Optional[Tensor]  # [rows, 1, n, columns]: True where a new token must not look

    @classmethod
    def plan(cls, first_index: Tensor, n: int, heads: int, head_dim: int, tree: Optional[DraftTree]):
        """New token ``i`` of row ``r`` goes to column ``first_index[r] + i`` and sees the columns
        before ``first_index[r]`` and, among the new ones, those before it (a chain) or its ancestors."""
        rows, device = first_index.size(0), first_index.device
        start = int(first_index.max())  # with one row, its first column
        columns = start + n
        if rows == 1 and n == 1:  # one token sees every column
            return cls(None, start, columns, None)
        own = first_index.unsqueeze(1) + torch.arange(n, device=device)  # [rows, n] each token's own column
        if tree is None:
            hidden = torch.arange(columns, device=device) > own.unsqueeze(2)
        else:
            relative = (torch.arange(columns, device=device) - first_index.unsqueeze(1)).unsqueeze(1)
            sees = tree.sees.gather(2, relative.clamp(0, n - 1).expand(rows, n, columns))
            hidden = (relative >= n) | ((relative >= 0) & ~sees)
        if rows == 1:
            return cls(None, start, columns, hidden.unsqueeze(1))
        return cls(own.view(rows, 1, n, 1).expand(rows, heads, n, head_dim), 0, columns, hidden.unsqueeze(1))

    def into(self, buffer: Tensor, new: Tensor):
        if self.index is None:
            buffer[:, :, self.start:self.start + new.size(2)] = new
        else:
            buffer.scatter_(2, self.index, new)


def run_layers(layers: List[DecoderLayer], compiled: Optional[CompiledLayers], cache: "FastCache", x: Tensor,
               first_index: Tensor, tree) -> Tensor:
    """The layers of a pass over the new tokens' inputs ``x`` ``[rows, n, d]``: token ``i`` of row ``r``
    at buffer column ``first_index[r] + i``, seeing the columns before it and, among the new ones,
    those ``tree.sees`` says (``None``: those up to itself); compiled where ``compiled`` is given."""
    if compiled is not None:
        return compiled(cache, x.contiguous(), first_index, tree)
    write = _Write.plan(first_index, x.size(1), layers[0].heads, layers[0].head_dim, tree)
    cache.reserve(write.columns)
    for i, layer in enumerate(layers):
        x = layer.forward(x, cache.buffers[i, 0], cache.buffers[i, 1], write, cache.enc_keys[i], cache.enc_values[i],
                          cache.enc_mask)
    return x


class FastDecoder:
    """A fairseq ``TransformerDecoderBase`` re-laid for the fast path."""

    def __init__(self, decoder):
        self.decoder = decoder
        self.refresh()

    def refresh(self):
        """Re-lay the weights from the decoder (after they changed)."""
        decoder = self.decoder
        self.embed_tokens, self.embed_scale = decoder.embed_tokens.weight.detach(), decoder.embed_scale
        self.project_in = None if decoder.project_in_dim is None else Product.of(decoder.project_in_dim)
        self.project_out = None if decoder.project_out_dim is None else Product.of(decoder.project_out_dim)
        self.layers = [DecoderLayer.of(layer) for layer in decoder.layers]
        self.heads, self.head_dim = self.layers[0].heads, self.layers[0].head_dim
        self.own_output_layer = type(decoder).output_layer is not TransformerDecoderBase.output_layer
        if not self.own_output_layer:
            self.output = Product.of(decoder.output_projection)
        self.row_step, self.compiled = (RowStep(self), CompiledLayers(self)) if compiles(self) else (None, None)

    def start(self, enc: Optional[Tensor], enc_padding: Optional[Tensor], rows: int, capacity: int) -> "FastCache":
        """An empty cache over the encoder states ``enc`` ``[rows, src, d]`` (``None`` without an
        encoder) and their padding ``[rows, src]`` (``None`` without any)."""
        enc_keys, enc_values = [], []
        for layer in self.layers:
            keys, values = layer.encoder_keys_values(enc) if layer.encoder_attention and enc is not None \
                else (None, None)
            enc_keys.append(keys)
            enc_values.append(values)
        enc_mask = None if enc_padding is None else enc_padding.view(rows, 1, 1, -1)
        weight = self.layers[0].qkv.weight
        buffers = weight.new_zeros(len(self.layers), 2, rows, self.heads, capacity, self.head_dim)
        return FastCache(buffers, enc_keys, enc_values, enc_mask, enc, enc_padding)

    def features(self, cache: "FastCache", tokens: Tensor, positions: Optional[Tensor], first_index: Tensor,
                 tree: Optional[DraftTree] = None):
        """The decoder output ``[rows, n, d]`` after ``tokens`` ``[rows, n]``."""
        if self.row_step is not None and tokens.numel() == 1:
            return self.row_step(cache, int(tokens), positions, int(first_index))
        x = self.embed_scale * F.embedding(tokens, self.embed_tokens)
        if self.project_in is not None:
            x = self.project_in(x)
        decoder = self.decoder
        if positions is not None:
            x = x + embed_positions(decoder.embed_positions, positions)
        if decoder.layernorm_embedding is not None:
            x = layer_norm(x, decoder.layernorm_embedding)
        x = run_layers(self.layers, self.compiled, cache, x, first_index, tree)
        if decoder.layer_norm is not None:
            x = layer_norm(x, decoder.layer_norm)
        if self.project_out is not None:
            x = self.project_out(x)
        return x

    def logits(self, x: Tensor) -> Tensor:
        if self.own_output_layer:  # e.g. the blockwise Transformer's head 1
            return self.decoder.output_layer(x)
        return self.output(x)


@dataclass
class FastCache:
    """The fast path's state for the rows of a batch still decoding."""

    buffers: Tensor  # [layers, 2 (keys, values), rows, heads, capacity, head_dim]
    enc_keys: List[Optional[Tensor]]  # per layer [rows, heads, src, head_dim]
    enc_values: List[Optional[Tensor]]
    enc_mask: Optional[Tensor]  # [rows, 1, 1, src]: True at source padding
    enc: Optional[Tensor]  # [rows, src, d]: the encoder states (for drafters that read them)
    enc_padding: Optional[Tensor]  # [rows, src]
    # the compiled layers' numpy views of the buffers, made once (buffers change only when they grow
    # or rows leave)
    views: Optional[tuple] = None

    def numpy_views(self):
        """The buffers as numpy, per layer: ``(keys, values, encoder keys, encoder values)`` (tuples
        over layers; empty arrays without encoder attention), the source padding ``[rows, src]`` and
        whether any is padded."""
        if self.views is None:
            layers = range(self.buffers.size(0))
            empty = np.zeros((0, 0, 0, 0), dtype=np.float32)
            enc_keys = tuple(empty if k is None else k.numpy() for k in self.enc_keys)
            enc_values = tuple(empty if v is None else v.numpy() for v in self.enc_values)
            padded = self.enc_mask is not None
            padding = self.enc_mask[:, 0, 0].numpy() if padded else np.zeros((0, 0), dtype=np.bool_)
            self.views = (tuple(self.buffers[i, 0].numpy() for i in layers),
                          tuple(self.buffers[i, 1].numpy() for i in layers), enc_keys, enc_values, padding, padded)
        return self.views

    def reserve(self, columns: int):
        """Room for ``columns`` columns: a pass's filler, or a tree's nodes near the end of the output,
        can reach past the ``max_len + 2`` columns an output needs."""
        missing = columns - self.buffers.size(4)
        if missing > 0:
            shape = list(self.buffers.shape)
            shape[4] = missing
            self.buffers = torch.cat([self.buffers, self.buffers.new_zeros(shape)], 4)
            self.views = None

    def keep_path(self, valid: Tensor, path: Tensor):
        """Move the keys and values of each row's kept pass positions ``path`` (``[rows, m]``, from
        column ``valid[r]``) to the columns right after its accepted ones."""
        layers, _, rows, heads, _, head_dim = self.buffers.shape
        m = path.size(1)
        index = (valid.unsqueeze(1) + path).view(1, 1, rows, 1, m, 1).expand(layers, 2, rows, heads, m, head_dim)
        target = (valid.unsqueeze(1) + torch.arange(m, device=path.device)).view(1, 1, rows, 1, m, 1)
        self.buffers.scatter_(4, target.expand_as(index), self.buffers.gather(4, index))

    def keep_rows(self, rows: Tensor):
        self.views = None
        self.buffers = self.buffers[:, :, rows]
        self.enc_keys = [None if k is None else k[rows] for k in self.enc_keys]
        self.enc_values = [None if v is None else v[rows] for v in self.enc_values]
        if self.enc_mask is not None:
            self.enc_mask, self.enc_padding = self.enc_mask[rows], self.enc_padding[rows]
        if self.enc is not None:
            self.enc = self.enc[rows]


@dataclass
class FastVerifierCache:
    caches: List[FastCache]  # one per model of the ensemble


class FastVerifier(Verifier):
    def __init__(self, models, tgt_dict, options):
        super().__init__(models, tgt_dict, options)
        self.fast_decoders = [FastDecoder(decoder) for decoder in self.decoders]
        self.fast_encoders = []
        for model in models:
            obstacle = fast_encoder_obstacle(model.encoder)
            if obstacle is not None:
                logger.info(f"the fast path runs fairseq's own encoder for a model with {obstacle}")
            self.fast_encoders.append(FastEncoder(model.encoder) if obstacle is None else None)

    def refresh(self):
        for part in self.fast_decoders + self.fast_encoders:
            if part is not None:
                part.refresh()

    def start(self, net_input, max_len) -> FastVerifierCache:
        rows = net_input["src_tokens"].size(0)
        # output indices 0 .. max_len are ever cached (and one more: the pass that forces EOS);
        # a pass whose filler or tree reaches further grows the buffers (``FastCache.reserve``)
        capacity = max_len + 2
        return FastVerifierCache([decoder.start(*self._encode(model, encoder, net_input), rows, capacity)
                                  for model, encoder, decoder in zip(self.ensemble.models, self.fast_encoders,
                                                                     self.fast_decoders)])

    @staticmethod
    def _encode(model, encoder: Optional[FastEncoder], net_input):
        """Encoder states ``[rows, src, d]`` and source padding (``None`` without any)."""
        if encoder is not None:
            return encoder(net_input["src_tokens"])
        enc, padding = encoder_states(model.encoder.forward_torchscript(net_input))
        if padding is not None and not bool(padding.any()):
            padding = None
        return None if enc is None else enc.transpose(0, 1), padding

    def score(self, cache: FastVerifierCache, tokens: Tensor, first_index: Tensor, max_len: int,
              tree: Optional[DraftTree] = None) -> VerifierScores:
        steps, positions = self.steps_and_positions(tokens, first_index, tree)
        features = [decoder.features(model_cache, tokens, None if decoder.decoder.embed_positions is None
                                     else positions, first_index, tree)
                    for decoder, model_cache in zip(self.fast_decoders, cache.caches)]
        return VerifierScores(self, features, steps, max_len, tree)

    def logits(self, model: int, x: Tensor) -> Tensor:
        return self.fast_decoders[model].logits(x)

    def encoder_states(self, cache: FastVerifierCache):
        return cache.caches[0].enc, cache.caches[0].enc_padding

    def rollback(self, cache, valid: Tensor, kept: Tensor, new_columns: int, path: Optional[Tensor] = None):
        """A chain needs nothing: the next pass writes over the columns of rejected tokens. A tree's
        accepted path moves next to the accepted tokens."""
        if path is not None:
            for model_cache in cache.caches:
                model_cache.keep_path(valid, path)

    def keep_rows(self, cache: FastVerifierCache, rows: Tensor):
        for model_cache in cache.caches:
            model_cache.keep_rows(rows)
