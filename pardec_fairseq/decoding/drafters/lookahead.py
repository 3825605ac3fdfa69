"""Lookahead decoding (Fu et al. 2024), here for encoder-decoder models: Jacobi iteration on a window
of guessed future tokens produces n-grams, and each pass verifies the n-grams that start with the
last accepted token, with no training and no corpus.

The lookahead window holds ``levels = ngram - 1`` rows of ``window`` tokens: level 0 (the trunk)
guesses the output positions after the last accepted token, and level ``l`` column ``i`` sits ``l``
positions after trunk column ``i``. In the pass, the trunk is a chain and each column a chain
hanging off its trunk token, so the window is a tree of ``levels x window`` nodes (each sees the
accepted output, the trunk up to its column and the column below it) and the verifier's
prediction after each top node completes an n-gram: the column plus that token. The n-grams go
into a pool per sentence, which starts with the source's n-grams (mapped to target symbols by
name: names, numbers and code that translation copies). Then the window moves on as Jacobi
iteration does: level ``l + 1`` becomes level ``l``, the top predictions the new top level, and
when a pass accepted drafted tokens the columns move on by as many. Each pass also verifies up to
``guesses`` pool n-grams whose first token is the last accepted token (the most recent first;
n-grams sharing a prefix share its nodes), and the window's own chains are candidates too. Drafts
only change speed; the verifier keeps fairseq's output.
"""
import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view

from pardec_fairseq.decoding.drafters import Drafter, source_to_target
from pardec_fairseq.decoding.proposals import Proposal


