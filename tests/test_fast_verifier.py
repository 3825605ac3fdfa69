"""The fast verifier path (decoder and encoder) gives fairseq's numbers on every option stock
transformer checkpoints carry, falls back to the fairseq path (with a notice) for the rest, and
follows weights that training changes."""
import argparse
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pardec_fairseq.decoding import DecodingConfig, build_generator, compiled_layers
from pardec_fairseq.decoding.compiled_layers import CompiledPass
from pardec_fairseq.decoding.fairseq_verifier import FairseqVerifier
from pardec_fairseq.decoding.fast_encoder import FastEncoder, fast_encoder_obstacle
from pardec_fairseq.decoding.fast_layers import EncoderKeysValues
from pardec_fairseq.decoding.fast_verifier import FastDecoder, FastVerifier
from pardec_fairseq.decoding.options import DecodingOptions
from pardec_fairseq.decoding.proposals import DraftTree, Proposal
from pardec_fairseq.decoding.registry import build_verifier
from pardec_fairseq.models.decoder_steps import encoder_states
from test_lossless_matches_fairseq import assert_same_hypotheses, fairseq_beam_one, plugin, sentences
from tiny import build_transformer, make_batch, make_dictionary, torch_on_threads

SHARING = {"all": dict(share_all_embeddings=True),
           "decoder input and output": dict(share_all_embeddings=False, share_decoder_input_output_embed=True),
           "none": dict(share_all_embeddings=False, share_decoder_input_output_embed=False)}


def with_project_in(model, input_dim, seed):
    """Give the decoder token embeddings of another size and fairseq's ``project_in_dim`` (no stock
    architecture flag builds it, but the decoder runs it whenever the sizes differ)."""
    decoder = model.decoder
    generator = torch.Generator().manual_seed(seed)
    vocab, embed_dim = decoder.embed_tokens.weight.shape
    embed = torch.nn.Embedding(vocab, input_dim, padding_idx=decoder.padding_idx)
    project = torch.nn.Linear(input_dim, embed_dim, bias=False)
    with torch.no_grad():
        embed.weight.copy_(torch.randn(vocab, input_dim, generator=generator))
        project.weight.copy_(torch.randn(embed_dim, input_dim, generator=generator) / input_dim ** 0.5)
    decoder.embed_tokens, decoder.project_in_dim = embed, project
    return model


architectures = st.fixed_dictionaries({
    "decoder_normalize_before": st.booleans(),
    "encoder_normalize_before": st.booleans(),
    "learned_positions": st.booleans(),
    "no_token_positional_embeddings": st.booleans(),
    "no_scale_embedding": st.booleans(),
    "layernorm_embedding": st.booleans(),
    "activation_fn": st.sampled_from(["relu", "gelu"]),
    "no_cross_attention": st.booleans(),
})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(architecture=architectures, sharing=st.sampled_from(sorted(SHARING)), project_out=st.booleans(),
       project_in=st.booleans(), ensemble=st.integers(1, 2), seed=st.integers(0, 10_000), layers=st.integers(1, 3),
       embed_dim=st.sampled_from([8, 16, 32, 128]), heads=st.sampled_from([1, 2, 4]), eos_bias=st.floats(-1.0, 3.0),
       algorithm=st.sampled_from(["greedy", "iad", "jacobi", "gs-jacobi"]), batch=sentences,
       left_pad=st.booleans(), max_len_a=st.sampled_from([0.0, 0.5, 1.2]), max_len_b=st.integers(1, 20),
       min_len=st.integers(0, 3), unkpen=st.sampled_from([0.0, 2.0, -2.0]),
       temperature=st.sampled_from([1.0, 0.7, 1.5]), lenpen=st.sampled_from([1.0, 0.5]))
