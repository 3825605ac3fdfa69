"""The ``self-draft`` drafter: the verifier's decoder in low precision drafting over the verifier's cache."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pardec_fairseq.decoding import DecodingConfig
from pardec_fairseq.decoding.drafters.self_draft import SelfDrafter
from pardec_fairseq.decoding.engine import DecodingState
from pardec_fairseq.decoding.fast_verifier import FastVerifier
from pardec_fairseq.decoding.options import DecodingOptions
from test_lossless_matches_fairseq import assert_same_hypotheses, fairseq_beam_one, plugin, sentences
from tiny import build_transformer, make_batch, make_dictionary


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), layers=st.integers(1, 3), embed_dim=st.sampled_from([8, 16, 32]),
       learned_positions=st.booleans(), normalize_before=st.booleans(), eos_bias=st.floats(-2.0, 3.0),
       batch=sentences, max_len_b=st.integers(1, 30), steps=st.integers(1, 30),
       precision=st.sampled_from(["auto", "float32", "bfloat16", "int8"]))
def test_self_draft_equals_beam_one(seed, layers, embed_dim, learned_positions, normalize_before, eos_bias, batch,
                                    max_len_b, steps, precision):
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=seed, layers=layers, embed_dim=embed_dim, eos_bias=eos_bias,
                              learned_positions=learned_positions, decoder_normalize_before=normalize_before,
                              encoder_normalize_before=normalize_before)
    collated = make_batch(dictionary, batch)
    decoding = DecodingConfig(self_draft_steps=steps, draft_precision=precision)
    actual, stats = plugin("self-draft", [model], dictionary, collated, decoding, max_len_b=max_len_b)
    assert_same_hypotheses(fairseq_beam_one([model], dictionary, collated, max_len_b=max_len_b), actual)
    assert stats.sentences == len(batch)


@pytest.mark.parametrize("steps", [1, 3, 6, 24])
def test_float32_self_drafts_are_the_verifiers_next_tokens(steps):
    """In float32 the drafter computes what the verifier does, so (but for rounding) every draft is
    kept: a pass keeps its drafted tokens and the verifier's next one."""
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=11, layers=2, embed_dim=32, eos_bias=-50.0)
    collated = make_batch(dictionary, [[4, 5, 6, 7], [8, 9], [10, 11, 12, 13, 14, 15]])
    decoding = DecodingConfig(self_draft_steps=steps, draft_precision="float32")
    actual, stats = plugin("self-draft", [model], dictionary, collated, decoding, max_len_b=40)
    assert_same_hypotheses(fairseq_beam_one([model], dictionary, collated, max_len_b=40), actual)
    # 41 tokens a sentence (EOS forced at the limit): the passes a sentence keeping steps + 1 tokens each
    assert stats.iterations == 3 * -(-41 // (steps + 1))


def test_a_row_stops_drafting_at_its_eos():
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=2, eos_bias=50.0)
    batch = make_batch(dictionary, [[4, 5, 6], [7, 8]])
    verifier = FastVerifier([model], dictionary, DecodingOptions(max_len_b=20))
    cache = verifier.start(batch["net_input"], 20)
    drafter = SelfDrafter(model.decoder, "float32", steps=5)
    drafter.begin(batch["net_input"], 20, verifier.encoder_states(cache), cache)
    proposal = drafter.propose(DecodingState.begin(2, 20, dictionary.eos(), dictionary.pad(), torch.device("cpu")))
    assert proposal.tokens.tolist() == [[dictionary.eos()]] * 2 and proposal.lengths.tolist() == [1, 1]


def test_self_draft_refuses_what_it_cannot_run():
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=0)
    with pytest.raises(ValueError, match="--self-draft-steps 0"):
        SelfDrafter(model.decoder, "int8", steps=0)
    batch = make_batch(dictionary, [[4, 5]])
    with pytest.raises(ValueError, match="--verifier fast"):
        plugin("self-draft", [model], dictionary, batch, DecodingConfig(verifier="fairseq"), max_len_b=5)
