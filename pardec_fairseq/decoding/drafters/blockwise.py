"""Blockwise parallel decoding's drafter (Stern et al. 2018): the verifier's own extra heads.

Combined scoring and proposal (Stern et al. section 4): the pass that verifies a block also runs
the heads at every position, and the heads at the position that produced the verifier's own token
propose the next block, heads 2..k predicting the k - 1 tokens after it. So after the first pass,
which only runs the prefix, every iteration is one model call. With a refinement
(``drafters.refinement``) the draft is chosen from the heads' top-k lattice instead of each head's
top-1 (Kim et al. 2024).
"""
import torch
import torch.nn.functional as F

from pardec_fairseq.decoding.drafters import Drafter, draft_projection
from pardec_fairseq.decoding.drafters.refinement import Lattice
from pardec_fairseq.decoding.fast_ops import Product
from pardec_fairseq.decoding.proposals import Proposal


class BlockwiseHeadsDrafter(Drafter):
    def __init__(self, decoder, refinement=None, draft_vocab: int = 0, precision: str = "float32"):
        """``refinement``: a ``LatticeRescoring`` or ``LocalNeuralRescoring`` choosing the draft from
        the heads' top-k lattice (``None``: each head's top-1); ``draft_vocab``: heads 2..k draft among
        the dictionary's first ``draft_vocab`` words (0: all); ``precision``: that of the heads' products
        on a CPU (``--draft-precision``)."""
        heads = getattr(decoder, "blockwise_heads", None)
        if heads is None:
            raise ValueError("--gen-algo bpd drafts with the heads of a blockwise_transformer model: train one with "
                             "--arch blockwise_transformer --block-heads K (see the README), or choose another "
                             "--gen-algo for this checkpoint")
        if heads.heads < 2:
            raise ValueError("--gen-algo bpd needs a model with --block-heads 2 or more: head 1 is the verifier")
        self.heads, self.refinement = heads, refinement
        self.drafts_trees = refinement is not None and refinement.drafts > 1
        # the heads' feed-forward layer and the projection of heads 2..k in one product each, on
        # re-laid weights (``nn.Linear`` read the output matrix once per head)
        with torch.no_grad():
            self.fc1, self.fc2 = (Product.of(heads.fc1, precision=precision),
                                  Product.of(heads.fc2, precision=precision))
            self.output = draft_projection(decoder, draft_vocab, refinement, precision)

    def begin(self, net_input, max_len, encoded=None):
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
        at = verdict.accepted.view(-1, 1)
        if verdict.path is not None:
            at = verdict.path.gather(1, at)
        h = features.gather(1, at.unsqueeze(2).expand(-1, 1, features.size(2))).squeeze(1)
        block = self.heads.combine(h, self.fc2(F.relu(self.fc1(h))))  # [rows, k, d]
        logits = self.output(block[:, 1:])
        if self.refinement is None:
            self.draft = logits.argmax(-1)
        else:
            self.lattice = Lattice.of(logits, self.refinement.top_k)

    def keep_rows(self, rows):
        self.draft = self.draft[rows]
        if self.lattice is not None:
            self.lattice = Lattice(self.lattice.tokens[rows], self.lattice.scores[rows])