def test_fast_path_equals_beam_one_on_every_supported_option(
        architecture, sharing, project_out, project_in, ensemble, seed, layers, embed_dim, heads, eos_bias,
        algorithm, batch, left_pad, max_len_a, max_len_b, min_len, unkpen, temperature, lenpen):
    dictionary = make_dictionary(20)
    options = dict(architecture, **SHARING[sharing])
    if project_out and sharing == "none":  # a shared output projection has the embeddings' size
        options["decoder_output_dim"] = embed_dim + 4
    models = []
    for member in range(ensemble):
        model = build_transformer(dictionary, seed=seed + member, layers=layers, embed_dim=embed_dim, heads=heads,
                                  eos_bias=eos_bias, **options)
        if project_in and sharing != "all":
            with_project_in(model, embed_dim + 2, seed + member)
        models.append(model)
    collated = make_batch(dictionary, batch, left_pad_source=left_pad)
    generation = dict(max_len_a=max_len_a, max_len_b=max_len_b, min_len=min(min_len, max_len_b), unkpen=unkpen,
                      temperature=temperature, lenpen=lenpen)
    expected = fairseq_beam_one(models, dictionary, collated, **generation)
    assert isinstance(build_verifier("fast", models, dictionary, DecodingOptions()), FastVerifier)
    actual, _ = plugin(algorithm, models, dictionary, collated, DecodingConfig(verifier="fast"), **generation)
    assert_same_hypotheses(expected, actual, tolerance=1e-4)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), rows=st.integers(1, 6), min_len=st.integers(0, 3),
       unk_penalty=st.sampled_from([0.0, 2.0, -2.0]), odd_rows=st.lists(st.sampled_from(["nan", "inf", "-inf", "low"]),
                                                                       max_size=3))
def test_the_compiled_log_probabilities_are_fairseqs_arithmetic_in_torch(seed, rows, min_len, unk_penalty, odd_rows):
    """One model's log-probabilities on a CPU come from one compiled call; they agree with the torch
    operations (fairseq's log-softmax, then NaN, pad, unknown-word and length rules) within 1e-5, every
    -inf in its place, rows holding a NaN or an infinity included."""
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=seed, layers=1, embed_dim=16)
    verifier = FastVerifier([model], dictionary, DecodingOptions(min_len=min_len, unk_penalty=unk_penalty))
    assert verifier.compiled_log_probs
    x = torch.randn(2, rows, 16, generator=torch.Generator().manual_seed(seed))
    logits = verifier.logits(0, x)
    for row, odd in enumerate(odd_rows[:rows]):  # rows the log-softmax turns into NaN, or rows with -inf words
        logits[0, row, 3] = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "low": -1e30}[odd]
    verifier.logits = lambda model, features: logits.clone()
    steps = torch.arange(rows).repeat(2, 1) + torch.tensor([[0], [4]])
    compiled = verifier.log_probs([x], steps, 5)
    verifier.compiled_log_probs = False
    expected = verifier.log_probs([x], steps, 5)
    assert torch.equal(compiled.isinf(), expected.isinf()) and not compiled.isnan().any()
    torch.testing.assert_close(compiled, expected, rtol=1e-5, atol=1e-5)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), rows=st.integers(1, 5), data=st.data(),
       pre_norm=st.booleans(), learned_positions=st.booleans(), compiled=st.booleans(),
       embed_dim=st.sampled_from([16, 128]))
