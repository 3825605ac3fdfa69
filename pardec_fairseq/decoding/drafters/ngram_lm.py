"""An n-gram language model of target-side text, for rescoring drafts (Kim et al. 2024's global
n-gram rescoring).

The counts of every n-gram of orders 1..``order`` are sorted tables of packed keys (a token per
``bits`` bits of an int64), counted once with ``numpy.unique`` (LibreOffice's 727k train tokens,
orders 1..4: about a second) and looked up with ``searchsorted`` for a whole lattice at once. Scores are
stupid backoff (Brants et al. 2007): the relative frequency of the word after the longest context
seen with it, times ``backoff`` per order dropped. Not a normalised probability, which rescoring
does not need, and it needs only counts: no smoothing statistics, no ARPA file, no new dependency
(PyPI ``kenlm`` queries ARPA models but cannot build one, ``lmplz`` is not in the wheel).
"""
import math

import numpy as np

from pardec_fairseq.decoding.drafters.corpus import corpus_text


class NgramLM:
    def __init__(self, text: np.ndarray, order: int, vocab_size: int, backoff: float = 0.4):
        """``text``: the corpus as one token sequence (sentences separated by EOS, as the decoder's
        first input is EOS, so sentence starts are counted after it)."""
        self.bits = max(1, int(vocab_size - 1).bit_length())
        if order < 2:
            raise ValueError(f"--refine-ngram-order must be at least 2 (got {order}): a unigram model does not "
                             f"see the draft's neighbours")
        if order * self.bits > 63:
            raise ValueError(f"--refine-ngram-order {order} does not fit a vocabulary of {vocab_size} words "
                             f"({self.bits} bits per token, 63 per n-gram): use order {63 // self.bits} or less")
        if not 0.0 < backoff <= 1.0:
            raise ValueError(f"the backoff factor must be in (0, 1] (got {backoff})")
        self.order, self.log_backoff, self.total = order, math.log(backoff), int(text.size)
        text = text.astype(np.int64)
        self.keys, self.counts = [], []
        for n in range(1, order + 1):
            grams = np.lib.stride_tricks.sliding_window_view(text, n) if text.size >= n else np.zeros((0, n), np.int64)
            keys, counts = np.unique(self._pack(grams), return_counts=True)
            self.keys.append(keys)
            self.counts.append(counts)

    @classmethod
    def for_corpus(cls, prefix, dictionary, order) -> "NgramLM":
        """The model of the binarized split ``prefix`` (``--refine-corpus``), in ``dictionary``'s ids."""
        return cls(corpus_text(prefix, dictionary, "--refine-corpus"), order, len(dictionary))

    def _pack(self, grams: np.ndarray) -> np.ndarray:
        key = np.zeros(grams.shape[0], dtype=np.int64)
        for column in range(grams.shape[1]):
            key = (key << self.bits) | grams[:, column]
        return key

    def count(self, grams: np.ndarray) -> np.ndarray:
        """How often each row of ``grams`` (``[q, n]``, 1 <= n <= order) occurs in the corpus."""
        keys, counts = self.keys[grams.shape[1] - 1], self.counts[grams.shape[1] - 1]
        packed = self._pack(grams)
        if keys.size == 0:
            return np.zeros(packed.shape, dtype=np.int64)
        at = np.minimum(np.searchsorted(keys, packed), keys.size - 1)
        return np.where(keys[at] == packed, counts[at], 0)

    def log_scores(self, contexts: np.ndarray, context_lengths: np.ndarray, words: np.ndarray) -> np.ndarray:
        """Natural-log stupid-backoff score of each word after its context.

        ``contexts``: ``[q, order - 1]``, each right-aligned (the last column is the token just before
        the word); only the last ``context_lengths[i]`` tokens of row ``i`` are context (a sentence's
        first words have fewer). A word never seen scores as a word seen once, backed off to unigrams."""
        words = words.astype(np.int64)[:, None]
        contexts = contexts.astype(np.int64)
        longest = np.minimum(context_lengths, self.order - 1)
        scores = np.full(words.shape[0], (longest + 1) * self.log_backoff - math.log(self.total + 1))
        decided = np.zeros(words.shape[0], dtype=bool)
        for m in range(self.order - 1, -1, -1):  # context tokens used, the longest first
            usable = ~decided & (m <= longest)
            if not usable.any():
                continue
            context = contexts[usable, self.order - 1 - m:]
            seen = self.count(np.concatenate([context, words[usable]], 1))
            after = self.count(context) if m else np.full(seen.shape, self.total)
            found = seen > 0
            rows = np.flatnonzero(usable)[found]
            scores[rows] = np.log(seen[found] / after[found]) + (longest[rows] - m) * self.log_backoff
            decided[rows] = True
        return scores
