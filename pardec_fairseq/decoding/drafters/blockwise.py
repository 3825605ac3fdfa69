"""Blockwise parallel decoding's drafter (Stern et al. 2018): the verifier's own extra heads.

Combined scoring and proposal (Stern et al. section 4): the pass that verifies a block also runs
the heads at every position, and the heads at the position that produced the verifier's own token
propose the next block, heads 2..k predicting the k - 1 tokens after it. So after the first pass,
which only runs the prefix, every iteration is one model call. With a refinement
(``drafters.refinement``) the draft is chosen from the heads' top-k lattice instead of each head's
top-1 (Kim et al. 2024). On a CPU the heads' drafting is one compiled call (``_heads_lattice``): as torch
operations around the products it took 0.51 ms a pass in the loop, as one call 0.32 (k = 4, 4,096 draft
words, int8; the Zen 3 VM). Decoding may use the first heads alone (``--bpd-heads``): the later heads'
features and projections are then never computed.
"""
from typing import Optional

import numba
import numpy as np
import torch
import torch.nn.functional as F

from pardec_fairseq.decoding import vector_kernels
from pardec_fairseq.decoding.compiled_layers import top_words
from pardec_fairseq.decoding.drafters import Drafter, draft_projection
from pardec_fairseq.decoding.drafters.refinement import Lattice
from pardec_fairseq.decoding.fast_ops import Product
from pardec_fairseq.decoding.proposals import Proposal


@numba.njit(cache=True, nogil=True)
def _heads_logits(features, at, fc1, fc2, output, identity_first):
    """The drafting heads' logits over the draft words ``[rows, heads, words]`` (heads 2..K, as many as
    ``fc2`` computes) from each row's state at pass position ``at[r]`` of ``features`` ``[rows, n, d]``,
    as ``BlockwiseHeads.forward`` and the draft projection compute them; ``fc1``/``fc2``/``output``:
    packed products ``(panels, bias, columns)``."""
    rows, d = features.shape[0], features.shape[2]
    h = np.empty((rows, d), dtype=np.float32)
    for r in range(rows):
        h[r] = features[r, at[r]]
    hidden = vector_kernels.product(h, *fc1)
    for r in range(rows):
        for c in range(hidden.shape[1]):
            hidden[r, c] = max(hidden[r, c], np.float32(0.0))
    learned = vector_kernels.product(hidden, *fc2)  # [rows, learned heads * d], each head's residual still to add
    skip = 0 if identity_first else 1  # the learned heads start at head 1 unless head 1 is the identity
    drafting = learned.shape[1] // d - skip
    block = np.empty((rows * drafting, d), dtype=np.float32)
    for r in range(rows):
        for i in range(drafting):
            for c in range(d):
                block[r * drafting + i, c] = learned[r, (i + skip) * d + c] + h[r, c]
    logits = vector_kernels.product(block, *output)
    return logits.reshape((rows, drafting, logits.shape[1]))


@numba.njit(cache=True, nogil=True)
def _heads_lattice(features, accepted, path, fc1, fc2, output, identity_first, k):
    """The ``k`` highest logits of ``_heads_logits`` at each drafted position and their words ``[rows,
    positions, k]`` (``Lattice.of``), from the states where each row's verifier token came from: pass
    position ``accepted[r]`` of a chain, ``path[r, accepted[r]]`` of a tree (``path`` with no columns:
    a chain). One call from the verdict to the lattice, as Python around it costs: on the Zen 3 VM (head
    2 alone, int8) the drafter's update took 0.26 ms a pass with the gather and conversions in torch
    operations, 0.24 without, of which this call 0.18."""
    rows = accepted.shape[0]
    at = accepted.copy()
    if path.shape[1] > 0:
        for r in range(rows):
            at[r] = path[r, accepted[r]]
    logits = _heads_logits(features, at, fc1, fc2, output, identity_first)
    positions = logits.shape[1]
    tokens = np.empty((rows, positions, k), dtype=np.int64)
    scores = np.empty((rows, positions, k), dtype=np.float32)
    for r in range(rows):
        for j in range(positions):
            top_words(logits[r, j], tokens[r, j], scores[r, j])
    return tokens, scores


_CHAIN = np.zeros((0, 0), dtype=np.int64)  # a verdict's path of a chain pass, as ``_heads_lattice`` takes it


