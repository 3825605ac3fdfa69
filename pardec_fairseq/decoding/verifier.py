"""The verifier: the autoregressive model (or ensemble) whose greedy output every algorithm keeps.

One pass scores several new target tokens at once over the cache of the accepted prefix. Two paths
do the decoder's work (``--verifier``): ``fast_verifier`` (the default) on re-laid weights and a
static cache, ``fairseq_verifier`` (the reference) through fairseq's own modules. Both hand their
decoder features to the arithmetic here, which follows ``EnsembleModel.forward_decoder`` and
``SequenceGenerator`` (temperature, ensemble average, NaN, pad and unknown-word handling), so a
one-token pass gives fairseq's numbers.
"""
import math
from typing import Callable, List, Optional

import numba
import numpy as np
import torch
import torch.nn.functional as F
from fairseq.models.fairseq_decoder import FairseqDecoder
from fairseq.models.transformer import TransformerDecoderBase
from fairseq.modules import LearnedPositionalEmbedding, SinusoidalPositionalEmbedding
from fairseq.sequence_generator import EnsembleModel
from torch import Tensor

from pardec_fairseq.decoding.compiled_layers import log_sum_exp
from pardec_fairseq.decoding.proposals import DraftTree


def check_decoder(decoder):
    """Refuse, at start, decoders whose arithmetic the multi-token pass does not reproduce."""
    problem = None
    if not isinstance(decoder, TransformerDecoderBase):
        problem = f"a {type(decoder).__name__} decoder (a fairseq TransformerDecoder is needed)"
    elif decoder.adaptive_softmax is not None:
        problem = "an adaptive softmax output layer"
    elif decoder.cross_self_attention:
        problem = "cross self-attention"
    elif decoder.embed_positions is not None and not isinstance(
            decoder.embed_positions, (LearnedPositionalEmbedding, SinusoidalPositionalEmbedding)):
        problem = f"{type(decoder.embed_positions).__name__} positions"
    if problem:
        raise ValueError(f"the plugin's --gen-algo scores several tokens per pass and does not support "
                         f"models with {problem}; use --gen-algo fairseq for this model")


def embed_positions(module, positions: Tensor) -> Tensor:
    """Positional embeddings at explicit fairseq positions (``pad + 1 + index``), one per token."""
    if isinstance(module, SinusoidalPositionalEmbedding):
        weights = module.weights
        needed = int(positions.max()) + 1
        if needed > weights.size(0):  # fairseq extends the table on the fly in the same way
            weights = SinusoidalPositionalEmbedding.get_embedding(
                needed, module.embedding_dim, module.padding_idx).to(weights)
        return weights.index_select(0, positions.reshape(-1)).view(*positions.shape, -1)
    return F.embedding(positions, module.weight, module.padding_idx, module.max_norm, module.norm_type,
                       module.scale_grad_by_freq, module.sparse)