def test_fast_pass_scores_equal_the_fairseq_pass_over_uneven_rows(seed, rows, data, pre_norm, learned_positions,
                                                                  compiled, embed_dim):
    """Two passes of several tokens, the first kept to a different length per row: every position
    the second pass scores has the fairseq path's log-probabilities and hidden states, also when the
    fast path runs the second pass's layers on demand (its first positions read, then some rows'
    next positions, then the rest), its layers compiled (a CPU) or as torch operations."""
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=seed, layers=2, learned_positions=learned_positions, embed_dim=embed_dim,
                              decoder_normalize_before=pre_norm)
    batch = make_batch(dictionary, [data.draw(st.lists(st.integers(4, 23), min_size=1, max_size=8))
                                    for _ in range(rows)])
    first_n, second_n = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6))
    kept = torch.tensor(data.draw(st.lists(st.integers(1, first_n), min_size=rows, max_size=rows)))
    generator = torch.Generator().manual_seed(seed)
    first = torch.randint(4, 24, (rows, first_n), generator=generator)
    second = torch.randint(4, 24, (rows, second_n), generator=generator)
    max_len = first_n + second_n + 2
    results = []
    for verifier in (FastVerifier, FairseqVerifier):
        verifier = verifier([model], dictionary, DecodingOptions())
        if isinstance(verifier, FastVerifier) and not compiled:
            verifier.fast_decoders[0].compiled = None
        with torch.no_grad():
            cache = verifier.start(batch["net_input"], max_len)
            zeros = torch.zeros(rows, dtype=torch.long)
            verifier.score(cache, first, zeros, max_len)
            verifier.rollback(cache, zeros, kept, first_n)
            on_demand = isinstance(verifier, FastVerifier)
            scores = verifier.score(cache, second, kept, max_len, on_demand=on_demand)
            if on_demand:
                first_stop = min(2, second_n)
                first_positions = scores.span(0, first_stop)
                some = torch.tensor(sorted(data.draw(st.sets(st.integers(0, rows - 1), min_size=1))))
                next_stop = min(first_stop + 2, second_n)
                next_positions = scores.span(first_stop, next_stop, some) if next_stop > first_stop else None
                torch.testing.assert_close(scores.all()[:, :first_stop], first_positions)
                if next_positions is not None:
                    torch.testing.assert_close(scores.all()[some, first_stop:next_stop], next_positions)
            results.append((scores.all(), scores.hidden_states()))
    (fast_lprobs, fast_hidden), (reference_lprobs, reference_hidden) = results
    torch.testing.assert_close(fast_hidden, reference_hidden, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fast_lprobs, reference_lprobs, rtol=1e-4, atol=1e-5)


class ScaledEmbedding(torch.nn.Module):
    """Token embeddings that are not an ``nn.Embedding`` (as a subclass's decoder may bring)."""

    def __init__(self, embedding):
        super().__init__()
        self.embedding, self.embedding_dim, self.padding_idx = embedding, embedding.embedding_dim, embedding.padding_idx

    def forward(self, tokens):
        return 0.5 * self.embedding(tokens)


@pytest.mark.parametrize("option, value, flag", [
    ("scale_attn", True, "--scale-attn"), ("scale_fc", True, "--scale-fc"), ("scale_heads", True, "--scale-heads"),
    ("scale_resids", True, "--scale-resids"), ("quant_noise_pq", 0.1, "quant-noise"),
    ("embed_tokens", ScaledEmbedding, "ScaledEmbedding token embeddings"),
    ("encoder_attn", None, "decoder layers of which only some attend to the encoder")])
def test_options_the_fast_path_does_not_reproduce_decode_on_the_fairseq_path(option, value, flag, caplog):
    dictionary = make_dictionary(20)
    if option == "embed_tokens":
        model = build_transformer(dictionary, seed=4, eos_bias=1.0, share_all_embeddings=False)
        model.decoder.embed_tokens = value(model.decoder.embed_tokens)
    elif option == "encoder_attn":  # a decoder whose second layer does without (fairseq's layer skips it)
        model = build_transformer(dictionary, seed=4, eos_bias=1.0, layers=2)
        model.decoder.layers[1].encoder_attn = value
    else:
        model = build_transformer(dictionary, seed=4, eos_bias=1.0, **{option: value})
    collated = make_batch(dictionary, [[4, 5, 6], [7, 8]])
    with caplog.at_level(logging.WARNING):
        verifier = build_verifier("fast", [model], dictionary, DecodingOptions())
    assert isinstance(verifier, FairseqVerifier)
    assert f"--verifier fast does not reproduce models with {flag}: decoding on the fairseq path" in caplog.text
    actual, _ = plugin("greedy", [model], dictionary, collated, max_len_b=15)
    assert_same_hypotheses(fairseq_beam_one([model], dictionary, collated, max_len_b=15), actual)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(architecture=architectures, seed=st.integers(0, 10_000), rows=st.integers(1, 4), data=st.data(),
       tree=st.booleans())
