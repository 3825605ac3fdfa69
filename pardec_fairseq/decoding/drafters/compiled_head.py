"""The draft head's drafting call and its cache writes on a CPU, in one compiled call.

Why: with the head's layer compiled, the rest of a drafting call still went through torch one
operation at a time: on this project's CPU (LibreOffice ``cpu40`` verifier, k = 4, 4,096 draft
words, batch 1) the layer took 0.16 ms of a 0.45 ms call, the slot inputs (embedding, fusion, slot
embedding) 0.11, the projection 0.13 and the argmax 0.05, and writing the accepted states' keys and
values 0.12 ms more. Here the slot inputs, the layers (``pass_layers``), the final norm, the
projection onto the draft words and each slot's argmax are one call (every step of an autoregressive
proposal in the same call), and the keys and values of the last pass's accepted states are projected
and written first in the same call (``AcceptedStates``; on their own, where the head drafts a tree a
level a call or through a refinement).
"""
from dataclasses import dataclass
from typing import Optional

import numba
import numpy as np
import torch
from torch import Tensor

from pardec_fairseq.decoding import vector_kernels
from pardec_fairseq.decoding.compiled_layers import (NO_TREE, CompiledLayers, embed_rows, log_sum_exp, norm_rows,
                                                     pass_layers, stacked_products, top_words, write_keys_values)
from pardec_fairseq.decoding.drafters.shortlist import ShortlistProjection
from pardec_fairseq.decoding.proposals import DraftTree, tree_shape


@numba.njit(cache=True, nogil=True)
def _remember_and_draft(accepted_states, path, accepted_first, accepted, outputs, last_states, embeddings, fuse,
                        slot_embedding, final_norm, output, column_words, first, steps, leaves, sees, cache_views,
                        layer_weights, memory, reader):
    """``_remember_accepted`` of the last pass's states ``accepted_states`` from columns ``accepted_first``
    (none: a batch's first proposal), then ``_draft``; with leaves also the tree's shape
    (``proposals.tree_shape``)."""
    if accepted_states.shape[0] > 0:
        _remember_accepted(accepted_states, path, accepted_first, accepted, last_states, memory, cache_views[0])
    tokens, counts, parents = _draft(outputs, last_states, embeddings, fuse, slot_embedding, final_norm, output,
                                     column_words, first, steps, leaves, sees, cache_views, layer_weights, memory,
                                     reader)
    if leaves:
        tree_parents, depth, tree_sees = tree_shape(parents)
    else:
        tree_parents, depth = np.empty((0, 0), dtype=np.int64), np.empty((0, 0), dtype=np.int64)
        tree_sees = np.empty((0, 0, 0), dtype=np.bool_)
    return tokens, counts, parents, tree_parents, depth, tree_sees


