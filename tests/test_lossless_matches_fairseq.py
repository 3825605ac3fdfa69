"""Every lossless algorithm reproduces fairseq's SequenceGenerator with beam 1, token for token."""
import argparse

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pardec_fairseq.decoding import DecodingConfig, build_generator
from tiny import build_transformer, make_batch, make_dictionary

GENERATION_DEFAULTS = dict(max_len_a=0.0, max_len_b=200, min_len=1, unkpen=0.0, lenpen=1.0, temperature=1.0)
LOSSLESS = ["greedy", "iad", "jacobi", "gs-jacobi", "hybrid-jacobi", "bpd", "lookahead", "self-draft"]


def model_for(algorithm, dictionary, block_heads=3, zero_heads=False, identity_first_head=False, **options):
    """A random model the algorithm can run: bpd needs a blockwise_transformer (its head 1 is what
    fairseq decodes). ``zero_heads``: every head equals head 1, so drafts repeat its next token and
    are often accepted by random models, which tend to repeat themselves."""
    if algorithm != "bpd":
        return build_transformer(dictionary, **options)
    model = build_transformer(dictionary, block_heads=block_heads, identity_first_head=identity_first_head, **options)
    if zero_heads:
        with torch.no_grad():
            model.decoder.blockwise_heads.fc2.weight.zero_()
            model.decoder.blockwise_heads.fc2.bias.zero_()
    return model


def fairseq_beam_one(models, dictionary, batch, **generation):
    cfg = dict(GENERATION_DEFAULTS, **generation)
    return SequenceGenerator(
        models, dictionary, beam_size=1, max_len_a=cfg["max_len_a"], max_len_b=cfg["max_len_b"],
        min_len=cfg["min_len"], unk_penalty=cfg["unkpen"], len_penalty=cfg["lenpen"],
        temperature=cfg["temperature"],
    ).generate(models, batch)


def plugin(algorithm, models, dictionary, batch, decoding=None, drafter=None, acceptance=None, **generation):
    """Decode with a plugin algorithm; ``drafter`` and ``acceptance`` replace its own (ones built in
    the test)."""
    generator = build_generator(algorithm, models, dictionary,
                                argparse.Namespace(**dict(GENERATION_DEFAULTS, **generation)), decoding,
                                drafter=drafter, acceptance=acceptance)
    return generator.generate(models, batch), generator.stats


def assert_same_hypotheses(expected, actual, tolerance=1e-5):
    assert len(expected) == len(actual)
    for fairseq_hypos, plugin_hypos in zip(expected, actual):
        want, got = fairseq_hypos[0], plugin_hypos[0]
        assert got["tokens"].tolist() == want["tokens"].tolist()
        torch.testing.assert_close(got["positional_scores"], want["positional_scores"], rtol=tolerance,
                                   atol=tolerance)
        torch.testing.assert_close(got["score"], want["score"], rtol=tolerance, atol=tolerance)


sentences = st.lists(
    st.one_of(
        st.lists(st.integers(4, 23), min_size=1, max_size=12),
        # a repeated n-gram: input-guided decoding's source matching must stay unambiguous
        st.lists(st.integers(4, 9), min_size=1, max_size=3).map(lambda gram: gram * 4),
        st.lists(st.integers(4, 23), min_size=1, max_size=1),
    ),
    min_size=1, max_size=6,
)
decoding_configs = st.builds(
    DecodingConfig,
    iad_min_ngram=st.integers(1, 2), iad_max_ngram=st.integers(2, 4),
    iad_pass_tokens=st.integers(0, 40), iad_reentry=st.sampled_from(["unique", "nearest", "expected"]),
    iad_draft_length=st.sampled_from(["auto", "source", "adaptive"]),
    jacobi_block_size=st.integers(1, 6), jacobi_parallel_length=st.one_of(st.none(), st.integers(0, 12)),
    lookahead_window=st.integers(1, 5), lookahead_ngram=st.integers(2, 4), lookahead_guesses=st.integers(0, 5),
    lookahead_pool=st.integers(0, 6), self_draft_steps=st.integers(1, 30),
    draft_precision=st.sampled_from(["auto", "float32", "bfloat16", "int8"]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    algorithm=st.sampled_from(LOSSLESS),
    decoding=decoding_configs,
    seed=st.integers(0, 10_000),
    layers=st.integers(1, 2),
    embed_dim=st.sampled_from([8, 16, 32]),
    learned_positions=st.booleans(),
    eos_bias=st.floats(-1.0, 3.0),
    batch=sentences,
    max_len_b=st.integers(1, 30),
    min_len=st.integers(0, 3),
    unkpen=st.sampled_from([0.0, 2.0, -2.0]),
    lenpen=st.sampled_from([1.0, 0.5]),
    block_heads=st.integers(2, 5),
    zero_heads=st.booleans(),
    identity_first_head=st.booleans(),
)
def test_lossless_algorithms_equal_beam_one(algorithm, decoding, seed, layers, embed_dim, learned_positions,
                                            eos_bias, batch, max_len_b, min_len, unkpen, lenpen, block_heads,
                                            zero_heads, identity_first_head):
    dictionary = make_dictionary(20)
    model = model_for(algorithm, dictionary, block_heads, zero_heads, identity_first_head, seed=seed, layers=layers,
                      embed_dim=embed_dim, eos_bias=eos_bias, learned_positions=learned_positions)
    min_len = min(min_len, max_len_b)
    collated = make_batch(dictionary, batch)
    generation = dict(max_len_b=max_len_b, min_len=min_len, unkpen=unkpen, lenpen=lenpen)
    expected = fairseq_beam_one([model], dictionary, collated, **generation)
    actual, stats = plugin(algorithm, [model], dictionary, collated, decoding, **generation)
    assert_same_hypotheses(expected, actual)
    assert stats.sentences == len(batch) and 1 <= stats.iterations <= stats.tokens


@pytest.mark.parametrize("algorithm", LOSSLESS)
def test_batch_output_equals_single_sentence_output(algorithm):
    dictionary = make_dictionary(20)
    model = model_for(algorithm, dictionary, zero_heads=True, seed=3, eos_bias=1.5)
    batch = [[4, 5, 6], [7], [8, 9, 10, 11, 12, 13, 14], [5, 5, 5, 5], [6, 7, 6, 7, 6, 7, 8]]
    collated = make_batch(dictionary, batch)
    together, _ = plugin(algorithm, [model], dictionary, collated, max_len_b=25)
    for sentence_id, hypos in zip(collated["id"].tolist(), together):
        sentence = batch[sentence_id]  # the collater sorts the batch by source length
        alone, _ = plugin(algorithm, [model], dictionary, make_batch(dictionary, [sentence]), max_len_b=25)
        assert hypos[0]["tokens"].tolist() == alone[0][0]["tokens"].tolist()


@pytest.mark.parametrize("seed", range(4))
def test_adaptive_input_copy_drafts_equal_beam_one_in_padded_batches(seed):
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=seed, eos_bias=1.0)
    batch = make_batch(dictionary, [[4, 5, 6, 7, 8, 9, 10, 11], [7], [5, 5, 5, 5, 6], [6, 7, 6, 7, 6, 7, 8, 9, 4]])
    decoding = DecodingConfig(iad_draft_length="adaptive")
    actual, stats = plugin("iad", [model], dictionary, batch, decoding, max_len_b=30)
    assert_same_hypotheses(fairseq_beam_one([model], dictionary, batch, max_len_b=30), actual)
    assert stats.sentences == 4


