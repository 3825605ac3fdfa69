"""The verifier: the autoregressive model (or ensemble) whose greedy output every algorithm keeps.

It owns the encoder outputs and the incremental decoder cache of one batch, scores the next
position with exactly fairseq's arithmetic (``EnsembleModel.forward_decoder``, NaN and pad
masking, unknown-word penalty), and drops finished rows from its caches.
"""
import math
from dataclasses import dataclass
from typing import Dict, List, Optional

from fairseq.sequence_generator import EnsembleModel
from torch import Tensor


@dataclass
class VerifierCache:
    """What the verifier keeps for the rows of a batch that are still decoding."""

    encoder_outs: List[Dict[str, List[Tensor]]]
    incremental_states: List[Dict[str, Dict[str, Optional[Tensor]]]]


class Verifier:
    def __init__(self, models, tgt_dict, options):
        self.ensemble = EnsembleModel(models)
        if not self.ensemble.has_incremental_states():
            raise ValueError("the plugin's generators need models with incremental (cached) decoders")
        self.options = options
        self.pad, self.unk, self.eos = tgt_dict.pad(), tgt_dict.unk(), tgt_dict.eos()

    def max_decoder_positions(self):
        return self.ensemble.max_decoder_positions()

    def start(self, net_input) -> VerifierCache:
        encoder_outs = self.ensemble.forward_encoder(net_input)
        return VerifierCache(encoder_outs, [{} for _ in range(self.ensemble.models_size)])

    def next_log_probs(self, cache: VerifierCache, prefix: Tensor) -> Tensor:
        """Log-probabilities ``[rows, vocab]`` of the position after ``prefix`` (BOS included)."""
        lprobs, _ = self.ensemble.forward_decoder(
            prefix, cache.encoder_outs, cache.incremental_states, self.options.temperature
        )
        lprobs[lprobs != lprobs] = -math.inf
        lprobs[:, self.pad] = -math.inf
        lprobs[:, self.unk] -= self.options.unk_penalty
        return lprobs

    def keep_rows(self, cache: VerifierCache, rows: Tensor):
        """Keep only ``rows`` (indices into the current batch) in every cache."""
        cache.encoder_outs = self.ensemble.reorder_encoder_out(cache.encoder_outs, rows)
        self.ensemble.reorder_incremental_state(cache.incremental_states, rows)