class Verifier:
    """What every verifier path shares: the ensemble, fairseq's positions and the arithmetic from
    decoder features to fairseq's log-probabilities. A path implements ``start``, ``score``,
    ``rollback``, ``keep_rows`` and ``logits``."""

    def __init__(self, models, tgt_dict, options):
        self.ensemble = EnsembleModel(models)
        for model in models:
            check_decoder(model.decoder)
        self.decoders = [model.decoder for model in models]
        self.options = options
        self.pad, self.unk, self.eos = tgt_dict.pad(), tgt_dict.unk(), tgt_dict.eos()
        self.max_positions = self.ensemble.max_decoder_positions()
        # whether ``log_probs`` runs compiled on a CPU (the fast path's choice; the reference path keeps
        # fairseq's torch operations)
        self.compiled_log_probs = False

    def max_decoder_positions(self):
        return self.max_positions

    def start(self, net_input, max_len):
        """Run the encoders and return an empty cache for outputs of up to ``max_len`` tokens."""
        raise NotImplementedError

    def score(self, cache, tokens: Tensor, first_index: Tensor, max_len: int,
              tree: Optional[DraftTree] = None, on_demand: bool = False) -> "VerifierScores":
        """Score the positions after each of ``tokens`` ``[rows, n]``, where ``tokens[r, 0]`` sits at
        output index ``first_index[r]`` (BOS = 0) and the cache holds each row's tokens before it;
        each new token follows the one before it, or with ``tree`` its parent. The new tokens enter
        the cache; fairseq's length rules for ``max_len`` apply. With ``on_demand`` a path may run a
        chain's layers only as far as its scores are read: the tokens after every row's first
        rejected one then never run nor enter the cache."""
        raise NotImplementedError

    def rollback(self, cache, valid: Tensor, kept: Tensor, new_columns: int, path: Optional[Tensor] = None):
        """After a pass of ``new_columns`` tokens over ``valid[r]`` cached ones, keep the first
        ``kept[r]`` of them for row ``r`` (with ``path``, those at its pass positions)."""
        raise NotImplementedError

    def keep_rows(self, cache, rows: Tensor):
        """Keep only ``rows`` (indices into the current batch) in every cache."""
        raise NotImplementedError

    def logits(self, model: int, x: Tensor) -> Tensor:
        """Model ``model``'s output layer on its decoder features ``x``."""
        raise NotImplementedError

    def encoder_states(self, cache):
        """The first model's encoder states ``[rows, src, d]`` and source padding ``[rows, src]``
        (``None`` without any), for drafters that read them."""
        raise NotImplementedError

    def refresh(self):
        """Follow the models' current weights (a path that copied them re-lays them)."""

    def steps_and_positions(self, tokens: Tensor, first_index: Tensor, tree: Optional[DraftTree] = None):
        """fairseq's step of each new token and its position (``pad + 1 + step``)."""
        depth = torch.arange(tokens.size(1), device=tokens.device) if tree is None else tree.depth
        steps = first_index.unsqueeze(1) + depth
        # filler after a row's own draft may pass the last position; its outputs are never used
        positions = (self.pad + 1 + steps).clamp_(max=self.pad + self.max_positions)
        return steps, positions

    def log_probs(self, features: List[Tensor], steps: Tensor, max_len: int) -> Tensor:
        """Log-probabilities ``[rows, m, vocab]`` from decoder features, with exactly the arithmetic
        of ``EnsembleModel.forward_decoder`` and ``SequenceGenerator`` for fairseq steps ``steps``."""
        if self.compiled_log_probs and features[0].device.type == "cpu":
            logits = self.logits(0, features[0])
            if logits.dtype == torch.float32 and logits.is_contiguous():
                out = _fairseq_log_probs(logits.numpy().reshape(-1, logits.size(-1)),
                                         steps.reshape(-1).contiguous().numpy(), self.log_prob_rule(max_len))
                return torch.from_numpy(out).view(logits.shape)
        log_probs = []
        for model, (decoder, x) in enumerate(zip(self.decoders, features)):
            logits = self.logits(model, x)
            if self.options.temperature != 1.0:
                logits = logits.div_(self.options.temperature)
            log_probs.append(decoder.get_normalized_probs((logits, None), log_probs=True, sample=None))
        if len(log_probs) == 1:
            lprobs = log_probs[0]
        else:
            lprobs = torch.logsumexp(torch.stack(log_probs, dim=0), dim=0) - math.log(len(log_probs))
        lprobs = lprobs.nan_to_num_(nan=-math.inf, posinf=math.inf, neginf=-math.inf)
        lprobs[..., self.pad] = -math.inf
        if self.options.unk_penalty:
            lprobs[..., self.unk] -= self.options.unk_penalty
        return self.options.apply_length_limits(lprobs, steps, max_len, self.eos)

    def log_prob_rule(self, max_len: int):
        """What ``fairseq_log_probs_into`` reads besides a row and its step, for outputs of up to ``max_len``
        tokens."""
        return max_len, self.options.min_len, self.pad, self.unk, np.float32(self.options.unk_penalty), self.eos


