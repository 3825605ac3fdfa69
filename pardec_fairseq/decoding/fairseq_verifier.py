"""The reference verifier path (``--verifier fairseq``): the modules of a stock fairseq
``TransformerDecoder`` over fairseq's incremental cache.

It runs the decoder's layers with per-row positions and a causal mask over the new tokens, where
fairseq's own ``extract_features_scriptable`` would embed only the last token; rejected tokens
leave the cache through ``cache.rollback``. Slower than the fast path, but it runs fairseq's code
itself, so it is what the fast path is checked against and what decoders the fast path does not
reproduce decode with.
"""
import math
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch
from torch import Tensor

from pardec_fairseq.decoding import cache as cache_rollback
from pardec_fairseq.decoding.verifier import Verifier, VerifierScores, embed_positions
from pardec_fairseq.models.decoder_steps import decoder_input, decoder_output, encoder_states


@dataclass
class FairseqVerifierCache:
    """What the verifier keeps for the rows of a batch that are still decoding."""

    encoder_outs: List[Dict[str, List[Tensor]]]
    incremental_states: List[Dict[str, Dict[str, Optional[Tensor]]]]


class FairseqVerifier(Verifier):
    def __init__(self, models, tgt_dict, options):
        super().__init__(models, tgt_dict, options)
        if not self.ensemble.has_incremental_states():
            raise ValueError("the plugin's generators need models with incremental (cached) decoders")
        self.self_attentions = [cache_rollback.self_attention_modules(decoder) for decoder in self.decoders]

    def start(self, net_input, max_len) -> FairseqVerifierCache:
        encoder_outs = self.ensemble.forward_encoder(net_input)
        return FairseqVerifierCache(encoder_outs, [{} for _ in range(self.ensemble.models_size)])

    def score(self, cache: FairseqVerifierCache, tokens: Tensor, first_index: Tensor, max_len: int,
              tree=None, on_demand=False) -> VerifierScores:
        if tree is not None:  # fairseq's attention takes one mask for every row of the batch
            raise ValueError("drafts with several branches (a tree per row) need --verifier fast: the fairseq "
                             "path masks attention alike for every row")
        steps, positions = self.steps_and_positions(tokens, first_index)
        features = [self._features(decoder, tokens, positions, encoder_out, incremental_state)
                    for decoder, encoder_out, incremental_state in zip(
                        self.decoders, cache.encoder_outs, cache.incremental_states)]
        return VerifierScores(self, features, steps, max_len)

    def logits(self, model: int, x: Tensor) -> Tensor:
        return self.decoders[model].output_layer(x)

    @staticmethod
    def _features(decoder, tokens, positions, encoder_out, incremental_state):
        """``TransformerDecoderBase.extract_features_scriptable`` for n new tokens at once."""
        enc, enc_padding = encoder_states(encoder_out)
        x = decoder_input(decoder, tokens, None if decoder.embed_positions is None
                          else embed_positions(decoder.embed_positions, positions))

        n = tokens.size(1)
        self_attn_mask = None
        if n > 1:  # new token j sees the cache and new tokens up to j
            cached = FairseqVerifier._cached_length(decoder, incremental_state)
            self_attn_mask = torch.triu(x.new_full((n, cached + n), -math.inf), diagonal=cached + 1)
        for layer in decoder.layers:
            x, _, _ = layer(x, enc, enc_padding, incremental_state, self_attn_mask=self_attn_mask,
                            self_attn_padding_mask=None)
        return decoder_output(decoder, x)

    @staticmethod
    def _cached_length(decoder, incremental_state):
        buffer = decoder.layers[0].self_attn._get_input_buffer(incremental_state)
        return buffer["prev_key"].size(2) if "prev_key" in buffer else 0

    def rollback(self, cache: FairseqVerifierCache, valid: Tensor, kept: Tensor, new_columns: int, path=None):
        cache_rollback.rollback(self.self_attentions, cache.incremental_states, valid, kept, new_columns)

    def encoder_states(self, cache: FairseqVerifierCache):
        enc, padding = encoder_states(cache.encoder_outs[0])
        return None if enc is None else enc.transpose(0, 1), padding

    def keep_rows(self, cache: FairseqVerifierCache, rows: Tensor):
        cache.encoder_outs = self.ensemble.reorder_encoder_out(cache.encoder_outs, rows)
        self.ensemble.reorder_incremental_state(cache.incremental_states, rows)
