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
keys and values of every layer (``fast_layers``) live in a preallocated buffer ``[rows, heads, capacity, head_dim]``;
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

import torch
import torch.nn.functional as F
from torch import Tensor

from pardec_fairseq.decoding import vector_kernels
from pardec_fairseq.decoding.compiled_layers import CompiledPass, compiles
from pardec_fairseq.decoding.fast_encoder import FastEncoder, fast_encoder_obstacle
from pardec_fairseq.decoding.fast_layers import DecoderLayer, EncoderKeysValues, FastCache, run_layers
from pardec_fairseq.decoding.fast_ops import Product, layer_norm
from pardec_fairseq.decoding.proposals import DraftTree
from pardec_fairseq.decoding.verifier import Verifier, VerifierScores, embed_positions, plain_log_softmax
from pardec_fairseq.models.blockwise_transformer import BlockwiseTransformerDecoder
from pardec_fairseq.models.decoder_steps import encoder_states, replaces_output_layer

logger = logging.getLogger(__name__)


def fast_path_obstacle(decoder) -> Optional[str]:
    """The first option of ``decoder`` the fast path does not reproduce, or ``None``."""
    if not isinstance(decoder.embed_tokens, torch.nn.Embedding):
        return f"{type(decoder.embed_tokens).__name__} token embeddings"
    if decoder.quant_noise is not None:
        return "quant-noise"
    if decoder.dropout_module.apply_during_inference:
        return "--retain-dropout"
    if len({layer.encoder_attn is None for layer in decoder.layers}) > 1:  # the cache holds every layer's or none
        return "decoder layers of which only some attend to the encoder"
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
        # a blockwise Transformer's head 1 is its output projection after the heads' first features
        self.first_head = decoder.blockwise_heads.first if isinstance(decoder, BlockwiseTransformerDecoder) else None
        self.own_output_layer = self.first_head is None and replaces_output_layer(decoder)
        if not self.own_output_layer:
            self.output = Product.of(decoder.output_projection)
        self.compiled = CompiledPass(self) if compiles(self) else None
        # each layer attends to the encoder, or none does (``fast_path_obstacle``)
        self.encoder_keys_values = EncoderKeysValues(self.layers) if self.layers[0].encoder_attention else None

    def start(self, enc: Optional[Tensor], enc_padding: Optional[Tensor], rows: int, capacity: int) -> "FastCache":
        """An empty cache over the encoder states ``enc`` ``[rows, src, d]`` (``None`` without an
        encoder) and their padding ``[rows, src]`` (``None`` without any)."""
        encoder_kv = None if enc is None or self.encoder_keys_values is None else self.encoder_keys_values(enc)
        enc_mask = None if enc_padding is None else enc_padding.view(rows, 1, 1, -1)
        # the compiled layers read no column before a pass wrote it, so their buffers need no zeroing
        # (a batch's 6 MB of zeros took a millisecond); torch's attention multiplies every column
        allocate = self.layers[0].qkv.weight.new_empty if self.compiled is not None else \
            self.layers[0].qkv.weight.new_zeros
        buffers = allocate(len(self.layers), 2, rows, self.heads, capacity, self.head_dim)
        return FastCache(buffers, encoder_kv, enc_mask, enc, enc_padding)

    def features(self, cache: "FastCache", tokens: Tensor, positions: Optional[Tensor], first_index: Tensor,
                 tree: Optional[DraftTree] = None, rows: Optional[Tensor] = None):
        """The decoder output ``[rows, n, d]`` after ``tokens`` ``[rows, n]`` of the cache's ``rows``
        (``None``: all)."""
        if self.compiled is not None:
            return self.compiled(cache, tokens, positions, first_index, tree, rows)
        x = self.embed_scale * F.embedding(tokens, self.embed_tokens)
        if self.project_in is not None:
            x = self.project_in(x)
        decoder = self.decoder
        if positions is not None:
            x = x + embed_positions(decoder.embed_positions, positions)
        if decoder.layernorm_embedding is not None:
            x = layer_norm(x, decoder.layernorm_embedding)
        x = run_layers(self.layers, None, cache, x, first_index, tree, rows)
        if decoder.layer_norm is not None:
            x = layer_norm(x, decoder.layer_norm)
        if self.project_out is not None:
            x = self.project_out(x)
        return x

    def logits(self, x: Tensor) -> Tensor:
        if self.own_output_layer:
            return self.decoder.output_layer(x)
        return self.output(x if self.first_head is None else self.first_head(x))


@dataclass
class FastVerifierCache:
    caches: List[FastCache]  # one per model of the ensemble


class FastVerifier(Verifier):
    def __init__(self, models, tgt_dict, options):
        super().__init__(models, tgt_dict, options)
        self.fast_decoders = [FastDecoder(decoder) for decoder in self.decoders]
        self.compiled_log_probs = plain_log_softmax(models, options)
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
        vector_kernels.follow_torch_threads()
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
              tree: Optional[DraftTree] = None, on_demand: bool = False) -> VerifierScores:
        steps, positions = self.steps_and_positions(tokens, first_index, tree)

        def layers(start: int, stop: int, rows: Optional[Tensor] = None) -> List[Tensor]:
            row_tokens, row_positions, row_first = (tokens, positions, first_index) if rows is None else \
                (tokens[rows], positions[rows], first_index[rows])
            return [decoder.features(model_cache, row_tokens[:, start:stop], None if decoder.decoder.embed_positions
                                     is None else row_positions[:, start:stop], row_first + start, tree, rows)
                    for decoder, model_cache in zip(self.fast_decoders, cache.caches)]

        if on_demand and tree is None:  # a tree's nodes are not in the order acceptance reads them
            return VerifierScores(self, None, steps, max_len, later_layers=layers)
        return VerifierScores(self, layers(0, tokens.size(1)), steps, max_len, tree)

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
