"""Acceptance rules: which prefix of a draft to keep after the verifier scored it.

Every rule returns, per row, the number of drafted tokens kept, then the verifier's own token at
the first rejected position (or after the last drafted one), so each pass yields at least one
token. ``ExactAcceptance`` is lossless; the relaxed rules trade fidelity for longer blocks.
"""
import math

import numba
import numpy as np
import torch
from torch import Tensor

from pardec_fairseq.decoding.compiled_layers import largest_sum
from pardec_fairseq.decoding.proposals import Proposal, Verdict
from pardec_fairseq.decoding.verifier import fairseq_log_probs_into

# what a verifier call costs beyond the positions it ranks, in positions of one row: on the Zen 4 VM (2
# threads, first 200 LibreOffice sentences, medians in the loop) a pass's layers and projection took 561 us
# over one row and 1,250 over 9, so about 475 for the call and 86 a position
CALL_POSITIONS = 6
# how fast ``ExactAcceptance`` forgets what splitting earlier passes saved
MERGE_LEARNING_RATE = 1 / 8


def drafted_mask(proposal: Proposal):
    return torch.arange(proposal.tokens.size(1), device=proposal.tokens.device) < proposal.lengths.unsqueeze(1)


def fairseq_top_one(scores, matters=None):
    """The best score and token over the last dimension, as fairseq's beam search with beam 1 picks
    them: the first of ``topk(k=2)``. ``max`` finds the same one whenever the best score is unique
    and costs a fraction of ``topk`` over a vocabulary (5 us against 70 on a CPU); the tied positions
    go to ``topk``, those of them where ``matters`` holds when it is given (a position after a drafted
    token scored -inf is all -inf, a tie, but never reached)."""
    values, indices = scores.max(-1)
    tied = scores.eq(values.unsqueeze(-1)).sum(-1).gt(1)
    if matters is not None:
        tied &= matters
    if bool(tied.any()):
        top_values, top_indices = torch.topk(scores[tied], k=min(2, scores.size(-1) - 1))
        values[tied], indices[tied] = top_values[:, 0], top_indices[:, 0]
    return values, indices


def reachable(before, start):
    """Positions a kept path can reach, from fairseq's running score ``before`` each one and at the
    pass's start: after a drafted token scored -inf nothing is kept (unless fairseq's own score is
    -inf already), so the all -inf rows there, ties for ``fairseq_top_one``, need no ``topk``."""
    return before.isfinite() | start.isinf().unsqueeze(1)


@numba.njit(cache=True, nogil=True)
def _best(row, before):
    """The highest ``before + row[v]`` (a float32 sum, as torch adds), the first ``v`` reaching it and how
    many do. ``row`` holds log-probabilities, ``before`` a running score: both in [-inf, 0], never NaN."""
    best = largest_sum(row, before)
    count = 0
    for v in range(row.shape[0]):
        count += (row[v] + before) == best
    first = 0
    while row[first] + before != best:
        first += 1
    return best, first, count


@numba.njit(cache=True, nogil=True)
def _rank_chain(lprobs, draft, drafted, running, top_scores, top_tokens):
    """``ExactAcceptance._rank`` on a CPU, position by position: each row's choice after its running score
    ``running[r]``, along its draft ``draft[r, :drafted[r]]`` while the choice is the drafted token, and
    no further (the positions after are never kept). Writes the choices into ``top_scores``/``top_tokens``
    ``[rows, m]`` and returns the drafted tokens kept per row, or -1 for a row that met a tie on its way
    (fairseq's ``topk`` decides those)."""
    kept = np.zeros(lprobs.shape[0], dtype=np.int64)
    for r in range(lprobs.shape[0]):
        before = running[r]
        for j in range(min(lprobs.shape[1], drafted[r] + 1)):
            best, token, count = _best(lprobs[r, j], before)
            top_scores[r, j], top_tokens[r, j] = best, token
            if count > 1:
                kept[r] = -1
                break
            if j == drafted[r] or token != draft[r, j]:
                break
            kept[r] += 1
            before = best
    return kept