def test_the_compiled_layers_compute_what_the_torch_layers_compute(architecture, seed, rows, data, tree):
    """A pass of several tokens over rows cached to different lengths, a chain or a random tree: the
    same features and the same cache columns as the torch layers."""
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=seed, layers=2, **architecture).eval()
    verifier = FastVerifier([model], dictionary, DecodingOptions())
    decoder = verifier.fast_decoders[0]
    batch = make_batch(dictionary, [data.draw(st.lists(st.integers(4, 23), min_size=1, max_size=8))
                                    for _ in range(rows)])
    prefix, drafted = data.draw(st.integers(1, 5)), data.draw(st.integers(0, 5))
    first = torch.tensor(data.draw(st.lists(st.integers(1, prefix), min_size=rows, max_size=rows)))
    generator = torch.Generator().manual_seed(seed)
    cached = torch.randint(4, 24, (rows, prefix), generator=generator)
    new = torch.randint(4, 24, (rows, drafted + 1), generator=generator)
    shape = None
    if tree:
        parents = torch.tensor([[data.draw(st.integers(0, j)) for j in range(drafted)] for _ in range(rows)],
                               dtype=torch.long).view(rows, drafted)
        shape = DraftTree.of(Proposal(tokens=new[:, 1:], lengths=torch.full((rows,), drafted), parents=parents))
    features, columns = {}, {}
    for path in ("compiled", "torch"):
        decoder.compiled = CompiledPass(decoder) if path == "compiled" else None
        with torch.no_grad():
            cache = verifier.start(batch["net_input"], prefix + drafted + 2)
            verifier.score(cache, cached, torch.zeros(rows, dtype=torch.long), prefix + drafted + 2)
            scores = verifier.score(cache, new, first, prefix + drafted + 2, shape)
        features[path] = scores.hidden_states()
        # the columns each row's passes wrote (the compiled path leaves the others unset)
        buffers = cache.caches[0].buffers
        columns[path] = [buffers[:, :, r, :, :max(prefix, int(first[r]) + drafted + 1)] for r in range(rows)]
    torch.testing.assert_close(features["compiled"], features["torch"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(columns["compiled"], columns["torch"], rtol=1e-5, atol=1e-5)


def test_the_compiled_exp_softmax_and_layer_norm_match_torch():
    """The compiled layers' own exp (a polynomial that vectorises) is within 2 ulp of exp over every
    float32 score at most 0 and 0 below float32's normal range; softmax and layer norm equal torch's."""
    scores = np.linspace(-87, 0, 200001, dtype=np.float32)
    exact = np.exp(scores.astype(np.float64))
    approximate = np.array([compiled_layers._exp(s) for s in scores[::50]] +
                           [compiled_layers._exp(np.float32(s)) for s in (-87.5, -200.0, -np.inf)])
    assert np.all(np.abs(approximate[:-3] - exact[::50]) <= 2 * np.spacing(exact[::50].astype(np.float32)))
    assert np.all(approximate[-3:] == 0)
    generator = np.random.default_rng(0)
    rows = (generator.standard_normal((40, 37)) * 8).astype(np.float32)
    rows[:, 30:] = -np.inf  # masked columns
    softmax = rows.copy()
    compiled_layers._softmax_rows(softmax)
    np.testing.assert_allclose(softmax, torch.softmax(torch.from_numpy(rows), -1).numpy(), rtol=1e-5, atol=1e-7)
    x = (generator.standard_normal((9, 256)) * 3 + 1).astype(np.float32)
    weight, bias = generator.standard_normal((2, 256)).astype(np.float32)
    expected = torch.nn.functional.layer_norm(torch.from_numpy(x), (256,), torch.from_numpy(weight),
                                              torch.from_numpy(bias), 1e-5)
    np.testing.assert_allclose(compiled_layers.norm_rows(x, weight, bias, np.float32(1e-5)), expected.numpy(),
                               rtol=1e-5, atol=1e-5)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(architecture=architectures, seed=st.integers(0, 10_000), layers=st.integers(1, 3),
       heads=st.sampled_from([1, 2, 4]), embed_dim=st.sampled_from([16, 128]), batch=sentences, left_pad=st.booleans(),
       compiled=st.booleans())
def test_the_fast_encoder_computes_what_fairseqs_encoder_computes(architecture, seed, layers, heads, embed_dim, batch,
                                                                  left_pad, compiled):
    """Every state, padded positions included, and the padding mask (``None`` when nothing is padded), with
    the layers compiled (a CPU; heads of 64 dimensions weigh their values on the vector kernel) or as
    torch operations (elsewhere)."""
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=seed, layers=layers, heads=heads, embed_dim=embed_dim, **architecture)
    net_input = make_batch(dictionary, batch, left_pad_source=left_pad)["net_input"]
    assert fast_encoder_obstacle(model.encoder) is None
    with torch.no_grad():
        reference, reference_padding = encoder_states(model.encoder(**net_input))
        encoder = FastEncoder(model.encoder)
        assert encoder.compiled is not None
        if not compiled:
            encoder.compiled = None
        states, padding = encoder(net_input["src_tokens"])
    torch.testing.assert_close(states, reference.transpose(0, 1), rtol=1e-5, atol=1e-5)
    if reference_padding.any():
        assert torch.equal(padding, reference_padding)
    else:
        assert padding is None


def test_a_source_past_the_sinusoidal_table_is_encoded_as_fairseq_encodes_it():
    """fairseq's sinusoidal table grows on the fly for a source longer than the model's limit; the
    compiled call hands such a source to the torch path, which grows it the same way."""
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=3, layers=2, embed_dim=128, heads=2, max_positions=6)
    src_tokens = make_batch(dictionary, [list(range(4, 16)), list(range(5, 9))])["net_input"]["src_tokens"]
    with torch.no_grad():
        encoder = FastEncoder(model.encoder)
        assert encoder.compiled is not None and src_tokens.size(1) + 2 > encoder.position_table.shape[0]
        states, padding = encoder(src_tokens)
        reference, reference_padding = encoder_states(model.encoder(src_tokens, torch.tensor([12, 4])))
    torch.testing.assert_close(states, reference.transpose(0, 1), rtol=1e-5, atol=1e-5)
    assert torch.equal(padding, reference_padding)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(1, 3), rows=st.integers(1, 4), src=st.integers(1, 40))
