"""An n-gram language model of target-side text, for rescoring drafts (Kim et al. 2024's global
n-gram rescoring).

The counts of every n-gram of orders 1..``order`` are counted once with ``numpy.unique`` over packed
keys (a token per ``bits`` bits of an int64; LibreOffice's 727k train tokens, orders 1..3: 0.3 s) and
kept in one open-addressing hash table per order, each slot a key beside its count (1.4-2.9x the bytes
of sorted tables), looked up in compiled code. A lattice search makes a few hundred lookups a pass, cold:
the verifier's weights evict the tables between passes. In hash tables the search of a demo lattice
took 0.087 ms against 0.107 by binary search in sorted tables (cache flushed before each search).

Scores are stupid backoff (Brants et al. 2007): the relative frequency of the word after the longest
context seen with it, times ``backoff`` per order dropped. Not a normalised probability, which
rescoring does not need, and it needs only counts: no smoothing statistics, no ARPA file, no new
dependency (PyPI ``kenlm`` queries ARPA models but cannot build one, ``lmplz`` is not in the wheel).
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
        keys, counts = [], []  # of each order, the distinct n-grams' packed keys and their counts
        for n in range(1, order + 1):
            grams = np.lib.stride_tricks.sliding_window_view(text, n) if text.size >= n else np.zeros((0, n), np.int64)
            packed = np.zeros(grams.shape[0], dtype=np.int64)
            for column in range(n):
                packed = (packed << self.bits) | grams[:, column]
            n_keys, n_counts = np.unique(packed, return_counts=True)
            keys.append(n_keys)
            counts.append(n_counts.astype(np.int64))
        # the tables of orders 1..order one after another: order n at offsets[n - 1]:offsets[n], each a
        # power of two of slots at most 70% full, so a lookup probes a few neighbouring slots, mostly of
        # one cache line (a search of the demo's lattices ran as fast as in tables at most half full)
        capacities = [1 << max(1, (math.ceil(k.size / _MOST_FULL) - 1).bit_length()) for k in keys]
        self.offsets = np.cumsum([0] + capacities).astype(np.int64)
        self.slots = np.full((int(self.offsets[-1]), 2), _EMPTY, dtype=np.int64)  # [slot, (key, count)]
        for n, (n_keys, n_counts) in enumerate(zip(keys, counts)):
            _fill(self.slots[self.offsets[n]:self.offsets[n + 1]], n_keys, n_counts)

    @classmethod
    def for_corpus(cls, prefix, dictionary, order) -> "NgramLM":
        """The model of the binarized split ``prefix`` (``--refine-corpus``), in ``dictionary``'s ids."""
        return cls(corpus_text(prefix, dictionary, "--refine-corpus"), order, len(dictionary))

    @property
    def tables(self):
        """What the compiled scoring reads."""
        return self.slots, self.offsets, self.total, self.bits, self.order, self.log_backoff

    def log_scores(self, contexts: np.ndarray, context_lengths: np.ndarray, words: np.ndarray) -> np.ndarray:
        """Natural-log stupid-backoff score of each word after its context.

        ``contexts``: ``[q, width]``, each right-aligned (the last column is the token just before the
        word); only the last ``context_lengths[i]`` tokens of row ``i`` are context (a sentence's first
        words have fewer), at most ``order - 1`` of them used. A word never seen scores as a word seen
        once, backed off to unigrams."""
        return _log_scores(np.ascontiguousarray(contexts, dtype=np.int64), np.asarray(context_lengths, np.int64),
                           np.asarray(words, np.int64), *self.tables)


_EMPTY = -1  # no packed key is negative: order x bits <= 63
_MOST_FULL = 0.7  # the largest share of a hash table's slots in use
_FIBONACCI = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio: spreads a packed key over the high bits


@numba.njit(cache=True, nogil=True)
def _first_slot(key, capacity):
    """Where ``key``'s probe starts in a table of ``capacity`` (a power of two, at most 2^32) slots: bits
    from 32 up of its Fibonacci hash, which every bit of the key reaches."""
    return np.int64((np.uint64(key) * _FIBONACCI) >> np.uint64(32)) & (capacity - 1)


@numba.njit(cache=True, nogil=True)
def _fill(table, keys, counts):
    """Put distinct ``keys`` with their ``counts`` into the empty hash ``table`` (linear probing)."""
    capacity = table.shape[0]
    for i in range(keys.size):
        at = _first_slot(keys[i], capacity)
        while table[at, 0] != _EMPTY:
            at = (at + 1) & (capacity - 1)
        table[at, 0], table[at, 1] = keys[i], counts[i]


@numba.njit(cache=True, nogil=True)
def _count(slots, start, stop, key):
    """The count of ``key`` in the hash table ``slots[start:stop]`` (0: never seen)."""
    capacity = stop - start
    at = _first_slot(key, capacity)
    while True:
        found = slots[start + at, 0]
        if found == key:
            return slots[start + at, 1]
        if found == _EMPTY:
            return 0
        at = (at + 1) & (capacity - 1)


@numba.njit(cache=True, nogil=True)
def stupid_backoff(history, length, word, slots, offsets, total, bits, order, log_backoff):
    """The score of ``word`` after the last ``length`` tokens of ``history`` (its last column is the
    token just before the word)."""
    longest = min(length, order - 1, history.size)
    for m in range(longest, -1, -1):  # context tokens used, the longest first
        context = 0
        for i in range(history.size - m, history.size):
            context = (context << bits) | history[i]
        seen = _count(slots, offsets[m], offsets[m + 1], (context << bits) | word)
        if seen > 0:
            after = total if m == 0 else _count(slots, offsets[m - 1], offsets[m], context)
            return math.log(seen / after) + (longest - m) * log_backoff
    return (longest + 1) * log_backoff - math.log(total + 1)


@numba.njit(cache=True, nogil=True)
def _log_scores(contexts, context_lengths, words, slots, offsets, total, bits, order, log_backoff):
    scores = np.empty(words.size)
    for i in range(words.size):
        scores[i] = stupid_backoff(contexts[i], context_lengths[i], words[i], slots, offsets, total, bits, order,
                                   log_backoff)
    return scores
