"""Decoding statistics for ``--pardec-stats`` and the benchmark, counted by the shared loop."""
import json
from dataclasses import asdict, dataclass, field
from typing import List


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