class BlockwiseHeadsDrafter(Drafter):
    def __init__(self, decoder, refinement=None, draft_vocab: int = 0, precision: str = "float32",
                 heads_used: Optional[int] = None):
        """``refinement``: a ``LatticeRescoring`` or ``LocalNeuralRescoring`` choosing the draft from
        the heads' top-k lattice (``None``: each head's top-1); ``draft_vocab``: heads 2..k draft among
        the dictionary's first ``draft_vocab`` words (0: all); ``precision``: that of the heads' products
        on a CPU (``--draft-precision``); ``heads_used``: draft with heads 2..``heads_used`` alone
        (``None``: all ``k``)."""
        heads = getattr(decoder, "blockwise_heads", None)
        if heads is None:
            raise ValueError("--gen-algo bpd drafts with the heads of a blockwise_transformer model: train one with "
                             "--arch blockwise_transformer --block-heads K (see the README), or choose another "
                             "--gen-algo for this checkpoint")
        if heads.heads < 2:
            raise ValueError("--gen-algo bpd needs a model with --block-heads 2 or more: head 1 is the verifier")
        used = heads.heads if heads_used is None else heads_used
        if not 2 <= used <= heads.heads:
            raise ValueError(f"--bpd-heads {used}: this model has {heads.heads} heads, and head 1 is the verifier's; "
                             f"pass 2 to {heads.heads}")
        self.heads, self.refinement = heads, refinement
        self.drafts_trees = refinement is not None and refinement.drafts > 1
        # the heads' feed-forward layer and the projection of heads 2..used in one product each, on
        # re-laid weights (``nn.Linear`` read the output matrix once per head); every head reads all of
        # fc1's features, and fc2's first rows give the learned heads up to ``used``
        learned = (used - 1 if heads.identity_first else used) * heads.embed_dim
        with torch.no_grad():
            self.fc1 = Product.of(heads.fc1, precision=precision)
            self.fc2 = Product(heads.fc2.weight[:learned].t(), heads.fc2.bias[:learned], precision)
            self.output = draft_projection(decoder, draft_vocab, refinement, precision)
        self.compiled = all(product.on_kernel for product in (self.fc1, self.fc2, self.output))
        if self.compiled:  # what each pass hands the compiled call
            self.operands = (self.fc1.operands, self.fc2.operands, self.output.operands, heads.identity_first,
                             1 if refinement is None else min(refinement.top_k, self.output.columns))

    def begin(self, net_input, max_len, encoded=None, verifier_cache=None):
        src_tokens = net_input["src_tokens"]
        self.draft = src_tokens.new_zeros(src_tokens.size(0), 0)
        self.lattice = None

    def propose(self, state) -> Proposal:
        if self.lattice is not None:
            return self.refinement.propose(self.lattice, state)
        return Proposal(tokens=self.draft, lengths=torch.full_like(state.lengths, self.draft.size(1)))

    def update(self, scores, verdict, state):
        """Heads 2..k where the verifier's own token came from (pass position ``verdict.accepted``
        of a chain, the end of the accepted path of a tree)."""
        features = scores.hidden_states(0)  # the first model of the verifier carries the heads
        if self.compiled:
            path = _CHAIN if verdict.path is None else verdict.path.contiguous().numpy()
            tokens, top_scores = _heads_lattice(features.contiguous().numpy(), verdict.accepted.contiguous().numpy(),
                                                path, *self.operands)
            if self.refinement is None:
                self.draft = torch.from_numpy(tokens).squeeze(2)
            else:
                self.lattice = Lattice(torch.from_numpy(tokens), torch.from_numpy(top_scores))
            return
        at = verdict.accepted.view(-1, 1)
        if verdict.path is not None:
            at = verdict.path.gather(1, at)
        h = features.gather(1, at.unsqueeze(2).expand(-1, 1, features.size(2))).squeeze(1)
        block = self.heads.combine(h, self.fc2(F.relu(self.fc1(h))))  # [rows, heads used, d]
        logits = self.output(block[:, 1:])
        if self.refinement is None:
            self.draft = logits.argmax(-1)
        else:
            self.lattice = Lattice.of(logits, self.refinement.top_k)

    def keep_rows(self, rows):
        self.draft = self.draft[rows]
        if self.lattice is not None:
            self.lattice = Lattice(self.lattice.tokens[rows], self.lattice.scores[rows])
