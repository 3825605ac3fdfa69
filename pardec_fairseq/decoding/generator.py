"""The object fairseq-generate, fairseq-interactive and ``--eval-bleu`` call: it turns a batch
into fairseq's hypothesis dicts, times it and records statistics, while a decoder does the work."""
import time
import weakref
from typing import List

import torch

from pardec_fairseq.decoding.engine import DecodedSentence, DraftVerifyDecoder
from pardec_fairseq.decoding.options import DecodingOptions
from pardec_fairseq.decoding.stats import DecodingStats, SentenceCounter, SentenceStats


class ParallelDecodingGenerator:
    """Wraps a decoder (``decode(sample) -> List[DecodedSentence]``) for fairseq."""

    def __init__(self, algorithm, decoder: DraftVerifyDecoder, tgt_dict, options: DecodingOptions, stats_path=None):
        self.algorithm = algorithm
        self.decoder = decoder
        self.options = options
        # once, as fairseq's SequenceGenerator does: walking every module per batch costs ~3 ms on a CPU
        self.verifier.ensemble.eval()
        # what fairseq-generate strips from printed hypotheses, as for its own generator
        self.symbols_to_strip_from_output = {tgt_dict.eos()}
        self.stats = DecodingStats(algorithm)
        self.counter = SentenceCounter(tgt_dict.eos())
        decoder.observers.append(self.counter)
        if stats_path:
            # fairseq-generate has no end-of-run hook; write when the generator goes away or at exit
            weakref.finalize(self, self.stats.write, stats_path)

    @property
    def verifier(self):
        return self.decoder.verifier

    def refresh_weights(self):
        """Follow the models' weights after they changed (``--eval-bleu`` during training)."""
        self.verifier.refresh()

    def restart_stats(self) -> DecodingStats:
        """Count from zero from now on (the benchmark keeps one repetition's counts)."""
        self.stats = DecodingStats(self.algorithm)
        return self.stats

    @torch.no_grad()
    def generate(self, models, sample, prefix_tokens=None, constraints=None, bos_token=None, **kwargs):
        if prefix_tokens is not None or constraints is not None:
            raise ValueError(
                f"--gen-algo {self.algorithm} does not support forced prefixes or constraints; "
                "use --gen-algo fairseq for them"
            )
        start = time.perf_counter()
        sentences = self.decoder.decode(sample, bos_token)
        seconds = time.perf_counter() - start
        self._record(sample, sentences, seconds)
        return [[self._hypothesis(s)] for s in sentences]

    def _hypothesis(self, sentence: DecodedSentence):
        cumulative = sentence.cumulative_scores
        positional = cumulative.clone()
        positional[1:] = cumulative[1:] - cumulative[:-1]
        return {
            "tokens": sentence.tokens,
            "score": self.options.final_score(cumulative[-1], len(sentence.tokens)),
            "attention": torch.empty(0),
            "alignment": torch.empty(0),
            "positional_scores": positional,
        }

    def _record(self, sample, sentences: List[DecodedSentence], seconds):
        net_input = sample["net_input"]
        src_lengths = net_input["src_lengths"].tolist()
        ids = sample["id"].tolist() if "id" in sample else range(len(sentences))
        self.stats.add_batch(
            [
                SentenceStats(int(i), int(n), len(s.tokens), *counts)
                for i, n, s, counts in zip(ids, src_lengths, sentences, self.counter.sentences)
            ],
            seconds,
        )