@pytest.mark.parametrize("algorithm", LOSSLESS)
def test_eos_on_first_step_and_forced_max_length(algorithm):
    dictionary = make_dictionary(20)
    stops_at_once = model_for(algorithm, dictionary, seed=5, eos_bias=50.0)
    never_stops = model_for(algorithm, dictionary, zero_heads=True, seed=5, eos_bias=-50.0)
    batch = make_batch(dictionary, [[4, 5], [6, 7, 8]])
    cases = [(stops_at_once, dict(min_len=0), 1), (stops_at_once, {}, 2), (never_stops, dict(max_len_b=7), 8),
             (stops_at_once, dict(min_len=4), 5)]
    for model, generation, length in cases:
        actual, _ = plugin(algorithm, [model], dictionary, batch, **generation)
        assert_same_hypotheses(fairseq_beam_one([model], dictionary, batch, **generation), actual)
        assert all(len(h[0]["tokens"]) == length for h in actual)


@pytest.mark.parametrize("algorithm", LOSSLESS)
def test_max_len_a_follows_the_padded_source_width_like_fairseq(algorithm):
    dictionary = make_dictionary(20)
    model = model_for(algorithm, dictionary, seed=2, eos_bias=-50.0)
    batch = make_batch(dictionary, [[4] * 9, [5, 6]])
    generation = dict(max_len_a=0.5, max_len_b=2)
    actual, _ = plugin(algorithm, [model], dictionary, batch, **generation)
    assert_same_hypotheses(fairseq_beam_one([model], dictionary, batch, **generation), actual)


@pytest.mark.parametrize("algorithm", LOSSLESS)
def test_ensemble_and_temperature(algorithm):
    dictionary = make_dictionary(20)
    models = [model_for(algorithm, dictionary, seed=s, eos_bias=1.0) for s in (11, 12)]
    batch = make_batch(dictionary, [[4, 5, 6, 7], [8, 9]])
    generation = dict(max_len_b=20, temperature=0.7)
    actual, _ = plugin(algorithm, models, dictionary, batch, **generation)
    assert_same_hypotheses(fairseq_beam_one(models, dictionary, batch, **generation), actual)


@pytest.mark.parametrize("option, value", [("sampling", True), ("no_repeat_ngram_size", 2),
                                           ("match_source_len", True), ("prefix_size", 1)])
def test_search_options_greedy_cannot_honour_are_refused(option, value):
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary)
    args = argparse.Namespace(**dict(GENERATION_DEFAULTS, **{option: value}))
    with pytest.raises(ValueError, match="use --gen-algo fairseq"):
        build_generator("iad", [model], dictionary, args, None)


def test_min_len_beyond_max_len_is_refused():
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary)
    generator = build_generator("greedy", [model], dictionary,
                                argparse.Namespace(**dict(GENERATION_DEFAULTS, min_len=9, max_len_b=5)), None)
    with pytest.raises(ValueError, match="--min-len 9 is larger"):
        generator.generate([model], make_batch(dictionary, [[4, 5]]))


def test_block_size_beyond_the_model_positions_is_refused():
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, max_positions=16)
    with pytest.raises(ValueError, match="--jacobi-block-size 16 does not fit the model's 16 target positions"):
        build_generator("gs-jacobi", [model], dictionary, argparse.Namespace(**GENERATION_DEFAULTS),
                        DecodingConfig(jacobi_block_size=16))