def plain_log_softmax(models, options) -> bool:
    """Whether the log-probabilities come from one model's log-softmax as fairseq's base decoder
    normalises, at temperature 1 (what ``_fairseq_log_probs`` computes)."""
    decoder = type(models[0].decoder)
    return len(models) == 1 and options.temperature == 1.0 and \
        decoder.get_normalized_probs is FairseqDecoder.get_normalized_probs and \
        decoder.get_normalized_probs_scriptable is FairseqDecoder.get_normalized_probs_scriptable


@numba.njit(cache=True, nogil=True, parallel=True)
def _fairseq_log_probs(logits, steps, rule):
    """``Verifier.log_probs`` of one model's logits ``[m, vocab]`` at fairseq steps ``steps`` ``[m]``, a
    row at a time (``fairseq_log_probs_into``, by ``rule``) in one compiled call, rows shared among
    numba's threads (the six torch operations took 0.06 ms for one row and 0.1 for six on the Zen 3 VM,
    this 0.02 and 0.05)."""
    out = np.empty_like(logits)
    for r in numba.prange(logits.shape[0]):
        fairseq_log_probs_into(logits[r], steps[r], rule, out[r])
    return out


@numba.njit(cache=True, nogil=True)
def fairseq_log_probs_into(logits, step, rule, out):
    """One row of ``_fairseq_log_probs``: the log-probabilities of logits ``[vocab]`` at fairseq step
    ``step`` into ``out``, by ``rule`` (``Verifier.log_prob_rule``: max_len, min_len, pad, unk,
    unk_penalty, eos): the log-softmax (its exponentials ``log_sum_exp``'s, within 4e-6 of torch's), a
    row without a finite normaliser (a NaN or an infinity in it) all -inf as ``nan_to_num`` leaves it,
    pad -inf, the unknown word penalised, EOS forced from step ``max_len`` on and forbidden before
    ``min_len``."""
    max_len, min_len, pad, unk, unk_penalty, eos = rule
    normaliser = log_sum_exp(logits)
    if np.isfinite(normaliser):
        for v in range(logits.shape[0]):
            out[v] = logits[v] - normaliser
    else:
        out[:] = -np.inf
    out[pad] = -np.inf
    out[unk] -= unk_penalty
    if step >= max_len:
        kept = out[eos]
        out[:] = -np.inf
        out[eos] = kept
    if step < min_len:
        out[eos] = -np.inf


