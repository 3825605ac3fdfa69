"""Decoding statistics for ``--pardec-stats`` and the benchmark: counted per sentence by an observer
of the shared loop (``SentenceCounter``), gathered per run (``DecodingStats``)."""
import json
import time
from dataclasses import asdict, dataclass, field
from typing import List, Optional

import numba
import torch

from pardec_fairseq.decoding.observers import LoopObserver


@dataclass
class SentenceStats:
    id: int
    src_len: int
    hyp_len: int  # output tokens, end-of-sentence included
    iterations: int  # verifier forward passes while this sentence was decoding
    seconds: float  # from the start of its batch (encoder included) to its last token
    drafted: int = 0  # drafted tokens the verifier checked
    accepted_drafts: int = 0  # of those, the ones in the output
    drafting_passes: int = 0  # of its iterations, the ones that checked a draft


PASSES, DRAFTED, KEPT, DRAFTING = range(4)  # the rows of ``SentenceCounter.live``, a row's counts


class SentenceCounter(LoopObserver):
    """Counts, for each sentence of the batch being decoded, its verifier passes, the drafted tokens
    they checked, those that are in its output (none after its EOS) and the passes with a draft, and
    the time from the batch's start to its last token: ``sentences[row]``, the fields of ``SentenceStats``
    from ``iterations`` on. The counts of the rows still decoding live on their device: a pass adds to
    every row's in one compiled call on a CPU, in vector operations elsewhere."""

    def __init__(self, eos: int):
        self.eos = eos
        self.sentences: List[Optional[tuple]] = []

    def batch_started(self, rows, device):
        self.start = time.perf_counter()
        self.live = torch.zeros(4, rows, dtype=torch.long, device=device)
        self.sentences = [None] * rows

    def after_pass(self, state, proposal, scores, verdict):
        ends = verdict.output_ends(self.eos)
        if self.live.device.type == "cpu":  # one compiled call: torch's operations took 0.1 ms a pass (Zen 3 VM)
            _count_pass(self.live.numpy(), proposal.lengths.numpy(), verdict.accepted.numpy(), ends.numpy())
        elif proposal.tokens.size(1) > 0:
            count_pass(self.live, proposal.lengths, verdict.accepted, ends)
        else:  # a pass without any draft leaves the draft counts as they are
            self.live[PASSES] += 1

    def rows_ended(self, state, ended):
        seconds = time.perf_counter() - self.start
        for row, (passes, drafted, kept, drafting) in zip(state.rows[ended.cpu()].tolist(),
                                                          self.live[:, ended].t().tolist()):
            self.sentences[row] = (passes, seconds, drafted, kept, drafting)

    def keep_rows(self, keep):
        self.live = self.live[:, keep]


def count_pass(live: torch.Tensor, drafted: torch.Tensor, accepted: torch.Tensor, ends: torch.Tensor):
    """Add a pass to each row's counts ``live`` ``[4, rows]`` from its drafted tokens, accepted ones and
    output ends ``[rows]`` (the drafted tokens kept are those up to the output's end)."""
    live[PASSES] += 1
    live[DRAFTED] += drafted
    live[KEPT] += torch.minimum(accepted, ends + 1)
    live[DRAFTING] += drafted > 0


@numba.njit(cache=True, nogil=True)
def _count_pass(live, drafted, accepted, ends):
    """``count_pass`` of numpy arrays, in one compiled call."""
    for r in range(live.shape[1]):
        live[PASSES, r] += 1
        live[DRAFTED, r] += drafted[r]
        live[KEPT, r] += min(accepted[r], ends[r] + 1)
        live[DRAFTING, r] += drafted[r] > 0


@dataclass
class DecodingStats:
    algo: str
    wall_seconds: float = 0.0
    per_sentence: List[SentenceStats] = field(default_factory=list)

    @property
    def sentences(self):
        return len(self.per_sentence)

    @property
    def tokens(self):
        return sum(s.hyp_len for s in self.per_sentence)

    @property
    def iterations(self):
        return sum(s.iterations for s in self.per_sentence)

    @property
    def mean_accepted(self):
        """Tokens per verifier pass: 1.0 for greedy, higher when drafts are accepted."""
        return self.tokens / self.iterations if self.iterations else 0.0

    @property
    def draft_acceptance(self):
        """Share of drafted tokens kept (0.0 when nothing was drafted)."""
        drafted = sum(s.drafted for s in self.per_sentence)
        return sum(s.accepted_drafts for s in self.per_sentence) / drafted if drafted else 0.0

    @property
    def drafting_share(self):
        """Share of verifier passes that checked a draft (e.g. retrieval: that found a match)."""
        return sum(s.drafting_passes for s in self.per_sentence) / self.iterations if self.iterations else 0.0

    def add_batch(self, sentences: List[SentenceStats], seconds: float):
        self.per_sentence.extend(sentences)
        self.wall_seconds += seconds

    def to_dict(self):
        return {
            "algo": self.algo,
            "sentences": self.sentences,
            "tokens": self.tokens,
            "iterations": self.iterations,
            "mean_accepted": self.mean_accepted,
            "draft_acceptance": self.draft_acceptance,
            "drafting_share": self.drafting_share,
            "wall_seconds": self.wall_seconds,
            "per_sentence": [asdict(s) for s in sorted(self.per_sentence, key=lambda s: s.id)],
        }

    def write(self, path):
        with open(path, "w", encoding="utf-8") as out:
            json.dump(self.to_dict(), out, indent=1)