def test_the_encoder_keys_and_values_of_all_layers_in_one_call_equal_each_layers_own(seed, layers, rows, src):
    """``EncoderKeysValues`` writes each layer's keys and values in attention's layout, bit for bit what
    each layer's product and torch's reshaping give: in its compiled call, and in torch where the states
    outnumber the kernel's rows."""
    model = build_transformer(make_dictionary(20), seed=seed, layers=layers, embed_dim=128, heads=2)
    enc = torch.randn(rows, src, 128, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        decoder_layers = FastDecoder(model.decoder).layers
        encoder_kv = EncoderKeysValues(decoder_layers)(enc)
        assert encoder_kv.shape == (layers, 2, rows, 2, src, 64)
        for layer, layer_kv in zip(decoder_layers, encoder_kv):
            assert torch.equal(layer_kv, layer.encoder_keys_values(enc))


def test_one_compiled_signature_serves_decoders_of_any_number_of_layers():
    """The compiled calls read the layers' weights and the cache as arrays over the layers
    (``stacked_products``, ``FastCache.numpy_views``), so a decoder with more layers runs the code numba
    compiled for the first one (a tuple over the layers made each layer count a signature of its own, 10-20 s
    to compile for a drafting call)."""
    dictionary = make_dictionary(20)
    batch = make_batch(dictionary, [[4, 5, 6], [7, 8]])
    compiled = []
    for layers in (1, 3):
        verifier = build_transformer(dictionary, seed=layers, layers=layers)
        expected = fairseq_beam_one([verifier], dictionary, batch, max_len_b=5)
        actual, _ = plugin("greedy", [verifier], dictionary, batch, decoding=argparse.Namespace(verifier="fast"),
                           max_len_b=5)
        assert_same_hypotheses(expected, actual)
        compiled.append({function.__name__: set(function.signatures)
                         for function in (compiled_layers.pass_layers, compiled_layers.write_keys_values)})
    assert all(compiled[0][name] for name in compiled[0]), "both calls ran"
    assert compiled[1] == compiled[0]


def test_an_encoder_the_fast_path_does_not_reproduce_runs_through_fairseq(caplog):
    """The decoder stays on the fast path; only the encoder runs through fairseq's module."""
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=4, eos_bias=1.0, share_all_embeddings=False)
    model.encoder.embed_tokens = ScaledEmbedding(model.encoder.embed_tokens)
    collated = make_batch(dictionary, [[4, 5, 6], [7, 8]])
    with caplog.at_level(logging.INFO):
        verifier = build_verifier("fast", [model], dictionary, DecodingOptions())
    assert isinstance(verifier, FastVerifier) and verifier.fast_encoders == [None]
    assert "the fast path runs fairseq's own encoder for a model with ScaledEmbedding source embeddings" in caplog.text
    actual, _ = plugin("greedy", [model], dictionary, collated, max_len_b=15)
    assert_same_hypotheses(fairseq_beam_one([model], dictionary, collated, max_len_b=15), actual)


