"""The plugin's greedy decoder reproduces fairseq's SequenceGenerator with beam 1, token for token."""
import argparse

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pardec_fairseq.decoding import build_generator
from tiny import build_transformer, make_batch, make_dictionary

GENERATION_DEFAULTS = dict(max_len_a=0.0, max_len_b=200, min_len=1, unkpen=0.0, lenpen=1.0, temperature=1.0)


def generate_both(models, dictionary, batch, **generation):
    cfg = dict(GENERATION_DEFAULTS, **generation)
    fairseq_generator = SequenceGenerator(
        models, dictionary, beam_size=1, max_len_a=cfg["max_len_a"], max_len_b=cfg["max_len_b"],
        min_len=cfg["min_len"], unk_penalty=cfg["unkpen"], len_penalty=cfg["lenpen"],
        temperature=cfg["temperature"],
    )
    plugin_generator = build_generator("greedy", models, dictionary, argparse.Namespace(**cfg), None)
    return fairseq_generator.generate(models, batch), plugin_generator.generate(models, batch)


def assert_same_hypotheses(expected, actual):
    assert len(expected) == len(actual)
    for fairseq_hypos, plugin_hypos in zip(expected, actual):
        want, got = fairseq_hypos[0], plugin_hypos[0]
        assert got["tokens"].tolist() == want["tokens"].tolist()
        torch.testing.assert_close(got["positional_scores"], want["positional_scores"], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got["score"], want["score"], rtol=1e-5, atol=1e-5)


sentences = st.lists(
    st.one_of(
        st.lists(st.integers(4, 23), min_size=1, max_size=12),
        # a repeated n-gram, the pattern input-guided decoding must handle
        st.lists(st.integers(4, 9), min_size=1, max_size=3).map(lambda gram: gram * 4),
    ),
    min_size=1, max_size=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    layers=st.integers(1, 2),
    embed_dim=st.sampled_from([8, 16, 32]),
    eos_bias=st.floats(-1.0, 3.0),
    batch=sentences,
    max_len_b=st.integers(1, 30),
    min_len=st.integers(0, 3),
    unkpen=st.sampled_from([0.0, 2.0, -2.0]),
    lenpen=st.sampled_from([1.0, 0.5]),
)
def test_greedy_equals_beam_one(seed, layers, embed_dim, eos_bias, batch, max_len_b, min_len, unkpen, lenpen):
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=seed, layers=layers, embed_dim=embed_dim, eos_bias=eos_bias)
    min_len = min(min_len, max_len_b)
    expected, actual = generate_both([model], dictionary, make_batch(dictionary, batch),
                                     max_len_b=max_len_b, min_len=min_len, unkpen=unkpen, lenpen=lenpen)
    assert_same_hypotheses(expected, actual)


def test_batch_output_equals_single_sentence_output():
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=3, eos_bias=1.5)
    batch = [[4, 5, 6], [7], [8, 9, 10, 11, 12, 13, 14], [5, 5, 5, 5]]
    collated = make_batch(dictionary, batch)
    _, together = generate_both([model], dictionary, collated, max_len_b=25)
    for sentence_id, hypos in zip(collated["id"].tolist(), together):
        sentence = batch[sentence_id]  # the collater sorts the batch by source length
        _, alone = generate_both([model], dictionary, make_batch(dictionary, [sentence]), max_len_b=25)
        assert hypos[0]["tokens"].tolist() == alone[0][0]["tokens"].tolist()


def test_eos_on_first_step_and_forced_max_length():
    dictionary = make_dictionary(20)
    stops_at_once = build_transformer(dictionary, seed=5, eos_bias=50.0)
    never_stops = build_transformer(dictionary, seed=5, eos_bias=-50.0)
    batch = make_batch(dictionary, [[4, 5], [6, 7, 8]])
    expected, actual = generate_both([stops_at_once], dictionary, batch, min_len=0)
    assert_same_hypotheses(expected, actual)
    assert [h[0]["tokens"].tolist() for h in actual] == [[dictionary.eos()]] * 2
    expected, actual = generate_both([stops_at_once], dictionary, batch)  # min_len 1 forbids it
    assert_same_hypotheses(expected, actual)
    assert all(len(h[0]["tokens"]) == 2 for h in actual)
    expected, actual = generate_both([never_stops], dictionary, batch, max_len_b=7)
    assert_same_hypotheses(expected, actual)
    assert all(len(h[0]["tokens"]) == 8 for h in actual)
    expected, actual = generate_both([stops_at_once], dictionary, batch, min_len=4)
    assert_same_hypotheses(expected, actual)
    assert all(len(h[0]["tokens"]) == 5 for h in actual)


def test_max_len_a_follows_the_padded_source_width_like_fairseq():
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=2, eos_bias=-50.0)
    batch = make_batch(dictionary, [[4] * 9, [5, 6]])
    expected, actual = generate_both([model], dictionary, batch, max_len_a=0.5, max_len_b=2)
    assert_same_hypotheses(expected, actual)


def test_ensemble_and_temperature():
    dictionary = make_dictionary(20)
    models = [build_transformer(dictionary, seed=s, eos_bias=1.0) for s in (11, 12)]
    batch = make_batch(dictionary, [[4, 5, 6, 7], [8, 9]])
    expected, actual = generate_both(models, dictionary, batch, max_len_b=20, temperature=0.7)
    assert_same_hypotheses(expected, actual)


@pytest.mark.parametrize("option, value", [("sampling", True), ("no_repeat_ngram_size", 2),
                                           ("match_source_len", True), ("prefix_size", 1)])
def test_search_options_greedy_cannot_honour_are_refused(option, value):
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary)
    args = argparse.Namespace(**dict(GENERATION_DEFAULTS, **{option: value}))
    with pytest.raises(ValueError, match="use --gen-algo fairseq"):
        build_generator("greedy", [model], dictionary, args, None)


def test_min_len_beyond_max_len_is_refused():
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary)
    generator = build_generator("greedy", [model], dictionary,
                                argparse.Namespace(**dict(GENERATION_DEFAULTS, min_len=9, max_len_b=5)), None)
    with pytest.raises(ValueError, match="--min-len 9 is larger"):
        generator.generate([model], make_batch(dictionary, [[4, 5]]))
