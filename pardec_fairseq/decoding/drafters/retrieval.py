"""Retrieval drafting (He et al. 2023, "REST"; Oliaro et al. 2024, "SuffixDecoding"), here for
encoder-decoder models: draft what followed the output's latest tokens in a corpus of target-side
text, with no training.

The corpus (by default the train split's target side) is one token sequence, each sentence
preceded by EOS, with its suffix array (``pydivsufsort``; LibreOffice's 727k train tokens are read
and indexed in 1.0 s). The decoder's first input is EOS too, so a short output's suffix, BOS
included, only matches at sentence starts. Each pass looks up, for every row at once, the longest suffix of the accepted output (up to
``max_suffix`` tokens) that occurs in the corpus: the occurrences of a pattern are one range of the
suffix array, found with ``searchsorted`` over fixed-width byte keys of each suffix's first tokens.
Within the range the continuations are sorted, so equal continuations are neighbours: the draft
follows, token by token, the most frequent continuation among (an even sample of) the occurrences,
while its next token follows at least ``min_share`` of the occurrences that led there, up to
``depth`` tokens or an EOS; with ``branches`` above 1, one such continuation after each of the
most frequent next tokens, verified together as a tree. Drafts only change speed; the verifier keeps
fairseq's output.
"""

import numpy as np
import torch

from pardec_fairseq.decoding.drafters import Drafter, output_tail
from pardec_fairseq.decoding.drafters.corpus import corpus_text, load_cached, save_cached, split_stamp
from pardec_fairseq.decoding.proposals import Proposal

INDEX_FORMAT = 1  # bump when the cached arrays change meaning


class SuffixIndex:
    """A token sequence with its suffix array and, per suffix in that order, a byte key of its first
    ``key_tokens`` tokens (big-endian ``token + 1``, zeros past the end): keys sort as the suffixes
    do, so the occurrences of any pattern of up to ``key_tokens`` tokens are a ``searchsorted`` range."""

    def __init__(self, text: np.ndarray, suffixes: np.ndarray, key_tokens: int):
        self.text, self.suffixes, self.key_tokens = text, suffixes, key_tokens
        self.token_type = np.dtype(">u2") if int(text.max()) + 2 < 0xFFFF else np.dtype(">u4")
        windows = np.ascontiguousarray(self.windows(suffixes, key_tokens).astype(self.token_type))
        self.keys = windows.view(f"S{key_tokens * self.token_type.itemsize}").ravel()

    @classmethod
    def build(cls, text: np.ndarray, key_tokens: int) -> "SuffixIndex":
        from pydivsufsort import divsufsort

        return cls(text, divsufsort(text).astype(np.int64), key_tokens)

    @classmethod
    def for_corpus(cls, prefix, dictionary, key_tokens) -> "SuffixIndex":
        """The index of the binarized split ``prefix``, cached beside it in ``PREFIX.suffix-index.npz``
        (rebuilt when the split's ``.bin`` changes; loaded without pickle)."""
        cache = f"{prefix}.suffix-index.npz"
        stamp = np.array([INDEX_FORMAT, *split_stamp(prefix, "--retrieval-corpus")], dtype=np.int64)
        stored = load_cached(cache, stamp)
        if stored is not None:
            return cls(stored["text"], stored["suffixes"], key_tokens)
        index = cls.build(corpus_text(prefix, dictionary, "--retrieval-corpus"), key_tokens)
        save_cached(cache, stamp, "the retrieval index", text=index.text, suffixes=index.suffixes)
        return index

    def windows(self, starts: np.ndarray, width: int) -> np.ndarray:
        """``[len(starts), width]``: ``token + 1`` of the ``width`` tokens from each start, 0 past the end."""
        positions = starts[:, None] + np.arange(width)
        inside = positions < self.text.size
        return np.where(inside, self.text[np.minimum(positions, self.text.size - 1)].astype(np.int64) + 1, 0)

    def ranges(self, patterns: np.ndarray, lengths: np.ndarray):
        """Suffix-array ranges ``[lo, hi)`` of the occurrences of each of ``patterns`` (``[q, key_tokens]``,
        the first ``lengths[i]`` tokens of row ``i`` taken)."""
        width = self.key_tokens
        taken = np.arange(width) < lengths[:, None]
        values = np.where(taken, patterns.astype(np.int64) + 1, 0)
        low = values.astype(self.token_type)
        high = np.where(taken, values, np.iinfo(self.token_type).max).astype(self.token_type)
        key_type = self.keys.dtype
        lo = np.searchsorted(self.keys, np.ascontiguousarray(low).view(key_type).ravel(), side="left")
        hi = np.searchsorted(self.keys, np.ascontiguousarray(high).view(key_type).ravel(), side="right")
        return lo, hi


