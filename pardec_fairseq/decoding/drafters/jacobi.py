"""Jacobi decoding's drafter (Santilli et al.): the previous iterate.

The output is split into blocks; a block's positions start as pad tokens and each pass replaces
them with the verifier's predictions given the previous iterate (a Jacobi step). The engine keeps
the prefix of the block that is already a fixed point plus the verifier's next token, so the
block is finished exactly when the iterate stops changing, and an accepted EOS ends the sentence
inside a block (Algorithm 3). ``block_size=None`` is parallel Jacobi over the whole remaining
output up to the length limit (no oracle length); a ``parallel_length`` makes the hybrid, which
continues one token at a time after that many output tokens.
"""
from typing import Optional

import torch

from pardec_fairseq.decoding.drafters import Drafter
from pardec_fairseq.decoding.proposals import Proposal


class JacobiDrafter(Drafter):
    reads_all_scores = True

    def __init__(self, pad, block_size: Optional[int] = None, parallel_length: Optional[int] = None):
        if block_size is not None and block_size < 1:
            raise ValueError(f"--jacobi-block-size must be at least 1 (got {block_size})")
        if parallel_length is not None and parallel_length < 0:
            raise ValueError(f"--jacobi-parallel-length must be at least 0 (got {parallel_length})")
        self.pad, self.block_size, self.parallel_length = pad, block_size, parallel_length

    def begin(self, net_input, max_len, encoded=None, verifier_cache=None):
        rows = net_input["src_tokens"].size(0)
        self.max_len = max_len
        self.block_end = torch.zeros(rows, dtype=torch.long, device=net_input["src_tokens"].device)
        self.iterate = net_input["src_tokens"].new_full((rows, 0), self.pad)

    def propose(self, state) -> Proposal:
        lengths = state.lengths  # the block covers output indices lengths + 1 .. block_end - 1
        finished = self.block_end - 1 - lengths <= 0
        new_end = lengths + 1 + (self.block_size or self.max_len + 1)
        if self.parallel_length is not None:
            new_end = new_end.clamp(max=self.parallel_length + 1)
        self.block_end = torch.where(finished, new_end, self.block_end)
        draft_lengths = (self.block_end - 1 - lengths).clamp(min=0)
        k = int(draft_lengths.max())
        tokens = self.iterate.new_full((lengths.size(0), k), self.pad)
        carried = min(k, self.iterate.size(1))
        tokens[:, :carried] = self.iterate[:, :carried].masked_fill(finished.unsqueeze(1), self.pad)
        return Proposal(tokens=tokens, lengths=draft_lengths)

    def update(self, scores, verdict, state):
        """The next iterate: the verifier's predictions after the newly accepted prefix."""
        predictions = scores.all().argmax(-1)
        n = predictions.size(1)
        index = verdict.accepted.unsqueeze(1) + 1 + torch.arange(n - 1, device=predictions.device)
        self.iterate = predictions.gather(1, index.clamp(max=n - 1)).masked_fill_(index >= n, self.pad)

    def keep_rows(self, rows):
        self.block_end, self.iterate = self.block_end[rows], self.iterate[rows]
