"""An n-gram language model of target-side text, for rescoring drafts (Kim et al. 2024's global
n-gram rescoring).

The counts of every n-gram of orders 1..``order`` are sorted tables of packed keys (a token per
``bits`` bits of an int64), counted once with ``numpy.unique`` (LibreOffice's 727k train tokens,
orders 1..3: 0.3 s) and looked up by binary search, compiled with numba, so scoring a lattice's few
hundred n-grams costs microseconds. Scores are stupid backoff (Brants et al. 2007): the relative
frequency of the word after the longest context seen with it, times ``backoff`` per order dropped.
Not a normalised probability, which rescoring does not need, and it needs only counts: no smoothing
statistics, no ARPA file, no new dependency (PyPI ``kenlm`` queries ARPA models but cannot build
one, ``lmplz`` is not in the wheel).
"""
import math

import numba
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
        keys, counts = [], []
        for n in range(1, order + 1):
            grams = np.lib.stride_tricks.sliding_window_view(text, n) if text.size >= n else np.zeros((0, n), np.int64)
            packed = np.zeros(grams.shape[0], dtype=np.int64)
            for column in range(n):
                packed = (packed << self.bits) | grams[:, column]
            n_keys, n_counts = np.unique(packed, return_counts=True)
            keys.append(n_keys)
            counts.append(n_counts.astype(np.int64))
        # the tables of orders 1..order one after another: order n at offsets[n - 1]:offsets[n]
        self.keys, self.counts = np.concatenate(keys), np.concatenate(counts)
        self.offsets = np.cumsum([0] + [k.size for k in keys]).astype(np.int64)

    @classmethod
    def for_corpus(cls, prefix, dictionary, order) -> "NgramLM":
        """The model of the binarized split ``prefix`` (``--refine-corpus``), in ``dictionary``'s ids."""
        return cls(corpus_text(prefix, dictionary, "--refine-corpus"), order, len(dictionary))

    @property
    def tables(self):
        """What the compiled scoring reads."""
        return self.keys, self.counts, self.offsets, self.total, self.bits, self.order, self.log_backoff

    def log_scores(self, contexts: np.ndarray, context_lengths: np.ndarray, words: np.ndarray) -> np.ndarray:
        """Natural-log stupid-backoff score of each word after its context.

        ``contexts``: ``[q, width]``, each right-aligned (the last column is the token just before the
        word); only the last ``context_lengths[i]`` tokens of row ``i`` are context (a sentence's first
        words have fewer), at most ``order - 1`` of them used. A word never seen scores as a word seen
        once, backed off to unigrams."""
        return _log_scores(np.ascontiguousarray(contexts, dtype=np.int64), np.asarray(context_lengths, np.int64),
                           np.asarray(words, np.int64), *self.tables)


@numba.njit(cache=True, nogil=True)
def _count(keys, counts, start, stop, key):
    at = start + np.searchsorted(keys[start:stop], key)
    return counts[at] if at < stop and keys[at] == key else 0


@numba.njit(cache=True, nogil=True)
def stupid_backoff(history, length, word, keys, counts, offsets, total, bits, order, log_backoff):
    """The score of ``word`` after the last ``length`` tokens of ``history`` (its last column is the
    token just before the word)."""
    longest = min(length, order - 1, history.size)
    for m in range(longest, -1, -1):  # context tokens used, the longest first
        context = 0
        for i in range(history.size - m, history.size):
            context = (context << bits) | history[i]
        seen = _count(keys, counts, offsets[m], offsets[m + 1], (context << bits) | word)
        if seen > 0:
            after = total if m == 0 else _count(keys, counts, offsets[m - 1], offsets[m], context)
            return math.log(seen / after) + (longest - m) * log_backoff
    return (longest + 1) * log_backoff - math.log(total + 1)


@numba.njit(cache=True, nogil=True)
def _log_scores(contexts, context_lengths, words, keys, counts, offsets, total, bits, order, log_backoff):
    scores = np.empty(words.size)
    for i in range(words.size):
        scores[i] = stupid_backoff(contexts[i], context_lengths[i], words[i], keys, counts, offsets, total, bits,
                                   order, log_backoff)
    return scores
