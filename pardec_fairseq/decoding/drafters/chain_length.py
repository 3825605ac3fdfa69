"""How many tokens a one-slot draft head's chain drafts a pass, learnt from what the verifier kept.

Why: a chain's best length depends on how often the verifier keeps the head's tokens, which differs by
head (a head reading the verifier's first two layers keeps more than one reading its embedding) and by
acceptance rule (`gad++`'s top-beta keeps more than exact matching); a fixed default was right for one
of them. Each pass tells, position by position, whether the verifier kept a row's drafted token given
that it kept those before it. With ``q_i`` the share kept at position ``i``, a chain of ``s`` tokens keeps
``q_1 + q_1 q_2 + ... + q_1 ... q_s`` of them besides the verifier's own token, and costs a pass plus ``s``
steps at ``STEP_COST`` of a pass each (the drafting call and the pass's extra row): Leviathan et al.'s
(2023) choice of the draft length, with a share per position. The chain takes the
shortest length within ``FLAT`` of the best tokens per cost, so that where the curve is flat it drafts
fewer tokens. Later positions are kept less often (the head feeds its own features back), so one share
for every position would draw chains too long.

Measured on the Zen 3 VM (LibreOffice En-De, the one-hour verifier, a head reading its first two layers,
2 threads, batch 1, all 1,120 test sentences, one run each, 2026-12-02): exact `gad` with 3 and 5 drafted
tokens and a leaf kept 3.06 and 3.75 tokens a pass at 1.36x and 1.38x plugin greedy, `gad++` (beta 3, tau 1)
with 4 and 8 kept 4.22 and 6.36 at 1.62x and 1.81x: a step cost 0.13-0.15 of a pass. Chosen so, `gad++`'s
chains kept 7.91 tokens a pass at 1.85x (8 steps: 1.95x in that run, 1.79-1.81x in two others). Exact
`gad`'s chains with a runner-up leaf chosen so ran 1.30-1.36x against 1.36-1.40x for 3 steps and a leaf
(the passes' trees cost more per drafted token), so they keep their tile (``draft_head.chain_steps``).
"""
import numpy as np

# what one more drafted token costs (a drafting step and its row in the verifier's pass) against a pass
STEP_COST = 0.13
# a chain takes the shortest length whose tokens per cost are within this share of the best length's
FLAT = 0.01
# before any pass a drafted token counts as kept this often; each position's share is shrunk towards the
# one before it by PRIOR_TOKENS pseudo-tokens, so a position seldom or never reached takes its predecessor's
PRIOR_KEPT, PRIOR_TOKENS = 0.75, 10.0


def tokens_per_cost(kept: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """A pass's tokens (the kept draft and the verifier's own) over its cost, for chains of ``steps``
    tokens whose ``i``-th is kept with probability ``kept[i - 1]`` once those before it were."""
    tokens = 1.0 + np.cumsum(np.cumprod(kept))
    return tokens[steps - 1] / (1.0 + STEP_COST * steps)


class ChainLength:
    """The drafted tokens a pass from how often the verifier kept each position of earlier chains."""

    def __init__(self, most: int):
        if most < 1:
            raise ValueError(f"a chain drafts at least one token a pass, not at most {most}")
        self.most = most
        self.reached, self.kept = np.zeros(most), np.zeros(most)

    def keep_probabilities(self) -> np.ndarray:
        """``[most]``: how often each position's drafted token is kept, given that those before it were."""
        shares, previous = np.empty(self.most), PRIOR_KEPT
        for i in range(self.most):
            previous = shares[i] = (self.kept[i] + PRIOR_TOKENS * previous) / (self.reached[i] + PRIOR_TOKENS)
        return shares

    def steps(self) -> int:
        lengths = np.arange(1, self.most + 1)
        speeds = tokens_per_cost(self.keep_probabilities(), lengths)
        return int(lengths[np.argmax(speeds >= (1 - FLAT) * speeds.max())])

    def observe(self, accepted: np.ndarray, drafted: int):
        """A pass that drafted ``drafted`` tokens a row and kept ``accepted[r]`` of row r's: a row reached each
        position up to its first miss, and kept those before it."""
        kept = np.minimum(accepted, drafted)[:, None]
        positions = np.arange(drafted)
        self.reached[:drafted] += (kept >= positions).sum(0)
        self.kept[:drafted] += (kept > positions).sum(0)
