"""The small typed objects passed between drafter, verifier and acceptance rule."""
from dataclasses import dataclass

from torch import Tensor


@dataclass
class Proposal:
    """A drafter's guess of each row's next tokens."""

    tokens: Tensor  # [rows, k]; entries at or after lengths[r] are filler
    lengths: Tensor  # [rows] drafted tokens per row, 0..k


@dataclass
class Verdict:
    """What an acceptance rule keeps of a proposal after one verifier pass."""

    accepted: Tensor  # [rows] drafted tokens kept, a prefix of the proposal
    tokens: Tensor  # [rows, k + 1] the accepted drafted tokens, then the verifier's own token
    cumulative: Tensor  # [rows, k + 1] fairseq's cumulative score after each of those tokens