class VerifierScores:
    """The verifier's log-probabilities after each token of a pass, projected onto the vocabulary
    only where asked: on a CPU the output projection costs about as much as the decoder layers,
    and the positions after a row's first rejected token are never needed. A path may run the
    layers of a chain's later positions on demand too (``later_layers``), for the rows asked about:
    a long draft rejected early then costs the layers of the positions ranked, not of the whole
    draft, and in a batch the rows that rejected theirs stop paying for the others."""

    def __init__(self, verifier: Verifier, features: Optional[List[Tensor]], steps: Tensor, max_len: int,
                 tree: Optional[DraftTree] = None,
                 later_layers: Optional[Callable[[int, int, Optional[Tensor]], List[Tensor]]] = None):
        """``features``: per model the decoder output ``[rows, n, d]`` of every position of the pass, or
        ``None`` and ``later_layers(start, stop, rows)``, which runs the layers of positions ``start
        .. stop - 1`` of ``rows`` (``None``: all), each row's call going on from a position it has run."""
        self.verifier, self.features, self.steps, self.max_len = verifier, features, steps, max_len
        self.tree = tree  # the pass's tree, None for a chain
        self.positions = steps.size(1)
        self.later_layers = later_layers
        self.ready = steps.new_zeros(steps.size(0))  # on demand: positions whose layers ran, per row
        self.all_ready = 0  # and for every row (a number, so that reading what ran costs no tensor operation)
        self.computed: Optional[Tensor] = None
        self.timer: Optional[Callable[[], float]] = None
        self.layer_seconds = self.projection_seconds = 0.0

    def time_with(self, timer: Callable[[], float]):
        """Time the layers and the projection run on demand from now on (``lazy_seconds``)."""
        self.timer = timer

    def lazy_seconds(self):
        """Seconds spent so far running layers and projecting on demand (0 until ``time_with``)."""
        return self.layer_seconds, self.projection_seconds

    def features_through(self, stop: int, rows: Optional[Tensor] = None) -> List[Tensor]:
        """Per model the decoder output of positions ``0 .. stop - 1`` of ``rows`` (all by default),
        running the layers not run yet."""
        if self.later_layers is not None and stop > self.all_ready:
            ready = self.ready if rows is None else self.ready[rows]
            start = int(ready.min())
            if start < stop:  # rows ahead of ``start`` run their positions again, to the same values
                began = self.timer() if self.timer else 0.0
                later = self.later_layers(start, stop, rows)
                if self.features is None and rows is None and stop == self.positions:  # the whole pass at once
                    self.features = later
                else:
                    if self.features is None:
                        self.features = [x.new_empty(self.ready.numel(), self.positions, x.size(-1)) for x in later]
                    for features, part in zip(self.features, later):
                        if rows is None:
                            features[:, start:stop] = part
                        else:
                            features[rows, start:stop] = part
                ready.clamp_(min=stop)
                if rows is not None:
                    self.ready[rows] = ready
                if self.timer:
                    self.layer_seconds += self.timer() - began
            if rows is None:
                self.all_ready = stop
        return [x[:, :stop] if rows is None else x[rows, :stop] for x in self.features]

    def span(self, start: int, stop: int, rows: Optional[Tensor] = None, needed: Optional[Tensor] = None) -> Tensor:
        """Log-probabilities ``[rows, stop - start, vocab]`` at positions ``start .. stop - 1`` of
        the pass, for ``rows`` (indices into the batch; all rows by default). With ``needed``
        (``[rows, stop - start]``), only those positions are projected and the others are ``-inf``:
        rows with short drafts do not pay for the batch's longest."""
        if self.computed is not None:
            computed = self.computed if rows is None else self.computed[rows]
            return computed[:, start:stop]
        features = [x[:, start:stop] for x in self.features_through(stop, rows)]
        began = self.timer() if self.timer else 0.0
        steps = self.steps[:, start:stop] if rows is None else self.steps[rows, start:stop]
        if needed is None or bool(needed.all()):
            lprobs = self.verifier.log_probs(features, steps, self.max_len)
        else:
            projected = self.verifier.log_probs([x[needed] for x in features], steps[needed], self.max_len)
            lprobs = projected.new_full((*needed.shape, projected.size(-1)), -math.inf)
            lprobs[needed] = projected
        if self.timer:
            self.projection_seconds += self.timer() - began
        return lprobs

    def logits(self, stop: int) -> Optional[np.ndarray]:
        """Where ``Verifier.log_probs`` runs compiled (one model, on a CPU, in float32) and nothing was
        projected yet: the logits ``[rows, stop, vocab]`` of positions ``0 .. stop - 1`` as numpy, for a
        ranking that normalises only the positions it reaches (``fairseq_log_probs_into``, by
        ``log_prob_rule``); else ``None``."""
        if not self.verifier.compiled_log_probs or self.computed is not None:
            return None
        features = self.features_through(stop)[0][:, :stop]
        if features.device.type != "cpu" or features.dtype != torch.float32:
            return None
        began = self.timer() if self.timer else 0.0
        logits = self.verifier.logits(0, features).contiguous().numpy()
        if self.timer:
            self.projection_seconds += self.timer() - began
        return logits

    def log_prob_rule(self):
        """``Verifier.log_prob_rule`` of this pass's length limit."""
        return self.verifier.log_prob_rule(self.max_len)

    def hidden_states(self, model: int = 0) -> Tensor:
        """``[rows, n, d]``: model ``model``'s decoder output at every position of the pass, before
        the output layer (what drafters that ride on the verifier read)."""
        return self.features_through(self.positions)[model]

    def all(self) -> Tensor:
        """Every position of every row, projected once and kept for later calls."""
        if self.computed is None:
            self.computed = self.span(0, self.positions)
        return self.computed
