"""``ChainLength``: a one-slot head's chain drafts as many tokens as what the verifier keeps pays for."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pardec_fairseq.decoding.drafters.chain_length import (FLAT, PRIOR_KEPT, PRIOR_TOKENS, STEP_COST, ChainLength,
                                                           tokens_per_cost)


def test_a_pass_counts_each_position_reached_and_kept():
    length = ChainLength(6)
    assert length.keep_probabilities() == pytest.approx([PRIOR_KEPT] * 6)
    length.observe(np.array([2, 4, 0]), 4)  # rows kept 2 of 4 (the third missed), all 4, none
    assert length.reached.tolist() == [3, 2, 2, 1, 0, 0] and length.kept.tolist() == [2, 2, 1, 1, 0, 0]
    first = (2 + PRIOR_TOKENS * PRIOR_KEPT) / (3 + PRIOR_TOKENS)
    second = (2 + PRIOR_TOKENS * first) / (2 + PRIOR_TOKENS)
    assert length.keep_probabilities()[:2] == pytest.approx([first, second])
    # positions no pass reached take the share of the one before
    assert length.keep_probabilities()[4] == length.keep_probabilities()[5] == length.keep_probabilities()[3]


def test_tokens_per_cost_by_hand():
    # kept 0.5, then 0.4: a chain of 1 keeps 1 + 0.5 tokens, of 2 1 + 0.5 + 0.2; each costs a pass and its steps
    assert tokens_per_cost(np.array([0.5, 0.4]), np.array([1, 2])) == pytest.approx(
        [1.5 / (1 + STEP_COST), 1.7 / (1 + 2 * STEP_COST)])


@given(st.lists(st.floats(0.01, 0.999), min_size=1, max_size=24))
def test_the_chain_is_the_shortest_within_flat_of_the_best(kept):
    length = ChainLength(len(kept))
    length.reached[:], length.kept[:] = 1e9, 1e9 * np.array(kept)  # so many passes that the prior is nothing
    steps = length.steps()
    speeds = tokens_per_cost(length.keep_probabilities(), np.arange(1, len(kept) + 1))
    assert 1 <= steps <= len(kept) and speeds[steps - 1] >= (1 - FLAT) * speeds.max()
    assert all(speeds[:steps - 1] < (1 - FLAT) * speeds.max())


def test_kept_drafts_lengthen_the_chain_and_missed_ones_shorten_it():
    prior = ChainLength(16).steps()
    always, never = ChainLength(16), ChainLength(16)
    for _ in range(200):
        always.observe(np.array([always.steps()]), always.steps())
        never.observe(np.array([0]), never.steps())
    assert never.steps() == 1 < prior < always.steps() == 16


def test_a_chain_drafts_a_token_or_more():
    with pytest.raises(ValueError, match="at least one token a pass, not at most 0"):
        ChainLength(0)