def test_unknown_verifier_is_refused():
    dictionary = make_dictionary(20)
    with pytest.raises(ValueError, match="unknown --verifier 'slow' \\(fast or fairseq\\)"):
        build_verifier("slow", [build_transformer(dictionary)], dictionary, DecodingOptions())


def test_refresh_weights_follows_weights_changed_in_place():
    """``--eval-bleu`` builds the generator once; training then changes the weights in place."""
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=8, layers=2, eos_bias=0.5)
    collated = make_batch(dictionary, [[4, 5, 6, 7], [8, 9], [10]])
    generator = build_generator("greedy", [model], dictionary,
                                argparse.Namespace(max_len_b=20), DecodingConfig(verifier="fast"))
    before = generator.generate([model], collated)
    with torch.no_grad():
        for parameter in model.decoder.parameters():
            parameter.mul_(1.5)
    expected = fairseq_beam_one([model], dictionary, collated, max_len_b=20)
    assert [h[0]["tokens"].tolist() for h in before] != [h[0]["tokens"].tolist() for h in expected]
    generator.refresh_weights()
    assert_same_hypotheses(expected, generator.generate([model], collated))


@pytest.mark.parametrize("threads", [1, 2])
def test_the_compiled_products_use_as_many_threads_as_torch(threads):
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=8, layers=2)
    collated = make_batch(dictionary, [[4, 5, 6, 7], [8, 9]])
    generator = build_generator("greedy", [model], dictionary, argparse.Namespace(max_len_b=20),
                                DecodingConfig(verifier="fast"))
    with torch_on_threads(threads):
        hypotheses = generator.generate([model], collated)
        assert numba.get_num_threads() == min(threads, numba.config.NUMBA_NUM_THREADS)
    assert_same_hypotheses(fairseq_beam_one([model], dictionary, collated, max_len_b=20), hypotheses)


FRESH_PROCESS_DECODES_ON_ONE_THREAD = """
import argparse, numba, torch
from pardec_fairseq.decoding import DecodingConfig, build_generator
from tiny import build_transformer, make_batch, make_dictionary
torch.set_num_threads(1)
dictionary = make_dictionary(20)
model = build_transformer(dictionary, seed=8, layers=2)
generator = build_generator("greedy", [model], dictionary, argparse.Namespace(max_len_b=20),
                            DecodingConfig(verifier="fast"))
generator.generate([model], make_batch(dictionary, [[4, 5, 6, 7], [8, 9]]))
print(torch.get_num_threads(), numba.get_num_threads())
"""


