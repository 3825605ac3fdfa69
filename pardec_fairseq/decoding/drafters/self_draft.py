"""The ``self-draft`` drafter: the verifier drafts for itself, its decoder's products in low precision.

Why: a trained drafter predicts the verifier's next token from what the verifier computed, and on the
LibreOffice recipe a half-hour draft head gets 73% of them right. The verifier's own decoder with its
weights rounded to int8 (a quarter of float32's bytes) gets 99.3% (99.6% with float32 activations;
bfloat16 weights 99.97%; 3,796 tokens of the test set's first 200 sentences: drafting 4 tokens a pass,
`self-draft` keeps 4.40 a pass where `gad` with the head keeps 2.68), and needs no training. Each
drafting step is a one-token pass of those layers over the verifier's own cache: the accepted output's keys and values are the verifier's
exact ones, and the drafted tokens' keys and values go to the columns the verifier's next pass writes
over (a pass writes every column from the last accepted token on), so the verifier's cache is not
changed for any column it reads before writing. Exact acceptance keeps the verifier's greedy output
whatever is drafted.
"""
from typing import Optional

import numba
import numpy as np
import torch

from pardec_fairseq.decoding import vector_kernels
from pardec_fairseq.decoding.compiled_layers import (NO_TREE, CompiledLayers, DecoderInputs, Layers, compiles,
                                                     embed_rows, norm_operands, norm_rows, pass_layers)
from pardec_fairseq.decoding.drafters import Drafter, draft_projection
from pardec_fairseq.decoding.fast_layers import DecoderLayer, FastCache
from pardec_fairseq.decoding.proposals import Proposal
from pardec_fairseq.models.draft_head import has_fairseq_output_layer


def self_draft_obstacle(decoder) -> Optional[str]:
    """What in a fairseq ``decoder`` the self drafter does not reproduce, or ``None``."""
    if getattr(decoder, "project_in_dim", None) is not None or getattr(decoder, "project_out_dim", None) is not None:
        return "embeddings of another width than its layers (project_in/project_out)"
    if not has_fairseq_output_layer(decoder, 0):
        return f"an output layer of its own ({type(decoder).__name__})"
    return None


def fast_cache_of(verifier_cache, who: str) -> FastCache:
    """The fast verifier's cache of a batch, over which ``who`` runs the verifier's layers."""
    caches = getattr(verifier_cache, "caches", None)
    if not caches or not isinstance(caches[0], FastCache):
        raise ValueError(f"{who} over the fast verifier's cache: decode with --verifier fast (the default) a model "
                         "the fast path reproduces")
    return caches[0]


class SelfDrafter(Drafter):
    def __init__(self, decoder, precision: str, steps: int, draft_vocab: int = 0):
        """Drafts ``steps`` tokens a pass with the fairseq ``decoder``'s layers, their products in
        ``precision`` (``Product``'s), projecting onto the dictionary's first ``draft_vocab`` words (0:
        all). The decoder is left as it is."""
        if steps < 1:
            raise ValueError(f"--self-draft-steps {steps}: draft one token a pass or more")
        obstacle = self_draft_obstacle(decoder)
        if obstacle is not None:
            raise ValueError(f"--gen-algo self-draft runs the verifier's decoder as fairseq's transformer decoder "
                             f"does; this one has {obstacle}: use another --gen-algo")
        self.steps = steps
        with torch.no_grad():
            layers = Layers([DecoderLayer.of(layer, precision) for layer in decoder.layers])
            self.output = draft_projection(decoder, draft_vocab, None, precision)
        if not compiles(layers) or not self.output.on_kernel:
            raise ValueError("--gen-algo self-draft drafts on the vector kernel: decode in float32 on a CPU "
                             "(the model's parameters are on another device or in another precision)")
        self.layers = CompiledLayers(layers)
        self.inputs = DecoderInputs(decoder)
        self.pad, self.eos = decoder.padding_idx, decoder.dictionary.eos()
        self.final_norm = norm_operands(decoder.layer_norm, decoder.embed_tokens.embedding_dim)
        self.cache = None

    def begin(self, net_input, max_len, encoded=None, verifier_cache=None):
        self.cache = fast_cache_of(verifier_cache, "--gen-algo self-draft drafts")
        vector_kernels.follow_torch_threads()

    def propose(self, state) -> Proposal:
        cache, lengths = self.cache, state.lengths
        cache.reserve(int(lengths.max()) + self.steps)
        tokens, counts = _draft_chain(state.tokens.numpy(), lengths.numpy(), self.steps, self.eos, self.pad,
                                      self.inputs.operands, *self.final_norm, cache.numpy_views(),
                                      self.layers.weights, self.output.operands)
        return Proposal(tokens=torch.from_numpy(tokens), lengths=torch.from_numpy(counts))


@numba.njit(cache=True, nogil=True)
def _draft_chain(tokens, lengths, steps, eos, pad, inputs, final_norm, normalize_output, cache_views, layer_weights,
                 output):
    """Each row's next tokens, up to ``steps`` one at a time and through its first EOS: the top word of the
    decoder's layers (``layer_weights``, as ``pass_layers`` reads them) over the cache ``cache_views`` after
    the row's last accepted token ``tokens[r, lengths[r]]`` (at column ``lengths[r]``, fairseq's position
    ``pad + 1 + lengths[r]``), then after each drafted one; ``inputs``: ``DecoderInputs``' operands;
    ``output``: the packed projection ``(panels, bias, columns)``, column ``c`` the dictionary's word ``c``.
    Returns the tokens ``[rows, longest]`` and each row's count."""
    rows = lengths.shape[0]
    d = inputs[0].shape[1]
    drafted = np.full((rows, steps), pad, dtype=np.int64)
    counts = np.full(rows, steps, dtype=np.int64)
    first = lengths.copy()
    live = np.arange(rows)  # the rows still drafting
    for step in range(steps):
        n = live.shape[0]
        current = np.empty(n, dtype=np.int64)
        for i in range(n):
            r = live[i]
            current[i] = tokens[r, lengths[r]] if step == 0 else drafted[r, step - 1]
        x = embed_rows(current, first[live], *inputs)
        x = pass_layers(x.reshape((n, 1, d)), first[live], live, NO_TREE, True, cache_views,
                        layer_weights).reshape((n, d))
        if normalize_output:
            x = norm_rows(x, *final_norm)
        logits = vector_kernels.product(x, *output)
        going = np.ones(n, dtype=np.bool_)
        for i in range(n):
            r = live[i]
            drafted[r, step] = np.argmax(logits[i])
            first[r] += 1
            if drafted[r, step] == eos:
                counts[r], going[i] = step + 1, False
        live = live[going]
        if live.shape[0] == 0:
            return drafted[:, :step + 1], counts
    return drafted, counts