@numba.njit(cache=True, nogil=True, inline="always")
def _draft(outputs, last_states, embeddings, fuse, slot_embedding, final_norm, output, column_words, first, steps,
           leaves, sees, cache_views, layer_weights, memory, reader):
    """Each row's drafted tokens and their counts ``[rows]``: ``steps`` calls of the head, each drafting the
    top-1 token of its ``k`` slots, after each row's last token ``outputs[r, first[r]]`` (its accepted output
    so far): the chain ``[rows, steps * k]``. With ``leaves`` (a one-slot head) each call's runner-up word
    is a candidate too, and the ``steps + leaves`` likeliest of the chain's tokens and runner-ups are
    drafted (``_likeliest_of_comb``). Slot ``i``'s input is ``fuse(embedding of the row's last token, its
    last state) + slot_embedding[i]``, or with a ``reader`` (``VerifierInputLayers.operands``) the token
    through the verifier's first layers in place of its embedding (``_read_tokens``); after a call, its
    slots' features stand in for the verifier's states not computed yet (their keys and values are written
    where the verifier's will be, the last slot's token and features are the next call's last token and
    state). ``fuse``/``output``: packed products ``(panels, bias, columns)``, ``column_words`` the word of
    each of ``output``'s columns; ``final_norm``: ``(weight, bias, eps)``; ``memory`` as
    ``write_keys_values``'s products. Returns the tokens, counts and parents' pass positions (none for a
    chain). Inlined into ``_remember_and_draft``, as is ``_read_tokens`` here: compiled on their own as
    well, they made each signature of the drafting call compile in 36 s rather than 17 (Zen 3 VM; the
    test suite compiles eight)."""
    rows = outputs.shape[0]
    k, d = slot_embedding.shape
    width = embeddings.shape[1]
    drafted = np.empty((rows, steps * k), dtype=np.int64)
    # with leaves: each call's two likeliest words and their paths' log-probabilities (the chain's comb)
    comb_words = np.empty((rows, 2 * steps if leaves else 0), dtype=np.int64)
    comb_paths = np.empty((rows, 2 * steps if leaves else 0), dtype=np.float32)
    best_two = np.empty(2, dtype=np.int64)
    best_two_scores = np.empty(2, dtype=np.float32)
    inputs = np.empty((rows, width + d), dtype=np.float32)
    for r in range(rows):
        inputs[r, width:] = last_states[r]
    first = first.copy()
    for step in range(steps):
        if reader is None:
            for r in range(rows):
                inputs[r, :width] = embeddings[outputs[r, first[r]] if step == 0 else drafted[r, step * k - 1]]
        else:
            _read_tokens(inputs, outputs, drafted, first, step, k, reader)
        fused = vector_kernels.product(inputs, *fuse)
        x = np.empty((rows, k, d), dtype=np.float32)
        for r in range(rows):
            for i in range(k):
                x[r, i] = fused[r] + slot_embedding[i]
        x = pass_layers(x, first, np.arange(rows), sees, False, cache_views, layer_weights)
        features = norm_rows(x.reshape((rows * k, d)), *final_norm)
        logits = vector_kernels.product(features, *output)
        for j in range(rows * k):
            if leaves:  # one slot: the top two (the first of equals first, as argmax) and their paths
                _best_words(logits[j], best_two, best_two_scores)
                before = comb_paths[j, 2 * step - 2] if step > 0 else np.float32(0.0)
                for w in range(2):
                    comb_words[j, 2 * step + w] = column_words[best_two[w]]
                    comb_paths[j, 2 * step + w] = before + best_two_scores[w]
                drafted[j, step] = comb_words[j, 2 * step]
            else:
                drafted[j // k, step * k + j % k] = column_words[np.argmax(logits[j])]
        if step + 1 < steps:
            write_keys_values(features.reshape((rows, k, d)), first, memory, cache_views[0])
            for r in range(rows):
                inputs[r, width:] = features[r * k + k - 1]
                first[r] += k
    if leaves:
        tokens, parents = _likeliest_of_comb(comb_words, comb_paths, steps + leaves)
        return tokens, np.full(rows, steps + leaves, dtype=np.int64), parents
    return drafted, np.full(rows, steps * k, dtype=np.int64), np.empty((rows, 0), dtype=np.int64)


@numba.njit(cache=True, nogil=True, inline="always")
def _read_tokens(inputs, outputs, drafted, first, step, k, reader):
    """Into ``inputs[r, :d]``: the output of the verifier's first layers (``reader``:
    ``VerifierInputLayers.operands``, their ``layer_weights`` over the verifier's cache ``cache_views``) at
    each row's token that a call reads next, running them over the tokens not run yet: at ``step`` 0 the
    row's last token ``outputs[r, first[r]]``, later the ``k`` tokens the last call drafted, at columns
    ``first[r] - k + 1 .. first[r]``. Their keys and values go to columns the verifier's next pass writes
    over before reading them, as ``self_draft``'s do."""
    decoder_inputs, cache_views, layer_weights = reader
    rows = first.shape[0]
    m = 1 if step == 0 else k
    tokens = np.empty(rows * m, dtype=np.int64)
    columns = np.empty(rows * m, dtype=np.int64)
    for r in range(rows):
        for j in range(m):
            tokens[r * m + j] = outputs[r, first[r]] if step == 0 else drafted[r, (step - 1) * k + j]
            columns[r * m + j] = first[r] - m + 1 + j
    x = embed_rows(tokens, columns, *decoder_inputs)
    x = pass_layers(x.reshape((rows, m, x.shape[1])), first - m + 1, np.arange(rows), NO_TREE, True, cache_views,
                    layer_weights)
    for r in range(rows):
        inputs[r, :x.shape[2]] = x[r, m - 1]


@numba.njit(cache=True, nogil=True)
def _likeliest_of_comb(words, paths, nodes):
    """Each row's ``nodes`` likeliest paths among a one-slot chain's comb: its tokens and each step's
    runner-up, ``words`` ``[rows, 2 * steps]`` (step ``s``'s token at ``2 s``, its runner-up at ``2 s + 1``,
    both children of the token of step ``s - 1``) with their paths' log-probabilities ``paths`` (EAGLE-2's
    reranking, with no call of the head beyond the chain's). A path is no likelier than its parent's, which
    comes first among equals, so every kept node's parent is kept: the kept tokens of the chain (a prefix
    of it, at pass positions 1, 2, ...) then the kept runner-ups by step. Returns the words and parents'
    pass positions ``[rows, nodes]`` (step ``s``'s token and runner-up both hang from position ``s``)."""
    rows, candidates = words.shape
    tokens = np.empty((rows, nodes), dtype=np.int64)
    parents = np.empty((rows, nodes), dtype=np.int64)
    kept = np.empty(candidates, dtype=np.bool_)
    for r in range(rows):
        kept[:] = False
        kept[np.argsort(-paths[r], kind="mergesort")[:nodes]] = True
        p = 0
        for runner_up in range(2):
            for step in range(candidates // 2):
                if kept[2 * step + runner_up]:
                    tokens[r, p], parents[r, p] = words[r, 2 * step + runner_up], step
                    p += 1
    return tokens, parents


@numba.njit(cache=True, nogil=True)
def _best_words(logits, tokens, log_probs):
    """The ``len(tokens)`` likeliest words of ``logits`` ``[words]`` into ``tokens``, best first (the
    first of equal ones first, as ``argmax``), their log-probabilities into ``log_probs``."""
    top_words(logits, tokens, log_probs)
    normaliser = log_sum_exp(logits)
    for w in range(tokens.shape[0]):
        log_probs[w] -= normaliser


@numba.njit(cache=True, nogil=True)
def _draft_tree(tokens, last_states, embeddings, fuse, slot_embedding, final_norm, output, column_words, first, steps,
                branches, least_log_probability, cache_views, layer_weights, memory):
    """A one-slot head's draft tree, a level per call (EAGLE-2's dynamic tree). The first call runs on
    each row's last token (pass position 0, column ``first[r]``); each call's nodes propose their
    ``branches`` likeliest words, and of those the ``branches`` likeliest paths (the product of the
    head's probabilities from the root) at least ``exp(least_log_probability)`` likely become the next
    level's nodes, run by the next call, ``steps`` calls in all. A node's input is its word and its
    parent's output features; it sees the accepted output and its ancestors, whose keys and values
    are written at the columns of their pass positions (``first[r]`` + position). Returns the nodes'
    words, parents' pass positions and paths' log-probabilities ``[rows, steps * branches]`` (level by
    level, each level best first) and each row's node count."""
    rows = tokens.shape[0]
    d = slot_embedding.shape[1]
    width = embeddings.shape[1]
    capacity = steps * branches
    drafted = np.zeros((rows, capacity), dtype=np.int64)
    parents = np.zeros((rows, capacity), dtype=np.int64)
    counts = np.zeros(rows, dtype=np.int64)
    # by pass position: the path's log-probability, the positions it sees (itself, its ancestors), the
    # output features of the nodes run so far
    path_log_probs = np.zeros((rows, capacity + 1), dtype=np.float32)
    ancestors = np.zeros((rows, capacity + 1, capacity + 1), dtype=np.bool_)
    features = np.zeros((rows, capacity + 1, d), dtype=np.float32)
    level_first = np.zeros(rows, dtype=np.int64)  # the pass position of each row's first node of the level
    level_count = np.ones(rows, dtype=np.int64)
    for r in range(rows):
        ancestors[r, 0, 0] = True
    words = np.empty(branches, dtype=np.int64)
    word_log_probs = np.empty(branches, dtype=np.float32)
    # a level's candidate children: their words, parents' pass positions, path log-probabilities
    candidate_words = np.empty(branches * branches, dtype=np.int64)
    candidate_parents = np.empty(branches * branches, dtype=np.int64)
    candidate_log_probs = np.empty(branches * branches, dtype=np.float32)
    for step in range(steps):
        n = level_count.max()
        if n == 0:
            break
        seen = level_first.max() + n  # the columns from the root to the level's last, in the widest row
        inputs = np.zeros((rows * n, width + d), dtype=np.float32)
        sees = np.zeros((rows, n, seen), dtype=np.bool_)
        columns = first + level_first
        for r in range(rows):
            for i in range(n):
                node = level_first[r] + i
                if i < level_count[r]:
                    inputs[r * n + i, :width] = embeddings[tokens[r] if node == 0 else drafted[r, node - 1]]
                    inputs[r * n + i, width:] = last_states[r] if node == 0 else features[r, parents[r, node - 1]]
                for j in range(seen):
                    position = j + node - i + n - seen
                    # a filler node (the row has fewer this level) sees the output and itself
                    sees[r, i, j] = position < 0 or (ancestors[r, node, position] if i < level_count[r]
                                                     else position == node)
        fused = vector_kernels.product(inputs, *fuse)
        x = np.empty((rows, n, d), dtype=np.float32)
        for r in range(rows):
            for i in range(n):
                x[r, i] = fused[r * n + i] + slot_embedding[0]
        x = pass_layers(x, columns, np.arange(rows), sees, False, cache_views, layer_weights)
        out = norm_rows(x.reshape((rows * n, d)), *final_norm)
        logits = vector_kernels.product(out, *output)
        for r in range(rows):
            count = level_count[r] * branches
            for i in range(level_count[r]):
                node = level_first[r] + i
                features[r, node] = out[r * n + i]
                _best_words(logits[r * n + i], words, word_log_probs)
                for w in range(branches):
                    c = i * branches + w
                    candidate_words[c], candidate_parents[c] = column_words[words[w]], node
                    candidate_log_probs[c] = path_log_probs[r, node] + word_log_probs[w]
            # the next level: the likeliest paths at least as likely as the least allowed, best first
            level_first[r], level_count[r] = counts[r] + 1, 0
            for _ in range(branches):
                best = -1
                for c in range(count):
                    if candidate_log_probs[c] >= least_log_probability and \
                            (best < 0 or candidate_log_probs[c] > candidate_log_probs[best]):
                        best = c
                if best < 0:
                    break
                node, parent = counts[r] + 1, candidate_parents[best]
                drafted[r, node - 1], parents[r, node - 1] = candidate_words[best], parent
                path_log_probs[r, node] = candidate_log_probs[best]
                ancestors[r, node] = ancestors[r, parent]
                ancestors[r, node, node] = True
                candidate_log_probs[best] = np.nan  # taken: fails every comparison
                counts[r] += 1
                level_count[r] += 1
        if step + 1 < steps:
            write_keys_values(out.reshape((rows, n, d)), columns, memory, cache_views[0])
    return drafted, parents, path_log_probs[:, 1:], counts


@numba.njit(cache=True, nogil=True)
def _likeliest_nodes(tokens, parents, path_log_probs, counts, nodes):
    """``draft_head.likeliest_nodes`` of numpy arrays: each row's ``nodes`` likeliest of its ``counts[r]``
    nodes (the first of equals first, filler last), in their order, their parents renumbered."""
    rows, m = tokens.shape
    kept_tokens = np.empty((rows, nodes), dtype=tokens.dtype)
    kept_parents = np.empty((rows, nodes), dtype=parents.dtype)
    renumbered = np.empty(m + 1, dtype=np.int64)  # by old pass position; position 0 stays, others not kept: 0
    ranked = np.empty(m, dtype=np.float32)
    for r in range(rows):
        for j in range(m):
            ranked[j] = -path_log_probs[r, j] if j < counts[r] else np.inf
        order = np.sort(np.argsort(ranked, kind="mergesort")[:nodes])
        renumbered[:] = 0
        for j in range(nodes):
            renumbered[order[j] + 1] = j + 1
        for j in range(nodes):
            kept_tokens[r, j] = tokens[r, order[j]]
            kept_parents[r, j] = renumbered[parents[r, order[j]]]
    return kept_tokens, kept_parents, np.minimum(counts, nodes)


@numba.njit(cache=True, nogil=True)
def _remember_accepted(states, path, first, accepted, last_states, memory, buffers):
    """``write_keys_values`` of a pass's states ``[rows, n, d]`` (a tree's: those at each row's path's pass
    positions ``path`` ``[rows, m]``; an empty ``path``: every position, a chain's), and each row's state
    of its last accepted position (``accepted[r]``) into ``last_states`` ``[rows, d]``."""
    if path.shape[0] > 0:
        rows, m = path.shape
        kept = np.empty((rows, m, states.shape[2]), dtype=states.dtype)
        for r in range(rows):
            for j in range(m):
                kept[r, j] = states[r, path[r, j]]
        states = kept
    write_keys_values(states, first, memory, buffers)
    for r in range(states.shape[0]):
        last_states[r] = states[r, accepted[r]]


class CompiledHead:
    """A ``DraftHeadDrafter``'s weights as the compiled calls read them (its layers, fusion, final
    norm, draft projection and memory products re-laid by the drafter; a ``ShortlistProjection``'s
    columns and their words as each batch selects them)."""

    def __init__(self, layers: CompiledLayers, embeddings: Tensor, fuse, slot_embedding: Tensor, final_norm,
                 output, memory, input_layers=None):
        """``input_layers``: the ``VerifierInputLayers`` a head reads the last token through (``None``: its
        embedding)."""
        self.layer_weights = layers.weights
        self.input_layers = input_layers
        self.embeddings = embeddings.detach().numpy()
        self.fuse, self.output = fuse.operands, output
        self.plain_column_words = np.arange(output.operands[2])  # a projection without a shortlist: column c is word c
        self.slot_embedding = slot_embedding.detach().numpy()
        self.final_norm = (final_norm.weight.detach().numpy(), final_norm.bias.detach().numpy(),
                           np.float32(final_norm.eps))
        self.memory = stacked_products(memory)

    def draft(self, cache, outputs: Tensor, last_states: Tensor, lengths: Tensor, sees: Tensor,
              steps: int = 1, leaves: int = 0, accepted: Optional["AcceptedStates"] = None, verifier_cache=None):
        """The tokens ``[rows, m]``, their counts ``[rows]`` and their tree (``None``: a chain) of ``_draft``:
        ``steps`` calls' slots' top-1 tokens after each row's last token ``outputs[r, lengths[r]]``, the slots
        written at columns ``lengths[r]`` on of ``cache``; with ``leaves`` (a one-slot head) the ``steps +
        leaves`` likeliest of them and the calls' runner-up words. ``accepted``: the last pass's states to
        remember first (``remember``'s). ``verifier_cache``: the verifier's ``FastCache``, for ``input_layers``.
        In one compiled call: in the loop each torch operation around it cost microseconds, and the writes and
        the tree's shape took 30-40 us a pass more as calls of their own on the Intel Xeon VM."""
        first = lengths.numpy()
        drafted_reach = int(first.max()) + steps * self.slot_embedding.shape[0]
        cache.reserve(drafted_reach if accepted is None else max(drafted_reach, accepted.reach()))
        reader = None if self.input_layers is None else self.input_layers.operands(verifier_cache, drafted_reach)
        pending = _NOTHING_ACCEPTED if accepted is None else accepted.operands()
        drafted, counts, parents, tree_parents, depth, tree_sees = _remember_and_draft(
            *pending, outputs.numpy(), last_states.numpy(), self.embeddings, self.fuse, self.slot_embedding,
            self.final_norm, *self.projection(), first, steps, leaves, sees.numpy(), cache.numpy_views(),
            self.layer_weights, self.memory, reader)
        tree = DraftTree(*(torch.from_numpy(part) for part in (tree_parents, depth, tree_sees))) if leaves else None
        return torch.from_numpy(drafted), torch.from_numpy(counts), \
            torch.from_numpy(parents) if leaves else None, tree

    def draft_tree(self, cache, tokens: Tensor, last_states: Tensor, lengths: Tensor, steps: int, branches: int,
                   least_probability: float, nodes: int = 0):
        """A one-slot head's draft tree (``_draft_tree``) after each row's last token ``tokens`` ``[rows]``
        at column ``lengths[r]`` of ``cache``, cut to each row's ``nodes`` likeliest nodes (0: all;
        ``_likeliest_nodes``: in torch the cut cost 0.3 ms a pass): its words and parents' pass positions
        ``[rows, m]`` and node counts ``[rows]``."""
        cache.reserve(int(lengths.max()) + (steps + 1) * branches + 2)
        least = np.float32(np.log(least_probability)) if least_probability > 0 else np.float32(-np.inf)
        words, parents, path_log_probs, counts = _draft_tree(
            tokens.numpy(), last_states.numpy(), self.embeddings, self.fuse, self.slot_embedding, self.final_norm,
            *self.projection(), lengths.numpy(), steps, branches, least, cache.numpy_views(), self.layer_weights,
            self.memory)
        if 0 < nodes < words.shape[1]:
            words, parents, counts = _likeliest_nodes(words, parents, path_log_probs, counts, nodes)
        return torch.from_numpy(words), torch.from_numpy(parents), torch.from_numpy(counts)

    def projection(self):
        """The draft projection's operands and the word of each of its columns."""
        words = self.output.column_words if isinstance(self.output, ShortlistProjection) else self.plain_column_words
        return self.output.operands, words

    def remember(self, cache, accepted: "AcceptedStates", last_states: Tensor):
        """Write the keys and values of the last pass's accepted states (``AcceptedStates``) and each row's
        state at its last accepted position into ``last_states`` ``[rows, d]``."""
        cache.reserve(accepted.reach())
        _remember_accepted(*accepted.operands(), last_states.numpy(), self.memory, cache.numpy_views()[0])


@dataclass
class AcceptedStates:
    """A pass's verifier states that a head remembers, as numpy: ``states`` ``[rows, n, d]`` written at columns
    ``lengths[r]`` on (the rows' lengths before the pass), a tree's at its kept pass positions ``path`` ``[rows,
    m]`` (``_CHAIN`` for a chain), each row's last at position ``accepted[r]``."""

    states: np.ndarray
    path: np.ndarray
    lengths: np.ndarray
    accepted: np.ndarray

    @classmethod
    def of(cls, states: Tensor, path: Optional[Tensor], lengths: Tensor, accepted: Tensor) -> "AcceptedStates":
        """From the pass's tensors (``path``: ``None`` for a chain); ``lengths`` is copied, as the output advances."""
        return cls(states.contiguous().numpy(), _CHAIN if path is None else path.contiguous().numpy(),
                   lengths.numpy().copy(), np.ascontiguousarray(accepted.numpy()))

    def operands(self):
        """What ``_remember_accepted`` reads: the states, path, first columns and accepted counts."""
        return self.states, self.path, self.lengths, self.accepted

    def reach(self) -> int:
        """The columns the writes need."""
        return int(self.lengths.max()) + (self.states.shape[1] if self.path.shape[0] == 0 else self.path.shape[1])

    def keep_rows(self, rows: np.ndarray) -> "AcceptedStates":
        return AcceptedStates(self.states[rows], self.path if self.path.shape[0] == 0 else self.path[rows],
                              self.lengths[rows], self.accepted[rows])


_CHAIN = np.zeros((0, 0), dtype=np.int64)  # ``_remember_accepted``'s path of a chain: every position
# ``_remember_and_draft``'s operands when nothing is to be remembered (a batch's first proposal)
_NOTHING_ACCEPTED = (np.zeros((0, 0, 0), dtype=np.float32), _CHAIN, np.zeros(0, dtype=np.int64),
                     np.zeros(0, dtype=np.int64))