@numba.njit(cache=True, nogil=True)
def _rank_tree(lprobs, tokens, parents, depth, real, within_limit, running, top_scores, top_tokens, normalise, steps,
               rule):
    """``ExactAcceptance._rank_every_node`` on a CPU, node by node: each row's choice at the pass's first
    position after its running score ``running[r]`` and at every drafted node whose path holds the
    choice at each step (a node's parent comes before it), and nowhere else. Writes the choices into
    ``top_scores``/``top_tokens`` ``[rows, n]`` and returns each row's deepest kept position (the first
    of the deepest), or -1 for a row that met a tie on its way (fairseq's ``topk`` decides those). With
    ``normalise``, ``lprobs`` holds logits, and a position's log-probabilities are made where it is
    reached alone (``fairseq_log_probs_into`` at fairseq step ``steps[r, p]`` by ``rule``)."""
    rows, n = tokens.shape
    deepest = np.zeros(rows, dtype=np.int64)
    kept = np.zeros(n, dtype=np.bool_)
    log_probs = np.empty(lprobs.shape[2] if normalise else 0, dtype=lprobs.dtype)
    for r in range(rows):
        kept[:] = False
        before = running[r]
        for p in range(n):
            if p > 0:
                parent = parents[r, p]
                if not (real[r, p] and within_limit[r, p] and kept[parent] and top_tokens[r, parent] == tokens[r, p]):
                    continue
                before = top_scores[r, parent]  # the drafted token's score is the parent's choice's
                if depth[r, p] > depth[r, deepest[r]]:
                    deepest[r] = p
            kept[p] = True
            if normalise:
                fairseq_log_probs_into(lprobs[r, p], steps[r, p], rule, log_probs)
                best, token, count = _best(log_probs, before)
            else:
                best, token, count = _best(lprobs[r, p], before)
            if count > 1:
                deepest[r] = -1
                break
            top_scores[r, p], top_tokens[r, p] = best, token
    return deepest


@numba.njit(cache=True, nogil=True)
def _rank_tree_path(lprobs, drafted, counts, parents, depth, steps, max_len, running, normalise, rule):
    """``ExactAcceptance._accept_path`` on a CPU after the projection: ``_rank_tree`` over the pass's
    tokens (the last accepted one, then ``drafted`` ``[rows, n - 1]``, of which each row's first
    ``counts[r]`` are real) and the verdict read off each row's deepest kept position, as
    ``tree_verdict`` reads it (its accepted counts, path, tokens and cumulative scores); ``None`` where
    a row met a tie on its way. ``lprobs``: log-probabilities, or with ``normalise`` logits normalised by
    ``rule`` (``_rank_tree``)."""
    rows, n = depth.shape
    tokens = np.zeros((rows, n), dtype=drafted.dtype)
    tokens[:, 1:] = drafted
    real = np.arange(n).reshape((1, n)) <= counts.reshape((rows, 1))
    top_scores = np.full((rows, n), -np.inf, dtype=lprobs.dtype)
    top_tokens = np.zeros((rows, n), dtype=drafted.dtype)
    deepest = _rank_tree(lprobs, tokens, parents, depth, real, steps <= max_len, running, top_scores, top_tokens,
                         normalise, steps, rule)
    if deepest.min() < 0:
        return None
    accepted = np.empty(rows, dtype=np.int64)
    for r in range(rows):
        accepted[r] = depth[r, deepest[r]]
    m = accepted.max() + 1
    path = np.empty((rows, m), dtype=np.int64)
    kept_tokens = np.empty((rows, m), dtype=drafted.dtype)
    cumulative = np.empty((rows, m), dtype=lprobs.dtype)
    for r in range(rows):
        for j in range(m):
            path[r, j] = j
        p = deepest[r]
        while p > 0:  # up from the deepest kept position; position 0 is column 0's already
            path[r, depth[r, p]] = p
            p = parents[r, p]
        for j in range(m):
            kept_tokens[r, j], cumulative[r, j] = top_tokens[r, path[r, j]], top_scores[r, path[r, j]]
    return accepted, path, kept_tokens, cumulative


# ``_rank_tree_path``'s rule where it reads log-probabilities (never read; the types of a rule)
_LOG_PROBABILITIES = (0, 0, 0, 0, np.float32(0.0), 0)


