"""Lookahead decoding: the window and pool start from the source, a pass is the window's tree plus
the pool's n-grams after the last token as a trie, the window moves on as Jacobi iteration does,
and decoding stays fairseq's greedy output."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pardec_fairseq.decoding import DecodingConfig
from pardec_fairseq.decoding.drafters.lookahead import LookaheadDrafter
from pardec_fairseq.decoding.engine import DecodingState
from test_lossless_matches_fairseq import assert_same_hypotheses, fairseq_beam_one, plugin
from tiny import build_transformer, make_batch, make_dictionary

EOS, PAD = 2, 1


def started(window, ngram, guesses, pool, sources):
    dictionary = make_dictionary(20)
    drafter = LookaheadDrafter(dictionary, dictionary, window, ngram, guesses, pool)
    drafter.begin(make_batch(dictionary, sources)["net_input"], max_len=30)
    return drafter


def state(*last_tokens):
    """Rows that accepted one token each."""
    decoding = DecodingState.begin(len(last_tokens), 10, EOS, PAD, torch.device("cpu"))
    decoding.tokens[:, 1] = torch.tensor(last_tokens)
    decoding.lengths += 1
    return decoding


def test_the_window_and_the_pool_start_from_the_left_aligned_source():
    drafter = started(3, 3, 2, 4, [[5, 6, 7, 8], [9]])
    # level l, column i: the source's token i + l; past the source's EOS, pad
    assert drafter.window[0].tolist() == [[5, 6, 7], [6, 7, 8]]
    assert drafter.window[1].tolist() == [[9, EOS, PAD], [EOS, PAD, PAD]]
    seeds = [tuple(g) for g, age in zip(drafter.pool[0].tolist(), drafter.age[0]) if age >= 0]
    assert seeds == [(5, 6, 7), (6, 7, 8), (7, 8, EOS)]
    assert (drafter.age[1] < 0).all()  # "9 EOS" is shorter than a 3-gram


def test_a_pass_is_the_window_tree_then_the_recent_pool_ngrams_after_the_last_token_as_a_trie():
    drafter = started(3, 3, 3, 4, [[5, 6, 7, 8], [9]])
    proposal = drafter.propose(state(6, 4))
    window = [5, 6, 7, 6, 7, 8]
    # the trunk is a chain from the last token; level 1 hangs off the trunk column below it
    window_parents = [0, 1, 2, 1, 2, 3]
    assert proposal.tokens[0].tolist() == window + [7, 8] and proposal.parents[0].tolist() == window_parents + [0, 7]
    assert proposal.lengths.tolist() == [8, 6]  # row 1: no n-gram starts with 4
    assert proposal.tokens[1, :6].tolist() == [9, EOS, PAD, EOS, PAD, PAD]

    drafter._remember(np.array([[[6, 7, 9], [6, 5, 5], [6, 7, 9]], [[4, EOS, 5], [4, 5, PAD], [4, 5, 6]]]))
    proposal = drafter.propose(state(6, 4))
    # the most recent first: "5 5", "7 9", then the source's "7 8", which shares the node 7
    assert proposal.tokens[0, 6:].tolist() == [5, 5, 7, 9, 8]
    assert proposal.parents[0, 6:].tolist() == [0, 7, 0, 9, 9]
    # row 1: "5 6" (an n-gram with pad is never kept) and "EOS 5", which stops at the EOS
    assert proposal.lengths[1] == 6 + 3 and proposal.tokens[1, 6:9].tolist() == [5, 6, EOS]
    assert proposal.parents[1, 6:9].tolist() == [0, 7, 0]


def test_the_window_moves_on_as_jacobi_iteration_and_keeps_its_ngrams():
    drafter = started(3, 3, 1, 2, [[5, 6, 7, 8]])
    # the verifier's predictions after the top level's nodes (pass positions 4..6) are 10, 11, 12
    vocab = 24
    lprobs = torch.zeros(1, 7, vocab)
    lprobs[0, torch.arange(4, 7), torch.tensor([10, 11, 12])] = 1.0
    scores = SimpleNamespace(all=lambda: lprobs)
    drafter.update(scores, SimpleNamespace(accepted=torch.tensor([0])), None)
    assert drafter.window[0].tolist() == [[6, 7, 8], [10, 11, 12]]
    pool = {tuple(g) for g, age in zip(drafter.pool[0].tolist(), drafter.age[0]) if age > 0}
    assert pool == {(5, 6, 10), (6, 7, 11)}  # a pool of 2: the third new n-gram finds no room
    # a pass that accepted a drafted token moves the columns one further; pad where nothing was guessed
    drafter.update(scores, SimpleNamespace(accepted=torch.tensor([1])), None)
    assert drafter.window[0].tolist() == [[11, 12, PAD], [11, 12, PAD]]


def test_options_out_of_range_are_named():
    dictionary = make_dictionary(4)
    with pytest.raises(ValueError, match="--lookahead-ngram >= 2"):
        LookaheadDrafter(dictionary, dictionary, window=4, ngram=1, guesses=2, pool=8)


def test_repetitive_random_models_accept_lookahead_ngrams_and_keep_the_greedy_output():
    """Random tiny models repeat themselves, so the pool's n-grams are often right: fewer passes than
    tokens, and still fairseq's output at batch sizes above 1."""
    dictionary = make_dictionary(20)
    passes = tokens = 0
    for seed in range(6):
        model = build_transformer(dictionary, seed=seed, layers=2, eos_bias=-1.0)
        batch = make_batch(dictionary, [[4, 5, 6, 7, 4, 5], [8, 9], [10] * 7])
        expected = fairseq_beam_one([model], dictionary, batch, max_len_b=30)
        actual, stats = plugin("lookahead", [model], dictionary, batch, DecodingConfig(), max_len_b=30)
        assert_same_hypotheses(expected, actual)
        passes, tokens = passes + stats.iterations, tokens + stats.tokens
    assert passes < 0.8 * tokens


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), eos_bias=st.floats(-1.5, 2.0), window=st.integers(1, 6), ngram=st.integers(2, 5),
       guesses=st.integers(0, 6), pool=st.integers(0, 10), max_len_b=st.integers(1, 30),
       batch=st.lists(st.lists(st.integers(4, 23), min_size=1, max_size=10), min_size=1, max_size=6))
def test_lookahead_decoding_is_fairseq_greedy(seed, eos_bias, window, ngram, guesses, pool, max_len_b, batch):
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=seed, layers=2, eos_bias=eos_bias)
    collated = make_batch(dictionary, batch)
    expected = fairseq_beam_one([model], dictionary, collated, max_len_b=max_len_b)
    config = DecodingConfig(lookahead_window=window, lookahead_ngram=ngram, lookahead_guesses=guesses,
                            lookahead_pool=pool)
    actual, _ = plugin("lookahead", [model], dictionary, collated, config, max_len_b=max_len_b)
    assert_same_hypotheses(expected, actual)