@pytest.mark.slow
def test_decoding_leaves_torch_on_the_threads_it_was_given():
    """numba's first parallel call launches its OpenMP pool, which set the process's OpenMP threads (torch's)
    to all cores: a fresh process told to decode on one thread ran torch on two from its first batch on."""
    environment = {**os.environ, "NUMBA_NUM_THREADS": "2", "PYTHONPATH": str(Path(__file__).parent)}
    environment.pop("OMP_NUM_THREADS", None)
    result = subprocess.run([sys.executable, "-c", FRESH_PROCESS_DECODES_ON_ONE_THREAD], env=environment,
                            capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["1", "1"]


FRESH_PROCESS_ENCODES_BEFORE_ANY_VERIFIER = """
import torch
from pardec_fairseq.decoding.fast_encoder import FastEncoder
from tiny import build_transformer, make_batch, make_dictionary
dictionary = make_dictionary(20)
model = build_transformer(dictionary, seed=8, embed_dim=256, heads=4, ffn_dim=1024).eval()
encoded, _ = FastEncoder(model.encoder)(make_batch(dictionary, [list(range(4, 20))])["net_input"]["src_tokens"])
print(tuple(encoded.shape))
"""


@pytest.mark.slow
def test_the_compiled_layers_run_in_a_fresh_process_before_any_verifier_starts():
    """Products wide enough to be shared among numba's threads (d 256), in compiled layers loaded from
    numba's cache (the second process), called before a verifier started: numba's threads were not
    launched there, and the process crashed."""
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    for _ in range(2):  # the first may compile (which launches the threads), the second loads
        result = subprocess.run([sys.executable, "-c", FRESH_PROCESS_ENCODES_BEFORE_ANY_VERIFIER], env=environment,
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.strip() == "(1, 17, 256)"  # 16 tokens and EOS


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(architecture=architectures, seed=st.integers(0, 10_000), layers=st.integers(1, 3), heads=st.sampled_from([1, 2, 4]),
       source=st.lists(st.integers(4, 23), min_size=1, max_size=8), pad=st.integers(0, 3), prefix=st.integers(1, 6))
def test_a_compiled_one_token_pass_computes_what_the_torch_layers_compute(architecture, seed, layers, heads, source,
                                                                         pad, prefix):
    """A one-row, one-token pass runs compiled: the same features and the same cache columns as the torch
    layers, after a prefix the torch layers cached, with source padding or without."""
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=seed, layers=layers, heads=heads, **architecture).eval()
    verifier = FastVerifier([model], dictionary, DecodingOptions())
    decoder = verifier.fast_decoders[0]
    assert decoder.compiled is not None
    # a longer second sentence left-pads the first; the first is kept alone
    batch = make_batch(dictionary, [source, source + [5] * pad])
    tokens = torch.randint(4, 24, (1, prefix + 1), generator=torch.Generator().manual_seed(seed))
    features, columns = {}, {}
    for path in ("compiled", "torch"):
        decoder.compiled = CompiledPass(decoder) if path == "compiled" else None
        with torch.no_grad():
            cache = verifier.start(batch["net_input"], 12)
            verifier.keep_rows(cache, (batch["id"] == 0).nonzero().view(1))  # the shorter, padded source
            verifier.score(cache, tokens[:, :prefix], torch.tensor([0]), 12)
            scores = verifier.score(cache, tokens[:, prefix:], torch.tensor([prefix]), 12)
        features[path] = scores.hidden_states()
        columns[path] = cache.caches[0].buffers[:, :, :, :, prefix]
    torch.testing.assert_close(features["compiled"], features["torch"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(columns["compiled"], columns["torch"], rtol=1e-5, atol=1e-5)