class RetrievalDrafter(Drafter):
    def __init__(self, index: SuffixIndex, eos: int, pad: int, max_suffix: int, depth: int, occurrences: int,
                 branches: int = 1, min_share: float = 0.0):
        if not 1 <= max_suffix <= index.key_tokens:
            raise ValueError(f"--retrieval-max-suffix must be between 1 and {index.key_tokens} (got {max_suffix})")
        if min(depth, occurrences, branches) < 1:
            raise ValueError(f"--retrieval-depth, --retrieval-occurrences and --retrieval-branches must be at "
                             f"least 1 (got {depth}, {occurrences} and {branches})")
        if not 0.0 <= min_share <= 1.0:
            raise ValueError(f"--retrieval-min-share must be between 0 and 1 (got {min_share})")
        self.index, self.eos, self.pad = index, eos, pad
        self.max_suffix, self.depth, self.occurrences, self.branches = max_suffix, depth, occurrences, branches
        self.drafts_trees = branches > 1
        self.min_share = min_share

    def propose(self, state) -> Proposal:
        device = state.tokens.device
        lengths = state.lengths.cpu().numpy()
        rows, s_max = lengths.size, self.max_suffix
        # the last s_max tokens of each row (BOS included), right-aligned: suffix s is the last s of them
        tail = output_tail(state, s_max)[0].cpu().numpy()
        found, lo, hi = self._longest_suffix(tail, lengths + 1)
        draft, drafted = self._follow_most_frequent(found, lo, hi)
        parents = None
        if self.branches == 1:
            draft, drafted = draft[:, 0, :int(drafted.max()) if rows else 0], drafted[:, 0]
        else:
            draft, parents, drafted = self._as_tree(draft, drafted)
            parents = torch.from_numpy(parents).to(device)
        return Proposal(tokens=torch.from_numpy(draft).to(device), lengths=torch.from_numpy(drafted).to(device),
                        parents=parents)

    def _longest_suffix(self, tail: np.ndarray, available: np.ndarray):
        """Per row, the length of the longest suffix of ``tail`` (at most ``available`` tokens) found
        in the corpus (0: none) and its suffix-array range."""
        rows, s_max = tail.shape
        suffix_lengths = np.arange(1, s_max + 1)
        # pattern [row, s]: the last s tokens of the row, left-aligned
        shift = (np.arange(s_max)[None, :] + s_max - suffix_lengths[:, None]).clip(max=s_max - 1)
        patterns = np.zeros((rows, s_max, self.index.key_tokens), dtype=tail.dtype)
        patterns[:, :, :s_max] = tail[:, shift]
        lo, hi = self.index.ranges(patterns.reshape(rows * s_max, -1), np.tile(suffix_lengths, rows))
        lo, hi = lo.reshape(rows, s_max), hi.reshape(rows, s_max)
        occurs = (hi > lo) & (suffix_lengths[None, :] <= available[:, None])
        found = np.where(occurs.any(1), s_max - np.argmax(occurs[:, ::-1], axis=1), 0)
        at = np.maximum(found - 1, 0)[:, None]
        return found, np.take_along_axis(lo, at, 1)[:, 0], np.take_along_axis(hi, at, 1)[:, 0]

    def _follow_most_frequent(self, found, lo, hi):
        """Drafts ``[rows, branches, depth]`` and their lengths ``[rows, branches]``: from each row's
        occurrences (an even sample of at most ``occurrences`` of them, in suffix-array order), the
        ``branches`` most frequent next tokens, then after each the most frequent next token among the
        occurrences that had the branch so far, while it is at least ``min_share`` of them, up to
        ``depth`` tokens or EOS."""
        rows, samples, branches = found.size, self.occurrences, self.branches
        count = np.where(found > 0, hi - lo, 0)
        j = np.arange(samples)
        sample = lo[:, None] + np.where(count[:, None] > samples, (j * count[:, None]) // samples, j)
        alive = j[None, :] < count[:, None]
        starts = self.index.suffixes[np.minimum(sample, self.index.suffixes.size - 1)] + found[:, None]
        # token ids, -1 past the corpus's end
        windows = self.index.windows(starts.ravel(), self.depth).reshape(rows, samples, self.depth) - 1
        alive &= windows[:, :, 0] >= 0
        run, sizes = _runs(windows[:, :, 0], alive)
        first = np.argsort(-sizes, axis=1, kind="stable")[:, :branches]  # run ids, most frequent first
        first = np.pad(first, ((0, 0), (0, branches - first.shape[1])))  # more branches than samples: run 0, empty
        first_sizes = np.take_along_axis(sizes, first, 1)
        drafting = ((first_sizes > 0) & (first_sizes >= self.min_share * alive.sum(1, keepdims=True))).ravel()
        alive = (alive[:, None, :] & (run[:, None, :] == first[:, :, None])).reshape(rows * branches, samples)
        windows = np.repeat(windows, branches, axis=0)  # one row per branch from here on
        every = np.arange(rows * branches)
        draft = np.full((rows * branches, self.depth), self.pad, dtype=np.int64)
        drafted = np.zeros(rows * branches, dtype=np.int64)
        for d in range(self.depth):
            column = windows[:, :, d]
            if d > 0:
                alive &= column >= 0
                run, sizes = _runs(column, alive)
                best = sizes.argmax(1)
                drafting &= (sizes[every, best] > 0) & (sizes[every, best] >= self.min_share * alive.sum(1))
                alive &= run == best[:, None]
            if not drafting.any():
                break
            token = column[every, alive.argmax(1)]
            draft[drafting, d] = token[drafting]
            drafted += drafting
            drafting &= token != self.eos
        return draft.reshape(rows, branches, self.depth), drafted.reshape(rows, branches)

    def _as_tree(self, draft: np.ndarray, drafted: np.ndarray):
        """Branches ``[rows, branches, depth]`` laid out one after another as a tree proposal: tokens,
        parents (a branch's first token hangs off the last accepted token) and node counts."""
        rows, _, depth = draft.shape
        offsets = np.cumsum(drafted, 1) - drafted  # [rows, branches] each branch's first node
        nodes = drafted.sum(1)
        k = int(nodes.max()) if rows else 0
        d = np.arange(depth)
        index = np.where(d < drafted[:, :, None], offsets[:, :, None] + d, k)  # column k: nowhere
        row = np.broadcast_to(np.arange(rows)[:, None, None], index.shape)
        tokens = np.full((rows, k + 1), self.pad, dtype=np.int64)
        parents = np.zeros((rows, k + 1), dtype=np.int64)
        tokens[row, index] = draft
        # node j sits at pass position j + 1: a node's parent is the node before it in its branch
        parents[row, index] = np.where(d == 0, 0, offsets[:, :, None] + d)
        return tokens[:, :k], parents[:, :k], nodes


def _runs(column: np.ndarray, alive: np.ndarray):
    """Runs of equal tokens among each row's alive occurrences (contiguous and sorted): each
    occurrence's run id (1, 2, ...; 0 when not alive) and each run's size ``[rows, samples + 1]``."""
    rows, samples = column.shape
    same = np.zeros_like(alive)
    same[:, 1:] = alive[:, :-1] & (column[:, 1:] == column[:, :-1])
    run = np.cumsum(alive & ~same, axis=1) * alive
    flat = (np.arange(rows)[:, None] * (samples + 1) + run).ravel()
    sizes = np.bincount(flat, weights=alive.ravel(), minlength=rows * (samples + 1)).reshape(rows, samples + 1)
    sizes[:, 0] = 0
    return run, sizes
