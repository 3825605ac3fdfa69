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
same length (0: no budget). With ``draft_length="adaptive"`` a row's draft after the first is at
most twice as long as what its last pass kept: where each drafted position costs (a CPU), a model
that keeps rejecting the copy then pays for short drafts, and one that keeps it doubles them; where
a pass costs about the same at any width (a GPU), the whole rest of the source costs nothing more
and saves passes. ``"auto"`` takes the first on a CPU and the second elsewhere. The output does not
change: a cut draft continues in the next pass.
"""
import numba
import numpy as np
import torch

from pardec_fairseq.decoding.drafters import Drafter, source_to_target
from pardec_fairseq.decoding.proposals import Proposal


class InputCopyDrafter(Drafter):
    REENTRY = ("unique", "nearest", "expected")
    DRAFT_LENGTHS = ("auto", "source", "adaptive")

    def __init__(self, src_dict, tgt_dict, min_ngram=1, max_ngram=3, pass_tokens=0, reentry="unique",
                 draft_length="auto"):
        if reentry not in self.REENTRY:
            raise ValueError(f"--iad-reentry must be one of {', '.join(self.REENTRY)} (got {reentry!r})")
        if draft_length not in self.DRAFT_LENGTHS:
            raise ValueError(f"--iad-draft-length must be one of {', '.join(self.DRAFT_LENGTHS)} "
                             f"(got {draft_length!r})")
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"iad needs 1 <= --iad-min-ngram <= --iad-max-ngram (got {min_ngram}, {max_ngram})")
        if pass_tokens < 0:
            raise ValueError(f"--iad-pass-tokens must be 0 (no budget) or a positive number of tokens "
                             f"(got {pass_tokens})")
        self.min_ngram, self.max_ngram, self.pass_tokens, self.reentry = min_ngram, max_ngram, pass_tokens, reentry
        self.draft_length = draft_length
        self.pad = tgt_dict.pad()
        self.to_target = source_to_target(src_dict, tgt_dict)

    def begin(self, net_input, max_len, encoded=None, verifier_cache=None):
        src_tokens = net_input["src_tokens"]
        self.adaptive = self.draft_length == "adaptive" or (self.draft_length == "auto" and
                                                            src_tokens.device.type == "cpu")
        self.source = self.to_target.to(src_tokens.device)[src_tokens]
        # index of each row's first source token (sources may be left-padded)
        self.source_start = self.source.ne(self.pad).long().argmax(1)
        # source index each row's next output token is expected to be copied from
        self.expected = self.source_start.clone()
        self.draft_start = self.expected
        self.source_cpu, self.source_start_cpu = self.source.cpu().numpy(), self.source_start.cpu().numpy()
        # each row's longest next draft: at first the whole source
        self.draft_limit = torch.full_like(self.source_start, self.source.size(1))

    def propose(self, state) -> Proposal:
        lengths = state.lengths
        width = self.source.size(1)
        # a handful of numbers per row: found by one compiled call on the CPU, wherever the rows live
        starts, found = _copy_starts(self.source_cpu, self.source_start_cpu, state.tokens.cpu().numpy(),
                                     lengths.cpu().numpy(), self.expected.cpu().numpy(), self.min_ngram,
                                     self.max_ngram, self.REENTRY.index(self.reentry))
        start, found = torch.from_numpy(starts).to(lengths.device), torch.from_numpy(found).to(lengths.device)
        self.draft_start = torch.where(found, start, self.expected)
        draft_lengths = torch.minimum(width - start, self.draft_limit)
        if self.pass_tokens:
            draft_lengths = draft_lengths.clamp(max=max(0, self.pass_tokens // lengths.size(0) - 1))
        index = start.unsqueeze(1) + torch.arange(int(draft_lengths.max()), device=lengths.device)
        tokens = self.source.gather(1, index.clamp(max=width - 1)).masked_fill_(index >= width, self.pad)
        return Proposal(tokens=tokens, lengths=draft_lengths)

    def update(self, scores, verdict, state):
        self.expected = self.draft_start + verdict.accepted + 1
        if self.adaptive:  # twice the tokens the pass kept: its accepted drafts and the verifier's own
            self.draft_limit = 2 * (verdict.accepted + 1)

    def keep_rows(self, rows):
        self.source, self.source_start = self.source[rows], self.source_start[rows]
        self.expected, self.draft_start = self.expected[rows], self.draft_start[rows]
        self.draft_limit = self.draft_limit[rows]
        self.source_cpu, self.source_start_cpu = self.source.cpu().numpy(), self.source_start.cpu().numpy()


@numba.njit(cache=True, nogil=True)
def _copy_starts(source, source_start, tokens, lengths, expected, min_ngram, max_ngram, reentry):
    """Per row, the source index its draft starts at (the source's width: no draft) and whether a rule
    placed it: ``InputCopyDrafter``'s, with ``reentry`` the index of ``--iad-reentry`` in ``REENTRY``."""
    rows, width = source.shape
    starts = np.full(rows, width, dtype=np.int64)
    found = np.zeros(rows, dtype=np.bool_)
    for r in range(rows):
        length = lengths[r]
        if length == 0:  # nothing generated yet: the whole source
            starts[r], found[r] = source_start[r], True
            continue
        nearest = -1  # where the longest ambiguous suffix's occurrence nearest the expected position ends
        for n in range(min_ngram, min(max_ngram, width, length) + 1):
            count, first, nearest_here, closest = 0, -1, -1, -1
            for window in range(width - n + 1):
                hit = True
                for i in range(n):
                    if source[r, window + i] != tokens[r, length - n + 1 + i]:
                        hit = False
                        break
                if hit:
                    count += 1
                    first = window if first < 0 else first
                    distance = abs(window + n - expected[r])
                    if closest < 0 or distance < closest:
                        closest, nearest_here = distance, window + n
            if count == 1:
                starts[r], found[r] = first + n, True
            if count > 1:
                nearest = nearest_here
                continue
            break  # unique, or absent: a longer suffix cannot match
        if reentry > 0 and not found[r]:
            guess = nearest if nearest >= 0 or reentry == 1 else expected[r]
            if guess >= 0:
                starts[r], found[r] = min(guess, width), True
    return starts, found
