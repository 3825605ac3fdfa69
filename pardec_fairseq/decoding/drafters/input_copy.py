"""Input-guided aggressive decoding's drafter (Ge et al.): copy the source.

At the start the draft is the whole source. Later it is the source after the place the output's
last tokens were copied from: the last ``n`` output tokens must occur exactly once in the source,
trying ``n = min_ngram`` first and longer suffixes while the match is ambiguous, as the reference
code does. No unique match, no draft: the pass then yields one token, and the next tries again.
In a long source a short suffix often occurs several times, or not at all after an edit, and the
reference rule then decodes one token per pass. ``reentry`` relaxes it: ``nearest`` resolves an
ambiguous suffix to the occurrence nearest the source position where the copy is expected to go
on (where the last draft stopped, plus one per token since); ``expected`` also drafts from that
position when the suffix does not occur (right after a substitution). Drafts only change speed.

A pass runs every row as wide as the batch's longest draft, so at batch sizes above 1 most of its
tokens can be padding; ``pass_tokens`` bounds rows x (draft + 1), cutting every row's draft to the
same length (0: no budget). The output does not change: a cut draft continues in the next pass.
"""
import torch

from pardec_fairseq.decoding.drafters import Drafter, source_to_target
from pardec_fairseq.decoding.proposals import Proposal


class InputCopyDrafter(Drafter):
    REENTRY = ("unique", "nearest", "expected")

    def __init__(self, src_dict, tgt_dict, min_ngram=1, max_ngram=3, pass_tokens=0, reentry="unique"):
        if reentry not in self.REENTRY:
            raise ValueError(f"--iad-reentry must be one of {', '.join(self.REENTRY)} (got {reentry!r})")
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"iad needs 1 <= --iad-min-ngram <= --iad-max-ngram (got {min_ngram}, {max_ngram})")
        if pass_tokens < 0:
            raise ValueError(f"--iad-pass-tokens must be 0 (no budget) or a positive number of tokens "
                             f"(got {pass_tokens})")
        self.min_ngram, self.max_ngram, self.pass_tokens, self.reentry = min_ngram, max_ngram, pass_tokens, reentry
        self.pad = tgt_dict.pad()
        self.to_target = source_to_target(src_dict, tgt_dict)

    def begin(self, net_input, max_len, encoded=None):
        src_tokens = net_input["src_tokens"]
        self.source = self.to_target.to(src_tokens.device)[src_tokens]
        # index of each row's first source token (sources may be left-padded)
        self.source_start = self.source.ne(self.pad).long().argmax(1)
        # source index each row's next output token is expected to be copied from
        self.expected = self.source_start.clone()
        self.draft_start = self.expected

    def propose(self, state) -> Proposal:
        lengths = state.lengths
        width = self.source.size(1)
        start = torch.where(lengths.eq(0), self.source_start, torch.full_like(lengths, width))
        found = lengths.eq(0)
        nearest = torch.full_like(lengths, -1)  # ambiguous rows: the occurrence nearest the expected position
        undecided = lengths.gt(0)
        for n in range(self.min_ngram, min(self.max_ngram, width) + 1):
            suffix_index = (lengths.unsqueeze(1) - n + 1 + torch.arange(n, device=lengths.device)).clamp(min=0)
            suffix = state.tokens.gather(1, suffix_index)
            hits = self.source.unfold(1, n, 1).eq(suffix.unsqueeze(1)).all(-1)  # [rows, windows]
            count = hits.sum(1)
            long_enough = lengths.ge(n)
            unique = undecided & long_enough & count.eq(1)
            start = torch.where(unique, hits.long().argmax(1) + n, start)
            found |= unique
            undecided = undecided & long_enough & count.gt(1)
            if self.reentry != "unique":
                after_window = torch.arange(n, hits.size(1) + n, device=lengths.device)
                distance = (after_window - self.expected.unsqueeze(1)).abs().masked_fill(~hits, 2 * width)
                nearest = torch.where(undecided, distance.argmin(1) + n, nearest)
        if self.reentry != "unique":
            guess = nearest if self.reentry == "nearest" else torch.where(nearest.ge(0), nearest, self.expected)
            start = torch.where(found | guess.lt(0), start, guess.clamp(max=width))
            found |= guess.ge(0)
        self.draft_start = torch.where(found, start, self.expected)
        draft_lengths = width - start
        if self.pass_tokens:
            draft_lengths = draft_lengths.clamp(max=max(0, self.pass_tokens // lengths.size(0) - 1))
        index = start.unsqueeze(1) + torch.arange(int(draft_lengths.max()), device=lengths.device)
        tokens = self.source.gather(1, index.clamp(max=width - 1)).masked_fill_(index >= width, self.pad)
        return Proposal(tokens=tokens, lengths=draft_lengths)

    def update(self, scores, verdict, state):
        self.expected = self.draft_start + verdict.accepted + 1

    def keep_rows(self, rows):
        self.source, self.source_start = self.source[rows], self.source_start[rows]
        self.expected, self.draft_start = self.expected[rows], self.draft_start[rows]
