"""Blockwise parallel decoding's drafter (Stern et al. 2018): the verifier's own extra heads.

Combined scoring and proposal (Stern et al. section 4): the pass that verifies a block also runs
the heads at every position, and the heads at the position that produced the verifier's own token
propose the next block, heads 2..k predicting the k - 1 tokens after it. So after the first pass,
which only runs the prefix, every iteration is one model call.
"""
import torch

from pardec_fairseq.decoding.drafters import Drafter
from pardec_fairseq.decoding.proposals import Proposal


class BlockwiseHeadsDrafter(Drafter):
    def __init__(self, decoder):
        heads = getattr(decoder, "blockwise_heads", None)
        if heads is None:
            raise ValueError("--gen-algo bpd drafts with the heads of a blockwise_transformer model: train one with "
                             "--arch blockwise_transformer --block-heads K (see the README), or choose another "
                             "--gen-algo for this checkpoint")
        if heads.heads < 2:
            raise ValueError("--gen-algo bpd needs a model with --block-heads 2 or more: head 1 is the verifier")
        self.decoder = decoder

    def begin(self, net_input, max_len, encoded=None):
        self.draft = net_input["src_tokens"].new_zeros(net_input["src_tokens"].size(0), 0)

    def propose(self, state) -> Proposal:
        return Proposal(tokens=self.draft, lengths=torch.full_like(state.lengths, self.draft.size(1)))

    def update(self, scores, verdict, state):
        """Heads 2..k where the verifier's own token came from (``verdict.accepted`` in the pass)."""
        features = scores.hidden_states(0)  # the first model of the verifier carries the heads
        at = verdict.accepted.view(-1, 1, 1).expand(-1, 1, features.size(2))
        h = features.gather(1, at).squeeze(1)
        logits = self.decoder.head_logits(h, list(range(1, self.decoder.blockwise_heads.heads)))
        self.draft = torch.stack([head.argmax(-1) for head in logits], dim=1)

    def keep_rows(self, rows):
        self.draft = self.draft[rows]