def tree_verdict(tree, deepest: Tensor, top_scores: Tensor, top_tokens: Tensor) -> Verdict:
    """The verdict of a tree pass from each row's deepest kept position and fairseq's choices at the
    positions ``[rows, n]``: the accepted path's positions, then each column's own index."""
    rows, n = tree.depth.shape
    positions = torch.arange(n, device=tree.depth.device)
    accepted = tree.depth.gather(1, deepest.unsqueeze(1)).squeeze(1)
    on_path = tree.sees[torch.arange(rows, device=deepest.device), deepest]
    m = int(accepted.max()) + 1
    path = torch.arange(m + 1, device=deepest.device).repeat(rows, 1)  # after a row's path: its own index
    path.scatter_(1, torch.where(on_path, tree.depth, m), positions.expand(rows, n))
    path = path[:, :m]  # column m took the positions off the path
    return Verdict(accepted=accepted, tokens=top_tokens.gather(1, path), cumulative=top_scores.gather(1, path),
                   path=path)


class ExactAcceptance:
    """Keep drafted tokens while they equal the verifier's greedy choice (lossless).

    The choice at each position is ranked exactly as fairseq's beam search with beam 1 ranks it:
    ``topk`` over the running cumulative score plus the new log-probabilities, so near-ties
    resolve as in ``SequenceGenerator``. Along a matching draft the running score is known in
    advance (a sequential float32 sum of the drafted tokens' log-probabilities), so a chunk of
    positions is ranked in one ``topk``. Chunks double from a first one of about ``first_positions``
    positions across the batch (``chunk_range`` per row): a pass's cost grows with its positions, less
    than in proportion for one row (its weights are read once a call). Only rows that
    matched every drafted token so far run the next chunk's layers (where the verifier runs them on
    demand) and are projected onto the vocabulary, and only as far as their own draft goes. On a CPU
    a chunk is ranked by one compiled call that stops at each row's first rejected position
    (``_rank_chain``: a UA-GEC IAD pass's ranking took a dozen torch operations over every position's
    vocabulary); a row meeting a tied score on its way is ranked by ``topk`` as before.

    A second call costs what ranking ``call_positions`` more positions in the first would, so where the
    rows usually keep their whole first chunk (a drafter that is nearly always right) the split only
    costs: the rule learns from each pass whether ranking the pass in one call would have paid (a row
    went on past the first chunk, against the positions the rows that stopped did not run) and ranks
    whole passes while its running mean says so: `self-draft` drafting 24 tokens a pass ran 2.21x plugin
    greedy so on all 1,120 LibreOffice test sentences, 2.05x splitting every pass (Zen 4 VM, 2 threads, one
    process); `iad` on the same sentences, whose drafts are mostly rejected, splits as before.
    """

    accepts_trees = True

    def __init__(self, first_positions=16, chunk_range=(4, 16), call_positions=CALL_POSITIONS):
        self.first_positions, self.chunk_range, self.call_positions = first_positions, chunk_range, call_positions
        # running mean (over the last ~1 / MERGE_LEARNING_RATE passes longer than the first chunk) of the row
        # positions that ranking them whole saved; whole passes while it is positive
        self.merging_gain = 0.0

    def first_chunk(self, rows: int) -> int:
        low, high = self.chunk_range
        return max(low, min(high, self.first_positions // rows))

    def accept(self, proposal: Proposal, scores, cumulative_before) -> Verdict:
        if getattr(scores, "tree", None) is not None:
            return self._accept_path(proposal, scores, cumulative_before)
        rows, n = proposal.tokens.size(0), proposal.tokens.size(1) + 1
        chunk = min(n, self.first_chunk(rows))
        stop = n if self.merging_gain > 0 else chunk
        top_scores, top_tokens, kept = self._rank(proposal, scores, 0, stop, None, cumulative_before)
        if chunk < n:
            self._learn(kept, chunk, n)
        if stop == n:  # one chunk: every row's positions are ranked
            return Verdict(accepted=kept, tokens=top_tokens, cumulative=top_scores)
        tokens = proposal.tokens.new_zeros(rows, n)
        cumulative = cumulative_before.new_full((rows, n), -math.inf)
        tokens[:, :stop], cumulative[:, :stop], accepted = top_tokens, top_scores, kept
        active = torch.arange(rows, device=kept.device)  # rows that kept every drafted token so far
        start = 0
        while stop < n:
            going_on = kept.eq(stop - start)
            if not bool(going_on.any()):
                break
            active, running = active[going_on], top_scores[going_on, -1]
            start, stop = stop, min(n, 2 * stop)
            top_scores, top_tokens, kept = self._rank(proposal, scores, start, stop, active, running)
            tokens[active, start:stop] = top_tokens
            cumulative[active, start:stop] = top_scores
            accepted[active] += kept
        return Verdict(accepted=accepted, tokens=tokens, cumulative=cumulative)

    def _learn(self, kept: Tensor, chunk: int, n: int):
        """What ranking this pass of ``n`` positions in one call saved (in row positions) against a first
        chunk of ``chunk``: a second call where a row kept its whole first chunk, less the later positions
        of the rows that did not."""
        went_on = int(kept.ge(chunk).sum())
        gain = (self.call_positions if went_on else 0) - (n - chunk) * (kept.size(0) - went_on)
        self.merging_gain += (gain - self.merging_gain) * MERGE_LEARNING_RATE

    @staticmethod
    def _accept_path(proposal: Proposal, scores, cumulative_before) -> Verdict:
        """A tree: the deepest node whose path from the last accepted token holds fairseq's choice
        at every step (siblings with one token give the same path: the first is kept). On a CPU the
        choices are ranked at the kept nodes alone and the path is read off in one compiled call
        (``_rank_tree_path``: ranking every node in torch cost a tree pass of 7 positions 0.3 ms more
        than a chain's, and the path's torch operations 0.1-0.2 ms more), which also normalises the
        logits of those nodes alone where the verifier hands them over (``VerifierScores.logits``: `gad`
        with the LibreOffice recipe's head reaches 2.65 of a pass's 6 on average)."""
        tree = scores.tree
        rows, n = tree.depth.shape
        cpu = proposal.lengths.device.type == "cpu"
        logits = None
        if cpu and proposal.lengths.numpy().min() == n - 1:  # every row drafted as many: all positions are real
            real, logits = None, scores.logits(n)  # (checked in numpy: each torch operation cost microseconds)
            lprobs = scores.span(0, n) if logits is None else torch.from_numpy(logits)
        else:
            real = torch.arange(n, device=tree.depth.device) <= proposal.lengths.unsqueeze(1)  # position 0, drafts
            lprobs = scores.span(0, n, None, real)
        if cpu and lprobs.dtype == torch.float32:
            ranked = _rank_tree_path(lprobs.contiguous().numpy(), proposal.tokens.contiguous().numpy(),
                                     proposal.lengths.contiguous().numpy(), tree.parents.contiguous().numpy(),
                                     tree.depth.contiguous().numpy(), scores.steps.contiguous().numpy(),
                                     scores.max_len, cumulative_before.contiguous().numpy(), logits is not None,
                                     _LOG_PROBABILITIES if logits is None else scores.log_prob_rule())
            if ranked is not None:  # else a tie on the way: fairseq's ``topk`` decides it
                accepted, path, tokens, cumulative = (torch.from_numpy(part) for part in ranked)
                return Verdict(accepted=accepted, tokens=tokens, cumulative=cumulative, path=path)
        if logits is not None:  # the ranking below reads log-probabilities
            lprobs = scores.span(0, n)
        if real is None:
            real = torch.ones(rows, n, dtype=torch.bool)
        tokens = torch.cat([proposal.tokens.new_zeros(rows, 1), proposal.tokens], 1)  # [rows, n]
        within_limit = scores.steps <= scores.max_len
        top_scores, top_tokens, deepest = ExactAcceptance._rank_every_node(lprobs, tokens, tree, real, within_limit,
                                                                           cumulative_before)
        return tree_verdict(tree, deepest, top_scores, top_tokens)

    @staticmethod
    def _rank_every_node(lprobs, tokens, tree, real, within_limit, cumulative_before):
        """fairseq's choice at every position of a tree pass ``[rows, n]`` (its scores and tokens) and
        each row's deepest kept position (the first of the deepest)."""
        rows, n = tokens.shape
        positions = torch.arange(n, device=tokens.device)
        token_lprobs = lprobs[torch.arange(rows, device=tokens.device).unsqueeze(1), tree.parents, tokens]
        # fairseq's running score after each position's token, summed along its path in float32 order
        before = cumulative_before.unsqueeze(1).expand(rows, n)
        for depth in range(1, int(tree.depth.max()) + 1):
            before = torch.where(tree.depth == depth, before.gather(1, tree.parents) + token_lprobs, before)
        # filler is never kept either
        top_scores, top_tokens = fairseq_top_one(lprobs + before.unsqueeze(2),
                                                 real & reachable(before, cumulative_before))
        # a drafted token is chosen when it is the choice after its parent, within fairseq's length
        # limit; a node is kept when it and its ancestors are all chosen (position 0 always is)
        chosen = real & top_tokens.gather(1, tree.parents).eq(tokens) & within_limit
        chosen[:, 0] = True
        kept = ~(tree.sees & ~chosen.unsqueeze(1)).any(2)
        deepest = torch.where(kept, tree.depth * n + (n - 1 - positions), -1).argmax(1)
        return top_scores, top_tokens, deepest

    @staticmethod
    def _rank(proposal: Proposal, scores, start, stop, active, running):
        """fairseq's choice at positions ``start .. stop - 1`` of the ``active`` rows (all by default)
        if each kept its draft before them, from the running score ``running`` before ``start``;
        returns the choices' cumulative scores and tokens ``[rows, stop - start]`` and the drafted
        tokens kept in the span."""
        draft = proposal.tokens[:, start:stop]  # one shorter than the span in the last chunk
        lengths = proposal.lengths
        if active is not None:
            draft, lengths = draft[active], lengths[active]
        needed = None
        if proposal.tokens.size(1) > 0:  # a row needs the positions of its drafted tokens and the one after them
            needed = torch.arange(start, stop, device=lengths.device) <= lengths.unsqueeze(1)
        lprobs = scores.span(start, stop, active, needed)  # [rows, stop - start, vocab]
        if lprobs.device.type == "cpu" and lprobs.dtype == torch.float32:
            top_scores = lprobs.new_full(lprobs.shape[:2], -math.inf)
            top_tokens = draft.new_zeros(lprobs.shape[:2])
            kept = torch.from_numpy(_rank_chain(lprobs.contiguous().numpy(), draft.contiguous().numpy(),
                                                (lengths - start).clamp_(min=0).numpy(), running.contiguous().numpy(),
                                                top_scores.numpy(), top_tokens.numpy()))
            if not bool(kept.lt(0).any()):
                return top_scores, top_tokens, kept
        before = running.unsqueeze(1)  # fairseq's score before each position if the draft so far is kept
        matters = None
        if draft.size(1) > 0:
            draft_lprobs = lprobs[:, :draft.size(1)].gather(2, draft.unsqueeze(2)).squeeze(2)
            steps = [running]
            for j in range(lprobs.size(1) - 1):
                steps.append(steps[-1] + draft_lprobs[:, j])
            before = torch.stack(steps, 1)
            matters = needed & reachable(before, running)  # positions past a row's draft are never reached
        top_scores, top_tokens = fairseq_top_one(lprobs + before.unsqueeze(2), matters)
        if draft.size(1) == 0:
            return top_scores, top_tokens, torch.zeros_like(lengths)
        drafted = torch.arange(start, start + draft.size(1), device=lengths.device) < lengths.unsqueeze(1)
        match = drafted & top_tokens[:, :draft.size(1)].eq(draft)
        return top_scores, top_tokens, match.long().cumprod(1).sum(1)


class TopBetaWithinTau:
    """A relaxed rule: the drafted token is among the verifier's top ``beta`` and at most ``tau`` below the
    top-1 log-probability (GAD++; with ``tau`` infinite, Stern et al. 5.1's top-k). Called on torch tensors;
    on a CPU ``RelaxedAcceptance`` runs it compiled (``_accept_top_beta``)."""

    def __init__(self, beta: int, tau: float = math.inf):
        self.beta, self.tau = beta, tau

    def __call__(self, draft, lprobs):
        top = lprobs.topk(min(self.beta, lprobs.size(-1)), dim=-1)
        passes = top.indices.eq(draft.unsqueeze(-1)).any(-1)
        if math.isinf(self.tau):
            return passes
        drafted_lprobs = lprobs.gather(-1, draft.unsqueeze(-1)).squeeze(-1)
        return passes & (drafted_lprobs >= top.values[..., 0] - self.tau)


def in_top_k(top_k):
    """Stern et al. 5.1: the drafted token is among the verifier's ``top_k`` choices."""
    return TopBetaWithinTau(top_k)


def in_top_beta_within_tau(beta, tau):
    """GAD++: among the verifier's top ``beta`` and at most ``tau`` below the top-1 log-probability."""
    return TopBetaWithinTau(beta, tau)


def within_distance(epsilon):
    """Stern et al. 5.2: the token index is within ``epsilon`` of the verifier's (ordinal outputs)."""

    def passes(draft, lprobs):
        return (draft - lprobs.argmax(-1)).abs() <= epsilon

    return passes


def equals_top_one(draft, lprobs):
    return draft.eq(lprobs.argmax(-1))


class RelaxedAcceptance:
    """Keep the longest drafted prefix whose every token ``passes``, and at least
    ``min_block_size`` tokens per pass where the draft has them (Stern et al. 5.3)."""

    accepts_trees = False

    def __init__(self, passes, min_block_size=1):
        self.passes = passes
        self.min_block_size = min_block_size

    def accept(self, proposal: Proposal, scores, cumulative_before) -> Verdict:
        if getattr(scores, "tree", None) is not None:
            raise ValueError("relaxed acceptance (--acceptance other than exact, --min-block-size, gad++) "
                             "takes single drafts, not trees; use --acceptance exact")
        lprobs = scores.all()
        cpu_float32 = lprobs.device.type == "cpu" and lprobs.dtype == cumulative_before.dtype == torch.float32
        if isinstance(self.passes, TopBetaWithinTau) and cpu_float32 and lprobs.size(1) == proposal.tokens.size(1) + 1:
            # one compiled call: the torch operations took 0.24-0.29 ms of a 1.5 ms GAD++ pass on the Zen 4
            # VM, this call 0.04-0.06
            verdict = _accept_top_beta(lprobs.contiguous().numpy(), proposal.tokens.contiguous().numpy(),
                                       proposal.lengths.contiguous().numpy(), self.passes.beta,
                                       np.float32(self.passes.tau), self.min_block_size - 1,
                                       cumulative_before.contiguous().numpy())
            if verdict is not None:  # else a drafted token ties the beta-th best: ``topk`` decides it
                accepted, tokens, cumulative = (torch.from_numpy(part) for part in verdict)
                return Verdict(accepted=accepted, tokens=tokens, cumulative=cumulative)
        return self.accept_vectorised(proposal, lprobs, cumulative_before)

    def accept_vectorised(self, proposal: Proposal, lprobs: Tensor, cumulative_before: Tensor) -> Verdict:
        """``accept`` in torch operations, with the pass's log-probabilities ``lprobs`` ``[rows, k + 1, vocab]``."""
        k = proposal.tokens.size(1)
        passes = self.passes(proposal.tokens, lprobs[:, :k]) & drafted_mask(proposal)
        accepted = passes.long().cumprod(1).sum(1)
        accepted = torch.maximum(accepted, proposal.lengths.clamp(max=self.min_block_size - 1))
        positions = torch.arange(k + 1, device=lprobs.device)
        drafted = torch.cat([proposal.tokens, proposal.tokens.new_zeros(proposal.tokens.size(0), 1)], 1)
        tokens = torch.where(positions < accepted.unsqueeze(1), drafted, lprobs.argmax(-1))
        token_lprobs = lprobs.gather(2, tokens.unsqueeze(2)).squeeze(2)
        cumulative = cumulative_before.unsqueeze(1) + token_lprobs.cumsum(1)
        return Verdict(accepted=accepted, tokens=tokens, cumulative=cumulative)


@numba.njit(cache=True, nogil=True)
def _accept_top_beta(lprobs, draft, drafted, beta, tau, min_kept, before):
    """``RelaxedAcceptance.accept`` under ``TopBetaWithinTau(beta, tau)`` in numpy arrays, as its torch
    operations compute it (``lprobs`` ``[rows, k + 1, vocab]`` float32, ``tau`` float32): a drafted token
    passes when it is at most ``tau`` below its position's best and fewer than ``beta`` score above it;
    at least ``min_kept`` drafted tokens are kept; the cumulative scores are summed in float64, as torch's
    ``cumsum`` of float32 on a CPU. ``None`` when a token within ``tau`` ties the ``beta``-th best (which
    of the tied ``topk`` keeps is torch's to say)."""
    rows, n, vocab = lprobs.shape
    accepted = np.zeros(rows, dtype=np.int64)
    tokens = np.empty((rows, n), dtype=draft.dtype)
    cumulative = np.empty((rows, n), dtype=np.float32)
    for r in range(rows):
        kept = 0
        while kept < min(drafted[r], n - 1):
            row = lprobs[r, kept]
            value = row[draft[r, kept]]
            if not value >= largest_sum(row, np.float32(0.0)) - tau:
                break
            above = 0
            level = 0  # the drafted token among them
            for v in range(vocab):
                above += np.int32(row[v] > value)
                level += np.int32(row[v] == value)
            if above >= beta:
                break
            if above + level > beta:
                return None
            kept += 1
        accepted[r] = max(kept, min(drafted[r], min_kept))
        total = 0.0
        for j in range(n):
            token = draft[r, j] if j < accepted[r] else _best(lprobs[r, j], np.float32(0.0))[1]
            tokens[r, j] = token
            total += np.float64(lprobs[r, j, token])
            cumulative[r, j] = before[r] + np.float32(total)
    return accepted, tokens, cumulative


def check_min_block_size(cfg):
    if cfg.min_block_size < 1:
        raise ValueError(f"--min-block-size must be at least 1 (got {cfg.min_block_size})")


def build_gad_plus_plus_acceptance(cfg):
    """GAD++'s own rule: top-beta within tau with ``--gad-top-beta`` and ``--gad-tau`` (Xia et al. 2022)."""
    if getattr(cfg.acceptance, "value", cfg.acceptance) != "exact":
        raise ValueError("--gen-algo gad++ accepts by its own rule: set --gad-top-beta and --gad-tau instead of "
                         "--acceptance (or use --gen-algo gad with --acceptance)")
    if cfg.gad_top_beta < 1 or cfg.gad_tau < 0:
        raise ValueError(f"--gad-top-beta must be at least 1 and --gad-tau at least 0 "
                         f"(got {cfg.gad_top_beta} and {cfg.gad_tau})")
    check_min_block_size(cfg)
    return RelaxedAcceptance(in_top_beta_within_tau(cfg.gad_top_beta, cfg.gad_tau), cfg.min_block_size)


def build_acceptance(cfg):
    """The rule named by ``--acceptance`` with its parameters (see ``DecodingConfig``)."""
    rule = getattr(cfg.acceptance, "value", cfg.acceptance)
    check_min_block_size(cfg)
    if rule in ("top-k", "top-beta") and cfg.acceptance_top_k < 1:
        raise ValueError(f"--acceptance-top-k must be at least 1 (got {cfg.acceptance_top_k})")
    if rule == "exact":
        if cfg.min_block_size == 1:
            return ExactAcceptance()
        return RelaxedAcceptance(equals_top_one, cfg.min_block_size)
    if rule == "top-k":
        passes = in_top_k(cfg.acceptance_top_k)
    elif rule == "top-beta":
        passes = in_top_beta_within_tau(cfg.acceptance_top_k, cfg.acceptance_tau)
    elif rule == "distance":
        passes = within_distance(cfg.acceptance_epsilon)
    else:
        raise ValueError(f"unknown --acceptance {rule!r}")
    return RelaxedAcceptance(passes, cfg.min_block_size)
