"""The small typed objects passed between drafter, verifier and acceptance rule."""
import math
from dataclasses import dataclass, field
from typing import Optional

import numba
import numpy as np
import torch
from torch import Tensor


@dataclass
class Proposal:
    """A drafter's guess of each row's next tokens: a chain, or a tree of candidate continuations."""

    tokens: Tensor  # [rows, k]; entries at or after lengths[r] are filler
    lengths: Tensor  # [rows] drafted tokens per row, 0..k
    # [rows, k] or None (a chain): the pass position of each drafted token's parent, where position 0
    # is the last accepted token and position j + 1 drafted token j; below the token's own position
    parents: Optional[Tensor] = None
    # the tree's shape when the drafter made it with the draft (``DraftTree.of`` makes it otherwise)
    tree: Optional["DraftTree"] = None


@dataclass
class DraftTree:
    """The shape of a tree pass over ``n`` positions (0: the last accepted token, j + 1: drafted
    token j): each position's depth below position 0 and the positions it sees (itself and its
    ancestors), which is all the verifier's attention and the acceptance need."""

    parents: Tensor  # [rows, n]; position 0 is its own parent
    depth: Tensor  # [rows, n]
    sees: Tensor  # [rows, n, n] bool: sees[r, i, a] when a is i or an ancestor of i

    @classmethod
    def of(cls, proposal: Proposal) -> Optional["DraftTree"]:
        if proposal.parents is None or proposal.tree is not None:
            return proposal.tree
        return cls.of_parents(proposal.parents)

    @classmethod
    def of_parents(cls, drafted_parents: Tensor) -> "DraftTree":
        """The shape of drafted tokens whose parents' pass positions are ``drafted_parents`` ``[rows, k]``."""
        if drafted_parents.device.type == "cpu":  # one compiled call, position by position from the parent's
            return cls(*(torch.from_numpy(part) for part in tree_shape(drafted_parents.contiguous().numpy())))
        rows, k = drafted_parents.shape
        n = k + 1
        # drafted token j sits at pass position j + 1: its parent is at most j
        if bool((drafted_parents > torch.arange(k, device=drafted_parents.device)).any()) \
                or bool((drafted_parents < 0).any()):
            raise ValueError(PARENT_AFTER_CHILD)
        parents = torch.cat([drafted_parents.new_zeros(rows, 1), drafted_parents], 1)
        step = torch.nn.functional.one_hot(parents, n).float() + torch.eye(n, device=parents.device)
        reach = step.clamp(max=1)
        for _ in range(math.ceil(math.log2(max(k, 1))) + 1):  # paths of up to 2^i steps
            reach = (reach @ reach).clamp_(max=1)
        sees = reach.bool()
        return cls(parents, sees.sum(-1) - 1, sees)


PARENT_AFTER_CHILD = "a drafted token's parent must come before it in the proposal"


@numba.njit(cache=True, nogil=True)
def tree_shape(drafted_parents):
    """``DraftTree.of`` of drafted tokens' parents ``[rows, k]``: parents, depth and sees ``[rows, k + 1]``."""
    rows, k = drafted_parents.shape
    parents = np.zeros((rows, k + 1), dtype=np.int64)
    depth = np.zeros((rows, k + 1), dtype=np.int64)
    sees = np.zeros((rows, k + 1, k + 1), dtype=np.bool_)
    for r in range(rows):
        sees[r, 0, 0] = True
        for p in range(1, k + 1):
            parent = drafted_parents[r, p - 1]
            if parent < 0 or parent >= p:
                raise ValueError(PARENT_AFTER_CHILD)
            parents[r, p], depth[r, p] = parent, depth[r, parent] + 1
            sees[r, p] = sees[r, parent]
            sees[r, p, p] = True
    return parents, depth, sees


@dataclass
class Verdict:
    """What an acceptance rule keeps of a proposal after one verifier pass."""

    accepted: Tensor  # [rows] drafted tokens kept, a prefix of the proposal (a path of a tree)
    tokens: Tensor  # [rows, m] the accepted drafted tokens, then the verifier's own token
    cumulative: Tensor  # [rows, m] fairseq's cumulative score after each of those tokens
    # [rows, m] for trees: the pass positions of the kept tokens (position 0, then the accepted path;
    # entries after a row's path repeat their index); None for chains (positions 0 .. accepted)
    path: Optional[Tensor] = None
    _ends: Optional[Tensor] = field(default=None, init=False, repr=False)

    def output_ends(self, eos: int) -> Tensor:
        """``[rows]``: the index in ``tokens`` of each row's first kept EOS (one fairseq scored above
        -inf), or ``m`` where none: a row's output ends there (the engine's state and the statistics
        read it, so it is computed once)."""
        if self._ends is None:
            # on a CPU one compiled call: the 8 torch operations took 0.1-0.2 ms a pass on the Zen 3 VM
            compiled = self.tokens.device.type == "cpu" and self.cumulative.dtype == torch.float32
            ends = first_kept_ends_compiled if compiled else first_kept_ends
            self._ends = ends(self.tokens, self.cumulative, self.accepted, eos)
        return self._ends


def first_kept_ends(tokens: Tensor, cumulative: Tensor, accepted: Tensor, eos: int) -> Tensor:
    """``Verdict.output_ends`` of ``tokens``/``cumulative`` ``[rows, m]`` with ``accepted`` ``[rows]``."""
    m = tokens.size(1)
    offsets = torch.arange(m, device=tokens.device)
    kept = offsets < accepted.unsqueeze(1) + 1
    ends = kept & tokens.eq(eos) & cumulative.ne(-math.inf)
    return torch.where(ends, offsets, m).min(1).values


def first_kept_ends_compiled(tokens: Tensor, cumulative: Tensor, accepted: Tensor, eos: int) -> Tensor:
    """``first_kept_ends`` of CPU tensors (float32 ``cumulative``) in one compiled call."""
    return torch.from_numpy(_first_kept_ends(tokens.numpy(), cumulative.numpy(), accepted.numpy(), eos))


@numba.njit(cache=True, nogil=True)
def _first_kept_ends(tokens, cumulative, accepted, eos):
    rows, m = tokens.shape
    ends = np.full(rows, m, dtype=np.int64)
    for r in range(rows):
        for j in range(min(accepted[r] + 1, m)):
            if tokens[r, j] == eos and cumulative[r, j] != -np.inf:
                ends[r] = j
                break
    return ends