class LookaheadDrafter(Drafter):
    reads_all_scores = True  # the window's top nodes and the acceptance's nodes are projected in one go
    drafts_trees = True

    def __init__(self, src_dict, tgt_dict, window: int, ngram: int, guesses: int, pool: int):
        if window < 1 or ngram < 2 or guesses < 0 or pool < 0:
            raise ValueError(f"lookahead needs --lookahead-window >= 1, --lookahead-ngram >= 2, "
                             f"--lookahead-guesses >= 0 and --lookahead-pool >= 0 (got {window}, {ngram}, "
                             f"{guesses} and {pool})")
        self.window_size, self.levels, self.guesses, self.pool_size = window, ngram - 1, guesses, pool
        self.pad, self.eos = tgt_dict.pad(), tgt_dict.eos()
        self.to_target = source_to_target(src_dict, tgt_dict).numpy()
        levels = np.arange(self.levels)[:, None]
        columns = np.arange(window)[None, :]
        # pass position of each window node's parent: the trunk node before it, or the node below it
        self.window_parents = np.where(levels == 0, columns, 1 + (levels - 1) * window + columns).ravel()

    def begin(self, net_input, max_len, encoded=None, verifier_cache=None):
        """The window and the pool start from the source, left-aligned: trunk column ``i`` guesses
        output token ``i`` as the source's token ``i`` (a copy), level ``l`` the one ``l`` after it."""
        source = self.to_target[net_input["src_tokens"].cpu().numpy()]
        source = np.take_along_axis(source, np.argsort(source == self.pad, axis=1, kind="stable"), 1)
        rows, width = source.shape
        ngram = self.levels + 1
        needed = max(width, self.window_size + self.levels - 1, ngram)
        source = np.pad(source, ((0, 0), (0, needed - width)), constant_values=self.pad)
        self.window = source[:, np.arange(self.levels)[:, None] + np.arange(self.window_size)]  # [rows, levels, window]
        seeds = sliding_window_view(source, ngram, axis=1)  # [rows, slots, ngram]
        self.seed_slots = seeds.shape[1]
        self.pool = np.concatenate([seeds, np.full((rows, self.pool_size, ngram), self.pad)], 1)
        # recency of each pool entry (-1: empty); the source's n-grams are the oldest
        self.age = np.concatenate([np.where((seeds != self.pad).all(-1), 0, -1),
                                   np.full((rows, self.pool_size), -1)], 1)
        self.passes = 0

    def propose(self, state) -> Proposal:
        device = state.tokens.device
        last = state.last_tokens().squeeze(1).cpu().numpy()
        rows = last.size
        nodes = self.levels * self.window_size
        window = self.window.reshape(rows, nodes)
        guesses, parents, kept = self._guess_nodes(last, first_position=1 + nodes)
        counts = kept.sum(1)
        tokens = np.full((rows, nodes + int(counts.max(initial=0))), self.pad, dtype=np.int64)
        all_parents = np.zeros_like(tokens)
        tokens[:, :nodes], all_parents[:, :nodes] = window, self.window_parents
        row, column = np.nonzero(kept)
        at = nodes + np.cumsum(kept, 1)[row, column] - 1
        tokens[row, at], all_parents[row, at] = guesses[row, column], parents[row, column]
        return Proposal(tokens=torch.from_numpy(tokens).to(device),
                        lengths=torch.from_numpy(nodes + counts).to(device),
                        parents=torch.from_numpy(all_parents).to(device))

    def _guess_nodes(self, last: np.ndarray, first_position: int):
        """The pool n-grams after each row's last token as trie nodes ``[rows, guesses * levels]``
        (guess-major): their tokens, their parents' pass positions when the kept nodes are laid out
        in order from ``first_position``, and which nodes are kept (a node is dropped when an earlier
        guess has the same prefix, its guess is missing, or it follows an EOS)."""
        rows, count = last.size, min(self.guesses, self.pool.shape[1])
        if count == 0:
            nothing = np.zeros((rows, 0), dtype=np.int64)
            return nothing, nothing, nothing.astype(bool)
        rank = np.where((self.pool[:, :, 0] == last[:, None]) & (self.age >= 0), self.age, -1)
        chosen = np.argsort(-rank, axis=1, kind="stable")[:, :count]
        valid = np.take_along_axis(rank, chosen, 1) >= 0
        guesses = self.pool[np.arange(rows)[:, None], chosen, 1:]  # [rows, count, levels]
        same_prefix = np.cumprod(guesses[:, :, None, :] == guesses[:, None, :, :], axis=-1).astype(bool)
        canonical = (same_prefix & valid[:, None, :, None]).argmax(2)  # the first guess with the same prefix
        is_eos = guesses == self.eos
        after_eos = np.cumsum(is_eos, -1) - is_eos > 0
        kept = valid[:, :, None] & (canonical == np.arange(count)[None, :, None]) & ~after_eos
        kept = kept.reshape(rows, -1)
        position = first_position + np.cumsum(kept, 1) - 1  # [rows, count * levels] once laid out
        depth = np.arange(self.levels)
        parent_node = (canonical[:, :, :-1] * self.levels + depth[:-1]).reshape(rows, -1)
        parents = np.zeros((rows, count, self.levels), dtype=np.int64)
        parents[:, :, 1:] = np.take_along_axis(position, parent_node, 1).reshape(rows, count, -1)
        return guesses.reshape(rows, -1), parents.reshape(rows, -1), kept

    def update(self, scores, verdict, state):
        first_top = 1 + (self.levels - 1) * self.window_size
        top = scores.all()[:, first_top: first_top + self.window_size].argmax(-1).cpu().numpy()
        self._remember(np.concatenate([self.window.transpose(0, 2, 1), top[:, :, None]], -1))
        window = np.concatenate([self.window[:, 1:], top[:, None]], 1)
        column = np.arange(self.window_size) + verdict.accepted.cpu().numpy()[:, None]
        moved = np.take_along_axis(window, np.minimum(column, self.window_size - 1)[:, None, :], 2)
        self.window = np.where((column < self.window_size)[:, None, :], moved, self.pad)
        self.passes += 1

    def _remember(self, ngrams: np.ndarray):
        """Add ``[rows, window, ngram]`` n-grams to the pool: one already there becomes the most
        recent, a new one takes the place of the oldest window n-gram (or an empty slot)."""
        rows, count, _ = ngrams.shape
        complete = (ngrams != self.pad).all(-1)
        in_pool = (ngrams[:, :, None, :] == self.pool[:, None, :, :]).all(-1) & (self.age >= 0)[:, None, :]
        stamp = self.passes * count + 1 + np.arange(count)
        fresh = np.where(in_pool & complete[:, :, None], stamp[None, :, None], -1).max(1)
        self.age = np.maximum(self.age, fresh)
        repeated = np.tril((ngrams[:, :, None, :] == ngrams[:, None, :, :]).all(-1), -1).any(-1)
        new = complete & ~in_pool.any(-1) & ~repeated
        if self.pool_size == 0:
            return
        oldest = self.seed_slots + np.argsort(self.age[:, self.seed_slots:], axis=1, kind="stable")
        rank = np.cumsum(new, 1) - 1
        row, index = np.nonzero(new & (rank < self.pool_size))
        slot = oldest[row, rank[row, index]]
        self.pool[row, slot] = ngrams[row, index]
        self.age[row, slot] = stamp[index]

    def keep_rows(self, rows):
        rows = rows.cpu().numpy()
        self.window, self.pool, self.age = self.window[rows], self.pool[rows], self.age[rows]
