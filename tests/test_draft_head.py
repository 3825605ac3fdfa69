"""The draft head (``draft_head``): lossless whatever it drafts, its training targets, the same slot
features in training (every prefix at once) as in decoding (one prefix per call), and the CLI from
``fairseq-train`` to ``fairseq-generate --gen-algo gad``, refusing a head trained for another verifier."""
import argparse
import json
import math
import subprocess
from types import SimpleNamespace

import numba
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fairseq import checkpoint_utils
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from conftest import REPO, TINY_TRANSFORMER, USER_DIR, run_fairseq
from pardec_fairseq.criterions.draft_head_loss import DraftHeadLossCriterion, slot_targets
from pardec_fairseq.decoding.drafters import compiled_head
from pardec_fairseq.decoding.drafters.chain_length import ChainLength
from pardec_fairseq.decoding.drafters.draft_head import (MOST_CHAIN_STEPS, DraftHeadDrafter, chain_steps,
                                                         likeliest_nodes, likeliest_of_comb)
from pardec_fairseq.decoding.drafters.shortlist import LexicalShortlist
from pardec_fairseq.decoding import DecodingConfig, algorithms, build_generator, vector_kernels
from pardec_fairseq.decoding.config import decoding_config
from pardec_fairseq.decoding.acceptance import RelaxedAcceptance, in_top_k
from pardec_fairseq.decoding.engine import DecodingState
from pardec_fairseq.decoding.observers import LoopObserver
from pardec_fairseq.decoding.proposals import DraftTree
from pardec_fairseq.models.draft_head import DraftHead, DraftHeadModel, draft_head_architecture
from pardec_fairseq.tasks import verifier_memory
from pardec_fairseq.tasks.verifier_memory import VerifierMemory
from test_lossless_matches_fairseq import (GENERATION_DEFAULTS, assert_same_hypotheses, fairseq_beam_one, plugin,
                                          sentences)
from test_block_nat import hypotheses
from test_scripts import free_port, run_script
from tiny import build_transformer, make_batch, make_dictionary, torch_on_threads


def build_head(verifier, block_size=3, layers=1, seed=0, dropout=0.0, attention_dropout=0.0, input_layers=0):
    args = argparse.Namespace(head_layers=layers, head_attention_heads=2, head_ffn_dim=24, dropout=dropout,
                              head_attention_dropout=attention_dropout, head_input_layers=input_layers)
    draft_head_architecture(args)
    torch.manual_seed(seed)
    decoder = verifier.decoder
    head = DraftHead(args, block_size, decoder.embed_tokens.embedding_dim, decoder.output_embed_dim,
                     verifier.encoder.embed_tokens.embedding_dim)
    return DraftHeadModel(head, verifier.requires_grad_(False), input_layers=input_layers)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), block_size=st.integers(1, 6), layers=st.integers(1, 2),
       eos_bias=st.floats(-2.0, 3.0), batch=sentences, max_len_b=st.integers(1, 30), batch_of=st.integers(1, 6),
       verifier_path=st.sampled_from(["fast", "fairseq"]), pre_norm=st.booleans(), compiled=st.booleans(),
       draft_vocab=st.sampled_from([0, 3, 9]), precision=st.sampled_from(["float32", "bfloat16", "int8"]),
       steps=st.sampled_from([None, 1, 2, 3]), shortlisted=st.booleans(),
       tree=st.sampled_from([(1, 0.0, 0, 0), (2, 0.0, 0, 0), (3, 0.2, 0, 0), (1, 0.3, 0, 0), (2, 0.0, 3, 0),
                             (1, 0.0, 0, 1), (1, 0.0, 0, 2)]))
def test_decoding_with_an_untrained_head_equals_fairseq_greedy(seed, block_size, layers, eos_bias, batch, max_len_b,
                                                               batch_of, verifier_path, pre_norm, compiled,
                                                               draft_vocab, precision, steps, shortlisted, tree):
    """``tree``: branches, least path probability, nodes verified and runner-up leaves (at most the steps
    drafted), for a one-slot head (a tree needs the fast verifier); ``shortlisted``: with some first words,
    a random shortlist."""
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=seed, layers=2, eos_bias=eos_bias,
                                 decoder_normalize_before=pre_norm, encoder_normalize_before=pre_norm)
    collated = make_batch(dictionary, (batch * batch_of)[:max(len(batch), batch_of)])
    expected = fairseq_beam_one([verifier], dictionary, collated, max_len_b=max_len_b)
    branches, least_probability, nodes, leaves = tree if block_size == 1 else (1, 0.0, 0, 0)
    leaves = min(leaves, 3 if steps is None else steps)  # leaves go beside drafted tokens
    verifier_path = "fast" if branches > 1 or leaves else verifier_path
    drafter = DraftHeadDrafter(build_head(verifier, block_size, layers, seed + 1).eval(), draft_vocab=draft_vocab,
                               precision=precision, steps=steps, branches=branches,
                               least_probability=least_probability, nodes=nodes, leaves=leaves,
                               shortlist=shortlist_of(dictionary, draft_vocab, seed) if shortlisted and draft_vocab
                               else None)
    assert drafter.compiled is not None
    if not compiled:  # the head's layers through torch, as on a GPU
        drafter.compiled = drafter.compiled_head = None
    decoding = SimpleNamespace(verifier=verifier_path)
    actual, stats = plugin("greedy", [verifier], dictionary, collated, decoding=decoding, max_len_b=max_len_b,
                           drafter=drafter)
    assert_same_hypotheses(expected, actual)
    assert stats.iterations <= stats.tokens


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), block_size=st.integers(1, 4), input_layers=st.integers(1, 2),
       eos_bias=st.floats(-2.0, 3.0), batch=sentences, max_len_b=st.integers(1, 30), batch_of=st.integers(1, 6),
       pre_norm=st.booleans(), learned_positions=st.booleans(), draft_vocab=st.sampled_from([0, 9]),
       precision=st.sampled_from(["float32", "int8"]), steps=st.sampled_from([None, 1, 2, 4]),
       leaves=st.sampled_from([None, 0, 1, 2]))
def test_a_head_reading_tokens_through_the_verifiers_first_layers_decodes_as_fairseq_greedy(
        seed, block_size, input_layers, eos_bias, batch, max_len_b, batch_of, pre_norm, learned_positions,
        draft_vocab, precision, steps, leaves):
    """The drafted tokens' keys and values, written into the verifier's cache of its first layers, never
    change what it computes; the tokens are fairseq's greedy search's, batches with padding included."""
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=seed, layers=2, eos_bias=eos_bias,
                                 learned_positions=learned_positions, decoder_normalize_before=pre_norm,
                                 encoder_normalize_before=pre_norm)
    collated = make_batch(dictionary, (batch * batch_of)[:max(len(batch), batch_of)])
    expected = fairseq_beam_one([verifier], dictionary, collated, max_len_b=max_len_b)
    if block_size > 1 or (steps is not None and leaves is not None and leaves > steps):
        leaves = 0  # leaves go beside the tokens of a one-slot head's chain
    model = build_head(verifier, block_size, 1, seed + 1, input_layers=input_layers).eval()
    drafter = DraftHeadDrafter(model, draft_vocab=draft_vocab, precision=precision, steps=steps, leaves=leaves)
    assert drafter.compiled_head.input_layers.count == input_layers
    actual, stats = plugin("greedy", [verifier], dictionary, collated, decoding=SimpleNamespace(verifier="fast"),
                           max_len_b=max_len_b, drafter=drafter)
    assert_same_hypotheses(expected, actual)
    assert stats.iterations <= stats.tokens


def test_a_head_reading_tokens_through_the_verifiers_layers_is_refused_where_its_chain_does_not_run():
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=3, layers=2)
    model = build_head(verifier, block_size=1, input_layers=1).eval()
    for options in (dict(branches=2), dict(least_probability=0.2), dict(nodes=2)):
        with pytest.raises(ValueError, match="verifier's first 1 decoder layers .* only its compiled chain runs"):
            DraftHeadDrafter(model, **options)
    with pytest.raises(ValueError, match="--head-input-layers 3: the verifier has 2 decoder layers"):
        build_head(verifier, input_layers=3)
    drafter = DraftHeadDrafter(model)
    with pytest.raises(ValueError, match="over the fast verifier's cache: decode with --verifier fast"):
        plugin("greedy", [verifier], dictionary, make_batch(dictionary, [[4, 5, 6]]),
               decoding=SimpleNamespace(verifier="fairseq"), drafter=drafter)


def test_draft_vocab_projects_onto_the_dictionarys_first_words_alone():
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=5)
    model = build_head(verifier).eval()
    states = torch.randn(2, 3, verifier.decoder.output_embed_dim)
    all_words = DraftHeadDrafter(model).output_layer(states)
    first_words = DraftHeadDrafter(model, draft_vocab=7).output_layer(states)
    assert all_words.shape[-1] == len(dictionary) and first_words.shape[-1] == 7
    torch.testing.assert_close(first_words, all_words[..., :7])
    for words in (-1, len(dictionary) + 1):
        with pytest.raises(ValueError, match=rf"--draft-vocab {words} is not .* \(0 to {len(dictionary)}\)"):
            DraftHeadDrafter(model, draft_vocab=words)


def test_draft_vocab_is_refused_for_a_verifier_with_its_own_output_layer():
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=5)
    decoder = verifier.decoder

    class OwnOutputLayer(type(decoder)):
        def output_layer(self, features):
            return super().output_layer(features) * 2

    decoder.__class__ = OwnOutputLayer
    model = build_head(verifier).eval()
    states = torch.randn(1, 3, decoder.output_embed_dim)
    torch.testing.assert_close(DraftHeadDrafter(model).output_layer(states), decoder.output_layer(states))
    refusal = "--draft-vocab: .*OwnOutputLayer replaces fairseq's output layer.*drop --draft-vocab"
    with pytest.raises(ValueError, match=refusal):
        DraftHeadDrafter(model, draft_vocab=7)
    task = SimpleNamespace(verifier=verifier, cfg=SimpleNamespace(block_size=2, draft_vocab=7))
    args = argparse.Namespace()
    draft_head_architecture(args)
    with pytest.raises(ValueError, match=refusal):
        DraftHeadModel.build_model(args, task)


def shortlist_of(dictionary, first_words, seed=0):
    """A shortlist of random translations (two per source word, some none) for ``first_words`` first words."""
    table = np.random.default_rng(seed).integers(-1, len(dictionary), (len(dictionary), 2))
    return LexicalShortlist(table, np.arange(len(dictionary)), first_words, len(dictionary))


@pytest.mark.parametrize("layers, precision, steps, block_size, tree, shortlisted", [
    (1, "float32", 1, 3, (1, 0.0, 0), False), (2, "float32", 1, 3, (1, 0.0, 0), False),
    (2, "bfloat16", 1, 3, (1, 0.0, 0), False), (2, "float32", 3, 3, (1, 0.0, 0), False),
    (1, "bfloat16", 2, 3, (1, 0.0, 0), False), (1, "int8", 3, 1, (1, 0.0, 0), False),
    (1, "float32", 3, 1, (2, 0.0, 0), False), (2, "float32", 4, 1, (3, 0.05, 0), False),
    (1, "float32", 4, 1, (1, 0.1, 0), False), (1, "float32", 4, 1, (2, 0.0, 3), False),
    (1, "float32", 3, 1, (1, 0.0, 0, 2), False), (1, "int8", 2, 1, (1, 0.0, 0, 2), False),
    (2, "bfloat16", 1, 3, (1, 0.0, 0), True), (1, "int8", 3, 1, (1, 0.0, 0, 2), True),
    (1, "float32", 3, 1, (3, 0.0, 0), True)])
@torch.no_grad()
def test_the_compiled_drafting_call_drafts_and_remembers_as_the_torch_operations_do(layers, precision, steps,
                                                                                   block_size, tree, shortlisted):
    """``tree``: a one-slot head's branches, least path probability, nodes verified (trees and chains of
    per-row lengths) and runner-up leaves beside a chain; ``shortlisted``: drafting among the first 9
    words and a shortlist's."""
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=3, layers=2).eval()
    model = build_head(verifier, block_size=block_size, layers=layers, seed=4).eval()
    shortlist = shortlist_of(dictionary, 9) if shortlisted else None
    compiled, plain = (DraftHeadDrafter(model, precision=precision, steps=steps, branches=tree[0],
                                        least_probability=tree[1], nodes=tree[2], leaves=(tree + (0,))[3],
                                        draft_vocab=9 if shortlisted else 0, shortlist=shortlist)
                       for _ in range(2))
    assert compiled.compiled_head is not None
    plain.compiled_head = None
    batch = make_batch(dictionary, [[4, 5, 6, 7, 8], [9, 10], [11, 12, 13]])
    encoded = verifier.encoder(**batch["net_input"])
    encoded = (encoded["encoder_out"][0].transpose(0, 1), encoded["encoder_padding_mask"][0])
    state = DecodingState.begin(3, 20, dictionary.eos(), dictionary.pad(), torch.device("cpu"))
    state.tokens[:, 1:] = torch.randint(4, len(dictionary), state.tokens[:, 1:].shape)
    for drafter in (compiled, plain):
        drafter.begin(batch["net_input"], 20, encoded)
    generator = torch.Generator().manual_seed(5)
    # drafted tokens kept by each pass, per row; after the second pass the middle row leaves
    for accepted in ([0, 2, 1], [3, 0, 2], [1, 2], [0, 1], None):
        drafts = [drafter.propose(state) for drafter in (compiled, plain)]
        # the compiled call remembers the last pass's states first (the torch path did in ``update``)
        torch.testing.assert_close(compiled.last_state, plain.last_state)
        if tree == (1, 0.0, 0):
            assert drafts[0].tokens.shape == (state.lengths.size(0), block_size * steps) and drafts[0].parents is None
        for field in ("tokens", "lengths", "parents"):
            ours, torchs = getattr(drafts[0], field), getattr(drafts[1], field)
            assert (ours is None and torchs is None) or torch.equal(ours, torchs), field
        if drafts[1].parents is not None:  # the tree's shape, made in the compiled call or from the parents
            made, derived = DraftTree.of(drafts[0]), DraftTree.of_parents(drafts[1].parents)
            for field in ("parents", "depth", "sees"):
                assert torch.equal(getattr(made, field), getattr(derived, field)), field
        if shortlisted:  # the first words and the batch's shortlist's alone
            words = shortlist.words(batch["net_input"]["src_tokens"])
            assert torch.isin(drafts[0].tokens, torch.cat([torch.arange(9), torch.from_numpy(words)])).all()
        # what later calls wrote (the compiled call grows the buffers after rows left, so perhaps less)
        columns = min(compiled.cache.buffers.size(4), plain.cache.buffers.size(4))
        torch.testing.assert_close(compiled.cache.buffers[..., :columns, :], plain.cache.buffers[..., :columns, :])
        if accepted is None:
            break
        rows = len(accepted)
        states = torch.randn(rows, 4, verifier.decoder.output_embed_dim, generator=generator)
        scores = SimpleNamespace(hidden_states=lambda model: states)
        path = None  # a tree's verdict: the kept pass positions, gathered by each update
        if drafts[0].parents is not None:
            path = torch.stack([torch.randperm(4, generator=generator) for _ in range(rows)])[:, :max(accepted) + 1]
        verdict = SimpleNamespace(path=path, accepted=torch.tensor(accepted))
        for drafter in (compiled, plain):
            drafter.update(scores, verdict, state)
        state.lengths += verdict.accepted + 1
        if rows == 3 and accepted[0] == 3:
            keep = torch.tensor([0, 2])
            state.keep(keep)
            for drafter in (compiled, plain):
                drafter.keep_rows(keep)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_compiled_head_uses_as_many_threads_as_torch_whichever_verifier_runs(threads):
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=3, layers=2).eval()
    drafter = DraftHeadDrafter(build_head(verifier, block_size=3, seed=4).eval())
    assert drafter.compiled_head is not None
    collated = make_batch(dictionary, [[4, 5, 6, 7, 8], [9, 10]])
    with torch_on_threads(threads):
        actual, _ = plugin("greedy", [verifier], dictionary, collated, decoding=SimpleNamespace(verifier="fairseq"),
                           max_len_b=10, drafter=drafter)
        assert numba.get_num_threads() == min(threads, numba.config.NUMBA_NUM_THREADS)
        assert torch.get_num_threads() == threads
    assert_same_hypotheses(fairseq_beam_one([verifier], dictionary, collated, max_len_b=10), actual)


def test_slot_targets_are_the_next_tokens_after_each_prefix():
    pad = 1
    target = torch.tensor([[10, 11, 12, 2], [20, 2, pad, pad]])
    expected = torch.tensor([[[10, 11, 12], [11, 12, 2], [12, 2, pad], [2, pad, pad]],
                             [[20, 2, pad], [2, pad, pad], [pad, pad, pad], [pad, pad, pad]]])
    assert torch.equal(slot_targets(target, pad, 3), expected)


@pytest.mark.parametrize("compiled", [True, False])
def test_training_sees_every_prefix_as_decoding_does(compiled):
    """The slot features of prefix ``t`` in one training call equal the drafter's proposal after the
    verifier's greedy output's first ``t`` tokens (and do not depend on what follows them)."""
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=4, layers=2, eos_bias=-3.0).eval()
    model = build_head(verifier, block_size=3, layers=2, seed=5).eval()
    batch = make_batch(dictionary, [[4, 5, 6, 7], [8, 9]])
    output = fairseq_beam_one([verifier], dictionary, batch, max_len_b=8)
    row = 0
    tokens = output[row][0]["tokens"]
    net_input = batch["net_input"]
    prev_output = torch.cat([torch.tensor([dictionary.eos()]), tokens[:-1]]).unsqueeze(0)
    source = {"src_tokens": net_input["src_tokens"][row:row + 1], "src_lengths": net_input["src_lengths"][row:row + 1]}
    features, _ = model(**source, prev_output_tokens=prev_output)
    changed = prev_output.clone()
    changed[0, -1] = 7 if int(changed[0, -1]) != 7 else 8
    assert torch.allclose(model(**source, prev_output_tokens=changed)[0][0, :-1], features[0, :-1], atol=1e-6)

    drafter = DraftHeadDrafter(model)
    if not compiled:
        drafter.compiled = None
    generator = build_generator("greedy", [verifier], dictionary,
                                argparse.Namespace(**dict(GENERATION_DEFAULTS, max_len_b=8)), None, drafter=drafter)
    recorder = _SlotRecorder(drafter)
    generator.decoder.observers.append(recorder)
    assert generator.generate([verifier], batch)[row][0]["tokens"].tolist() == tokens.tolist()
    assert recorder.slots, "the drafter proposed"
    for t, slots in recorder.slots:
        assert torch.allclose(slots, features[0, t], atol=1e-5), t


@pytest.mark.parametrize("input_layers", [1, 2])
@torch.no_grad()
def test_a_head_reading_the_verifiers_layers_drafts_in_decoding_what_training_predicts(input_layers):
    """After each prefix of the verifier's greedy output, the compiled call's first drafted word is the
    training forward's top word there: decoding reads the token through the verifier's first layers
    as training does (``inner_states``)."""
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=4, layers=2, eos_bias=-3.0).eval()
    model = build_head(verifier, block_size=1, seed=5, input_layers=input_layers).eval()
    batch = make_batch(dictionary, [[4, 5, 6, 7]])
    tokens = fairseq_beam_one([verifier], dictionary, batch, max_len_b=10)[0][0]["tokens"]
    prev_output = torch.cat([torch.tensor([dictionary.eos()]), tokens[:-1]]).unsqueeze(0)
    net_input = batch["net_input"]
    features, _ = model(net_input["src_tokens"], net_input["src_lengths"], prev_output_tokens=prev_output)
    predicted = model.output_layer(features[0, :, 0]).argmax(-1)
    drafter = DraftHeadDrafter(model, steps=1, leaves=0)
    generator = build_generator("greedy", [verifier], dictionary,
                                argparse.Namespace(**dict(GENERATION_DEFAULTS, max_len_b=10)),
                                SimpleNamespace(verifier="fast"), drafter=drafter)
    recorder = _ProposalRecorder()
    generator.decoder.observers.append(recorder)
    assert generator.generate([verifier], batch)[0][0]["tokens"].tolist() == tokens.tolist()
    drafts = [(t, drafted[0]) for t, drafted, _ in recorder.proposals if drafted]  # none at the length limit
    assert len(drafts) > 1
    assert [word for _, word in drafts] == [int(predicted[t]) for t, _ in drafts]


def decoded_and_rolled_out(block_size, compiled, **drafting):
    """Decode one sentence with an untrained head drafting as ``drafting`` says, recording its proposals.
    Returns them and ``features_after(t, words)``: the head's training forward rolled out by hand after
    the output's first ``t`` tokens, one call per drafted word of ``words`` and one more, each call's
    features appended to the verifier's states of the prefix and its last slot's standing in for the
    state before the next word; the last call's features ``[block_size, d]``."""
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=6, layers=2, eos_bias=-3.0).eval()
    model = build_head(verifier, block_size=block_size, layers=1, seed=7).eval()
    head = model.head
    batch = make_batch(dictionary, [[4, 5, 6, 7]])
    drafter = DraftHeadDrafter(model, **drafting)
    if not compiled:
        drafter.compiled = drafter.compiled_head = None
    generator = build_generator("greedy", [verifier], dictionary,
                                argparse.Namespace(**dict(GENERATION_DEFAULTS, max_len_b=12)), None, drafter=drafter)
    recorder = _ProposalRecorder()
    generator.decoder.observers.append(recorder)
    tokens = generator.generate([verifier], batch)[0][0]["tokens"]
    prev_output = torch.cat([torch.tensor([dictionary.eos()]), tokens[:-1]]).unsqueeze(0)
    encoder_out = verifier.encoder(**batch["net_input"])
    states = verifier.decoder.extract_features(prev_output, encoder_out=encoder_out)[0][0]
    enc = encoder_out["encoder_out"][0].transpose(0, 1)
    encoder_keys = head.encoder_keys_values(enc)

    def features_after(t, words):
        memory, token, last = states[:t], prev_output[0, t], states[t - 1] if t else torch.zeros_like(states[0])
        for word in list(words) + [None]:
            x = head.slots(verifier.decoder.embed_tokens(token).view(1, 1, -1), last.view(1, 1, -1))[0]
            # a leading state no slot sees, so that an empty prefix has keys too
            keys = head.memory_keys_values(torch.cat([torch.zeros_like(states[:1]), memory]).unsqueeze(0))
            visible = torch.ones(1, 1, block_size, memory.size(0) + 1 + block_size, dtype=torch.bool)
            visible[..., 0] = False
            features = head(x, keys, visible, encoder_keys, torch.ones(1, 1, 1, enc.size(1), dtype=torch.bool))[0]
            memory, token, last = torch.cat([memory, features]), torch.tensor(0 if word is None else word), features[-1]
        return features

    assert len(recorder.proposals) > 1
    return recorder.proposals, features_after, model


@pytest.mark.parametrize("block_size, compiled", [(1, True), (1, False), (2, True)])
@torch.no_grad()
def test_each_drafting_step_goes_on_from_the_last_ones_features(block_size, compiled):
    """With ``steps`` calls per proposal, call ``j + 1`` reads the tokens and output features of call ``j``
    in place of the verifier's: the proposal after ``t`` tokens equals the head's training forward
    rolled out by hand, its features appended to the verifier's states of the prefix."""
    steps = 3
    proposals, features_after, model = decoded_and_rolled_out(block_size, compiled, steps=steps, leaves=0)
    for t, proposal, _ in proposals:
        expected = []
        for _ in range(steps):
            expected += model.output_layer(features_after(t, expected[block_size - 1::block_size])).argmax(-1).tolist()
        assert proposal == expected[:len(proposal)], t


@pytest.mark.parametrize("compiled, branches, least_probability", [(True, 2, 0.0), (False, 2, 0.0), (True, 3, 0.05),
                                                                     (False, 1, 0.05)])
@torch.no_grad()
def test_a_draft_tree_keeps_each_levels_likeliest_paths_rolled_out_by_hand(compiled, branches, least_probability):
    """Each level of a draft tree holds the ``branches`` likeliest of its parents' ``branches`` likeliest
    words, by the product of the head's probabilities along the path, those at least
    ``least_probability`` likely: the head's training forward rolled out by hand along each path (its
    features appended to the verifier's states of the prefix) gives the same tree."""
    steps = 3
    proposals, features_after, model = decoded_and_rolled_out(1, compiled, steps=steps, branches=branches,
                                                              least_probability=least_probability)
    for t, proposal, parents in proposals:
        level, nodes = [((), 0.0)], [()]  # paths from the root with their log-probabilities
        for _ in range(steps):
            candidates = []
            for path, path_log_prob in level:
                best = F.log_softmax(model.output_layer(features_after(t, path)[-1]).float(), -1).topk(branches)
                candidates += [(path + (int(word),), path_log_prob + float(value))
                               for value, word in zip(best.values, best.indices)]
            candidates.sort(key=lambda candidate: -candidate[1])
            level = [c for c in candidates[:branches] if c[1] >= math.log(max(least_probability, 1e-30))]
            nodes += [path for path, _ in level]
        expected = [path[-1] for path in nodes[1:]]
        if parents is None:  # a chain, cut where the output's length limit falls
            assert proposal == expected[:len(proposal)], t
        else:
            assert proposal == expected and parents == [nodes.index(path[:-1]) for path in nodes[1:]], t


def _compiled_likeliest_nodes(tokens, parents, path_log_probs, counts, nodes):
    return tuple(torch.from_numpy(part) for part in compiled_head._likeliest_nodes(
        tokens.numpy(), parents.numpy(), path_log_probs.numpy(), counts.numpy(), nodes))


@pytest.mark.parametrize("likeliest_nodes", [likeliest_nodes, _compiled_likeliest_nodes])
def test_a_draft_tree_cut_to_its_likeliest_nodes_keeps_their_order_and_parents(likeliest_nodes):
    # two rows: pass positions 1..5 (row 1: three nodes, then filler)
    words = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]])
    parents = torch.tensor([[0, 0, 1, 2, 1], [0, 1, 1, 0, 0]])
    path_log_probs = torch.tensor([[-0.1, -0.5, -0.3, -0.9, -0.2], [-0.4, -0.4, -0.6, 0.0, 0.0]])
    counts = torch.tensor([5, 3])
    kept_words, kept_parents, kept_counts = likeliest_nodes(words, parents, path_log_probs, counts, 3)
    # row 0 keeps positions 1, 3, 5 (words 5, 7, 9; 7 and 9 below 5, now at position 1);
    # row 1 keeps all three: its equally likely child (position 2) after its parent
    assert kept_words.tolist() == [[5, 7, 9], [10, 11, 12]]
    assert kept_parents.tolist() == [[0, 1, 1], [0, 1, 1]]
    assert kept_counts.tolist() == [3, 3]
    one = likeliest_nodes(words, parents, path_log_probs, counts, 1)
    assert one[0].tolist() == [[5], [10]] and one[1].tolist() == [[0], [0]] and one[2].tolist() == [1, 1]
    # row 1 has fewer nodes than kept: its filler comes last and counts not
    four = likeliest_nodes(words, parents, path_log_probs, counts, 4)
    assert four[0].tolist() == [[5, 6, 7, 9], [10, 11, 12, 0]] and four[1].tolist() == [[0, 0, 1, 1], [0, 1, 1, 0]]
    assert four[2].tolist() == [4, 3]


def _compiled_likeliest_of_comb(words, paths, nodes):
    return tuple(torch.from_numpy(part) for part in compiled_head._likeliest_of_comb(words.numpy(), paths.numpy(),
                                                                                     nodes))


@pytest.mark.parametrize("likeliest_of_comb", [likeliest_of_comb, _compiled_likeliest_of_comb])
def test_a_chains_likeliest_tokens_and_runner_ups_are_verified_chain_first(likeliest_of_comb):
    # three steps' tokens and runner-ups (token, runner-up of step 1, then of step 2, ...) with their paths
    words = torch.tensor([[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12], [13, 14, 15, 16, 17, 18]])
    paths = torch.tensor([[-0.1, -2.5, -0.2, -2.0, -0.3, -3.0],  # the whole chain and the second runner-up
                          [-0.5, -1.0, -1.2, -1.1, -2.5, -2.0],  # two runner-ups take the chain's last token's place
                          [0.0] * 6])  # all equal: each parent before its children
    tokens, parents = likeliest_of_comb(words, paths, 4)
    assert tokens.tolist() == [[1, 3, 5, 4], [7, 9, 8, 10], [13, 15, 14, 16]]
    assert parents.tolist() == [[0, 1, 2, 1], [0, 1, 0, 1], [0, 1, 0, 1]]


@pytest.mark.parametrize("verifier_path, relaxed, sentences, leaves", [
    ("fast", False, 1, 1), ("fast", False, 2, 0), ("fairseq", False, 1, 0), ("fast", True, 1, 0)])
@torch.no_grad()
def test_a_one_slot_head_verifies_one_runner_up_leaf_by_default_where_it_is_free(verifier_path, relaxed, sentences,
                                                                                leaves):
    """By default a one-slot head's chain has one runner-up leaf in batches of one sentence where the
    generator scores trees (the fast verifier, exact acceptance); in larger batches (of fewer tokens), on the
    fairseq path and with relaxed acceptance it is a chain; the output stays fairseq's."""
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=6, layers=2, eos_bias=-3.0).eval()
    drafter = DraftHeadDrafter(build_head(verifier, block_size=1, layers=1, seed=7).eval())
    assert not drafter.drafts_trees  # never refused for a tree it was not asked for
    batch = make_batch(dictionary, [[4, 5, 6, 7], [8, 9, 10]][:sentences])
    acceptance = RelaxedAcceptance(in_top_k(1)) if relaxed else None
    generator = build_generator("greedy", [verifier], dictionary,
                                argparse.Namespace(**dict(GENERATION_DEFAULTS, max_len_b=12)),
                                SimpleNamespace(verifier=verifier_path), drafter=drafter, acceptance=acceptance)
    recorder = _ProposalRecorder()
    generator.decoder.observers.append(recorder)
    actual = generator.generate([verifier], batch)
    # a chain is cut where the output's length limit falls, a tree is not: the chain's tokens and a leaf
    steps = chain_steps(sentences, leaves, torch.device("cpu"), ChainLength(MOST_CHAIN_STEPS))
    assert recorder.proposals and all((parents is None) == (leaves == 0) and
                                      (len(proposal) == steps + 1 if leaves else len(proposal) <= steps)
                                      for _, proposal, parents in recorder.proposals)
    if not relaxed:
        assert_same_hypotheses(fairseq_beam_one([verifier], dictionary, batch, max_len_b=12), actual)


class _ProposalRecorder(LoopObserver):
    """Each pass's proposal for a batch of one sentence, after how many accepted tokens."""

    def __init__(self):
        self.proposals = []

    def after_pass(self, state, proposal, scores, verdict):
        """The draft's tokens (and a tree's parents' pass positions) as lists."""
        length = int(proposal.lengths[0])
        parents = None if proposal.parents is None else proposal.parents[0, :length].tolist()
        self.proposals.append((int(state.lengths[0]), proposal.tokens[0, :length].tolist(), parents))


class _AcceptedRecorder(LoopObserver):
    """Each pass's drafted tokens kept, by row."""

    def __init__(self):
        self.accepted = []

    def after_pass(self, state, proposal, scores, verdict):
        self.accepted.append(verdict.accepted.numpy().copy())


@torch.no_grad()
def test_a_sentence_decoded_alone_drafts_the_chain_its_predecessors_passes_pay_for():
    """``--draft-head-steps`` unset: each pass of a sentence's chain without leaves on a CPU tells the
    drafter's ``ChainLength`` how many drafted tokens the verifier kept, and the next such sentence drafts the
    chain it then chooses; a batch of several sentences neither tells it nor follows it; outputs stay
    fairseq's."""
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=6, layers=2, eos_bias=-3.0).eval()
    drafter = DraftHeadDrafter(build_head(verifier, block_size=1, layers=1, seed=7).eval(), leaves=0)
    options = argparse.Namespace(**dict(GENERATION_DEFAULTS, max_len_b=12))
    generator = build_generator("greedy", [verifier], dictionary, options, SimpleNamespace(verifier="fast"),
                                drafter=drafter)
    recorder = _AcceptedRecorder()
    generator.decoder.observers.append(recorder)
    expected, chains = ChainLength(MOST_CHAIN_STEPS), []
    for source in ([4, 5, 6, 7], [8, 9, 10], [11, 12, 4, 5, 6], [7, 8]):
        batch, steps = make_batch(dictionary, [source]), expected.steps()
        recorder.accepted.clear()
        actual = generator.generate([verifier], batch)
        assert drafter.batch_steps == steps and recorder.accepted
        chains.append(steps)
        for accepted in recorder.accepted:
            expected.observe(accepted, steps)
        assert drafter.chain_length.keep_probabilities() == pytest.approx(expected.keep_probabilities())
        assert_same_hypotheses(fairseq_beam_one([verifier], dictionary, batch, max_len_b=12), actual)
    assert len(set(chains)) > 1  # the untrained head's drafts are mostly missed: its chain shortens
    learnt, batch = expected.keep_probabilities(), make_batch(dictionary, [[4, 5, 6], [7, 8]])
    actual = generator.generate([verifier], batch)
    assert drafter.batch_steps == max(1, vector_kernels.WIDEST_TILE // 2 - 1)
    assert drafter.chain_length.keep_probabilities() == pytest.approx(learnt)
    assert_same_hypotheses(fairseq_beam_one([verifier], dictionary, batch, max_len_b=12), actual)


class _SlotRecorder(LoopObserver):
    """After each pass (before the drafter sees it), the slot features the drafter proposed from,
    for the batch's first sentence."""

    def __init__(self, drafter):
        self.drafter, self.slots = drafter, []

    def after_pass(self, state, proposal, scores, verdict):
        first = (state.rows == 0).nonzero()
        if first.numel():
            row = int(first)
            slots = self.drafter.slot_features(state.last_tokens().view(-1), self.drafter.last_state, state.lengths)
            self.slots.append((int(state.lengths[row]), slots[row]))


def criterion_case(seed, targets):
    """For the criterion's tests: a one-layer verifier, a two-slot head on it, a batch of two sentences
    with ``targets`` and the task the criterion reads."""
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=seed, layers=1).eval()
    model = build_head(verifier, block_size=2).eval()
    batch = make_batch(dictionary, [[4, 5, 6], [7, 8]], targets=targets)
    return dictionary, verifier, model, batch, SimpleNamespace(target_dictionary=dictionary, verifier=verifier)


@pytest.mark.parametrize("input_layers", [0, 1])
def test_kept_verifier_states_are_the_verifiers_outputs_in_any_later_batch(input_layers):
    """``VerifierMemory`` keeps each sentence's outputs from the batch that computed them, and serves them in a
    batch of other sentences (other padding) as the verifier computes them there."""
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=3, layers=2).eval()
    model = build_head(verifier, block_size=2, input_layers=input_layers).eval()
    sources, targets = [[4, 5, 6], [7, 8], [9, 10, 11, 12, 13]], [[9, 10, 11], [12], [4, 5, 6, 7, 8, 9]]
    lengths = [len(s) + 1 for s in sources], [len(t) + 1 for t in targets]
    memory = VerifierMemory(*lengths, verifier.encoder.embed_tokens.embedding_dim, verifier.decoder.output_embed_dim,
                            dictionary.pad(), dictionary.pad(), "--keep-verifier-states",
                            verifier.decoder.embed_dim if input_layers else 0)
    calls = []

    def outputs(ids):
        batch = make_batch(dictionary, [sources[i] for i in ids], targets=[targets[i] for i in ids])
        net_input = batch["net_input"]

        def compute():
            calls.append(ids)
            return model.verifier_outputs(net_input["src_tokens"], net_input["src_lengths"],
                                          net_input["prev_output_tokens"])
        rows = torch.tensor(ids)[batch["id"]]  # the collater sorts the sentences by length
        return batch, memory.outputs(rows, net_input["src_tokens"], net_input["prev_output_tokens"], compute)

    outputs([0, 1])
    outputs([1, 2])  # sentence 2 is new: the batch is computed
    batch, kept = outputs([2, 0])
    assert calls == [[0, 1], [1, 2]]
    net_input = batch["net_input"]
    fresh = model.verifier_outputs(net_input["src_tokens"], net_input["src_lengths"], net_input["prev_output_tokens"])
    source, target = ~fresh.padding, net_input["prev_output_tokens"].ne(dictionary.pad())
    assert torch.equal(kept.padding, fresh.padding)
    assert torch.allclose(kept.encoder[source], fresh.encoder[source], atol=1e-6)
    assert torch.allclose(kept.states[target], fresh.states[target], atol=1e-6)
    if input_layers:
        assert torch.allclose(kept.inputs[target], fresh.inputs[target], atol=1e-6)
    else:
        assert kept.inputs is None and fresh.inputs is None
    features, _ = model(**net_input)
    assert torch.allclose(model(**net_input, verifier_outputs=kept)[0][target], features[target], atol=1e-5)
    with pytest.raises(ValueError, match="not as long as the dataset's sizes say"):
        memory.outputs(torch.tensor([1, 0]), net_input["src_tokens"], net_input["prev_output_tokens"], None)


def test_kept_verifier_states_refuse_a_training_set_larger_than_half_the_memory(monkeypatch):
    monkeypatch.setattr(verifier_memory, "physical_memory_bytes", lambda: 2 ** 30)
    with pytest.raises(ValueError, match="train without --keep-verifier-states"):
        VerifierMemory([10] * 1000, [10] * 1000, 16384, 16384, 1, 1, "--keep-verifier-states")


def test_the_loss_scores_the_slots_before_the_end_alone():
    dictionary, verifier, model, batch, task = criterion_case(1, [[9, 10, 11], [12]])
    loss, sample_size, log = DraftHeadLossCriterion(task, label_smoothing=0.0)(model, batch)
    # targets 3 + EOS and 1 + EOS tokens: slots (t, i) with t + i inside the sentence
    assert sample_size == (4 + 3) + (2 + 1) == log["ntokens"]
    assert log["prefixes"] == 4 + 2
    features, _ = model(**batch["net_input"])
    targets = slot_targets(batch["target"], dictionary.pad(), 2)
    scored = targets.ne(dictionary.pad())
    lprobs = torch.log_softmax(model.output_layer(features[scored]), -1)
    assert loss.item() == pytest.approx(-lprobs.gather(1, targets[scored].unsqueeze(1)).sum().item(), rel=1e-5)
    loss.backward()
    assert model.head.fuse.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in verifier.parameters())


def test_a_head_drafting_among_the_first_words_is_trained_on_those_alone():
    dictionary, verifier, model, batch, task = criterion_case(2, [[9, 10, 11], [12]])
    model.draft_vocab = 10  # words 10 and above are not drafted, so not scored
    loss, sample_size, log = DraftHeadLossCriterion(task, label_smoothing=0.0)(model, batch)
    # slots after each prefix: (9 10) (10 11) (11 EOS) (EOS pad) and (12 EOS) (EOS pad) (pad pad) (pad pad)
    targets = slot_targets(batch["target"], dictionary.pad(), 2)
    scored = targets.ne(dictionary.pad()) & targets.lt(10)
    assert sample_size == 3 + 2 == int(scored.sum())  # 9 and two EOS, two EOS
    assert log["prefixes"] == 4 + 2  # every prefix before the end counts in the accuracy
    features, _ = model(**batch["net_input"])
    logits = model.output_layer(features[scored])
    assert logits.shape == (5, 10)
    lprobs = torch.log_softmax(logits, -1)
    assert loss.item() == pytest.approx(-lprobs.gather(1, targets[scored].unsqueeze(1)).sum().item(), rel=1e-5)
    # of the 6 first slots, the 3 whose words the head cannot draft count as wrong
    first = scored[:, :, 0]
    right = model.output_layer(features[:, :, 0][first]).argmax(-1).eq(targets[:, :, 0][first])
    assert first.sum() == 3 and log["slot1_correct"] == int(right.sum())


@pytest.mark.parametrize("draft_vocab", [0, 10])
def test_soft_targets_are_the_verifiers_distribution_at_each_slots_position(draft_vocab):
    dictionary, verifier, model, batch, task = criterion_case(3, [[9, 4, 11], [5]])
    model.draft_vocab = draft_vocab
    hard, _, _ = DraftHeadLossCriterion(task, label_smoothing=0.0)(model, batch)
    soft, _, _ = DraftHeadLossCriterion(task, label_smoothing=0.0, soft_target_weight=1.0)(model, batch)
    mixed, _, _ = DraftHeadLossCriterion(task, label_smoothing=0.0, soft_target_weight=0.25)(model, batch)
    # by hand: the verifier's full forward, slot i after t tokens against its distribution after input t + i - 1
    net_input = batch["net_input"]
    verifier_logits, _ = verifier(net_input["src_tokens"], net_input["src_lengths"], net_input["prev_output_tokens"])
    words = draft_vocab or len(dictionary)
    features, _ = model(**net_input)
    expected = 0.0
    for row, target in enumerate(batch["target"].tolist()):
        for t in range(len(target)):
            for i in range(2):
                if t + i >= len(target) or target[t + i] == dictionary.pad() or target[t + i] >= words:
                    continue  # past the end or a word the head does not draft: not scored
                teacher = torch.softmax(verifier_logits[row, t + i, :words], -1)
                student = torch.log_softmax(model.output_layer(features[row, t, i]), -1)
                expected -= (teacher * student).sum().item()
    assert soft.item() == pytest.approx(expected, rel=1e-5)
    assert mixed.item() == pytest.approx(0.75 * hard.item() + 0.25 * expected, rel=1e-5)
    soft.backward()
    assert model.head.fuse.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in verifier.parameters())


def test_a_one_slot_heads_chain_takes_its_calls_by_batch():
    """``--draft-head-steps`` unset: on a CPU a sentence's chain without leaves drafts as many tokens as its
    ``ChainLength`` says, others as many as keep a pass within one tile of the vector kernel beside each
    sentence's last token and leaves (at least one and the leaves)."""
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=3, layers=1).eval()

    def batch_steps(rows, **options):
        drafter = DraftHeadDrafter(build_head(verifier, block_size=1).eval(), **options)
        drafter.begin({"src_tokens": torch.full((rows, 5), 7)}, 10, (torch.zeros(rows, 5, 16), None))
        return drafter.batch_steps, drafter.batch_leaves
    learnt = ChainLength(MOST_CHAIN_STEPS).steps()  # what a sentence's chain drafts before any pass
    assert 1 < learnt < MOST_CHAIN_STEPS and batch_steps(1, leaves=0) == (learnt, 0)
    assert batch_steps(1) == (vector_kernels.WIDEST_TILE - 2, 1) == ((4, 1) if vector_kernels.LANES == 16 else (3, 1))
    assert batch_steps(1, leaves=2) == (max(2, vector_kernels.WIDEST_TILE - 3), 2)
    assert batch_steps(2) == (max(1, vector_kernels.WIDEST_TILE // 2 - 1), 0)
    assert batch_steps(3) == batch_steps(16) == (1, 0)
    assert batch_steps(3, leaves=2) == (2, 2)
    assert batch_steps(1, steps=2) == (2, 1) and batch_steps(3, steps=2) == (2, 0)


def test_drafting_steps_default_to_a_learnt_chain_and_steps_and_trees_are_refused_where_they_cannot_apply(
        monkeypatch):
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=3, layers=1).eval()
    assert DraftHeadDrafter(build_head(verifier, block_size=1).eval()).steps == MOST_CHAIN_STEPS
    assert DraftHeadDrafter(build_head(verifier, block_size=1).eval(), branches=2).steps == 3
    assert DraftHeadDrafter(build_head(verifier, block_size=3).eval()).steps == 1
    refinement = SimpleNamespace(drafts=1, top_k=2)  # a refinement chooses among one call's slots
    assert DraftHeadDrafter(build_head(verifier, block_size=1).eval(), refinement=refinement).steps == 1
    with pytest.raises(ValueError, match="--draft-head-steps 0: a proposal takes one call of the head or more"):
        DraftHeadDrafter(build_head(verifier).eval(), steps=0)
    with pytest.raises(ValueError, match="--refine chooses among the top-k of one call's slots"):
        DraftHeadDrafter(build_head(verifier).eval(), refinement=refinement, steps=2)
    for branches, least_probability, nodes in ((0, 0.0, 0), (2, 1.0, 0), (2, -0.1, 0), (2, 0.0, -1)):
        with pytest.raises(ValueError, match=f"--draft-head-branches {branches}, --draft-head-threshold "
                                             f"{least_probability}, --draft-head-nodes {nodes}: a draft tree keeps "
                                             "one branch per level or more"):
            DraftHeadDrafter(build_head(verifier, block_size=1).eval(), branches=branches,
                             least_probability=least_probability, nodes=nodes)
    with pytest.raises(ValueError, match="--draft-head-branches 4, --draft-head-leaves 0: the head drafts among 3 "
                                         "words; branch at most"):
        DraftHeadDrafter(build_head(verifier, block_size=1).eval(), draft_vocab=3, branches=4)
    with pytest.raises(ValueError, match="--draft-head-leaves 1: the head drafts among 1 words"):
        DraftHeadDrafter(build_head(verifier, block_size=1).eval(), draft_vocab=1, leaves=1)
    for model, options in ((build_head(verifier, block_size=1), {"leaves": MOST_CHAIN_STEPS + 1}),
                           (build_head(verifier, block_size=1), {"leaves": -1}),
                           (build_head(verifier, block_size=2), {"leaves": 1}),
                           (build_head(verifier, block_size=1), {"leaves": 1, "branches": 2}),
                           (build_head(verifier, block_size=1), {"leaves": 1, "steps": 1, "refinement": refinement})):
        with pytest.raises(ValueError, match=f"--draft-head-leaves {options['leaves']}: runner-up leaves go beside "
                                             "the tokens of a chain"):
            DraftHeadDrafter(model.eval(), **options)
    for model, options in ((build_head(verifier, block_size=2), {"branches": 2}),
                           (build_head(verifier, block_size=1), {"least_probability": 0.1, "refinement": refinement})):
        with pytest.raises(ValueError, match="--draft-head-branches, --draft-head-threshold and --draft-head-nodes "
                                             "grow a tree a token per call: they need a head trained with "
                                             "--block-size 1 and no --refine"):
            DraftHeadDrafter(model.eval(), steps=1, **options)
    all_words = r"--draft-shortlist adds words to those the head drafts among, the first --draft-vocab \(all\)"
    with pytest.raises(ValueError, match=all_words):
        DraftHeadDrafter(build_head(verifier).eval(), shortlist=shortlist_of(dictionary, 9))
    with pytest.raises(ValueError, match="a shortlist beyond the first 9 of 24 words, for a head drafting among the "
                                         "first 8 of 24"):
        DraftHeadDrafter(build_head(verifier).eval(), draft_vocab=8, shortlist=shortlist_of(dictionary, 9))
    for options, refusal in (({"draft_shortlist": -1}, "--draft-shortlist -1: translations per source word"),
                             ({"draft_shortlist": 2}, "pass --draft-shortlist-corpus DIR/SPLIT.SRC-TGT"),
                             ({"draft_shortlist": 2, "draft_shortlist_corpus": "bin/train.a-b", "draft_vocab": 0},
                              all_words)):
        with pytest.raises(ValueError, match=refusal):
            algorithms.draft_shortlist(DecodingConfig(**options), {"cfg": SimpleNamespace(task=SimpleNamespace())},
                                       dictionary, dictionary)
    monkeypatch.setattr(algorithms, "load_drafter_checkpoint", lambda path: ({}, "block_nat"))
    for options in ({"draft_head_steps": 2}, {"draft_head_branches": 2}, {"draft_head_threshold": 0.1},
                    {"draft_head_nodes": 3}, {"draft_head_leaves": 1}, {"draft_shortlist": 3}):
        with pytest.raises(ValueError, match="--draft-head-steps, --draft-head-branches, --draft-head-threshold, "
                                             "--draft-head-nodes, --draft-head-leaves, --draft-shortlist: "
                                             "--drafter-path nat.pt is a block_nat drafter, not a draft_head"):
            algorithms.generalized_aggressive_decoding(DecodingConfig(drafter_path="nat.pt", **options),
                                                       dictionary, dictionary, [verifier])


def test_the_state_regression_pulls_each_slots_features_to_the_verifiers_state_for_its_token():
    dictionary, verifier, model, batch, task = criterion_case(3, [[9, 4, 11], [5]])
    hard, _, _ = DraftHeadLossCriterion(task, label_smoothing=0.0)(model, batch)
    both, _, _ = DraftHeadLossCriterion(task, label_smoothing=0.0, state_regression_weight=2.0)(model, batch)
    # by hand: slot i after t tokens against the verifier's state after input t + i, where a target exists
    net_input = batch["net_input"]
    features, extra = model(**net_input)
    states = verifier.decoder.extract_features(net_input["prev_output_tokens"],
                                               encoder_out=verifier.encoder(net_input["src_tokens"],
                                                                            net_input["src_lengths"]))[0]
    torch.testing.assert_close(extra["verifier_states"], states)
    expected = 0.0
    for row, target in enumerate(batch["target"].tolist()):
        for t in range(len(target)):
            for i in range(2):
                if t + i < len(target) and target[t + i] != dictionary.pad():
                    expected += F.smooth_l1_loss(features[row, t, i], states[row, t + i]).item()
    assert both.item() == pytest.approx(hard.item() + 2.0 * expected, rel=1e-5)
    both.backward()
    assert model.head.fuse.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in verifier.parameters())
    with pytest.raises(ValueError, match="--state-regression-weight -1.0"):
        DraftHeadLossCriterion(task, label_smoothing=0.0, state_regression_weight=-1.0)


def test_the_soft_target_weight_is_a_weight():
    dictionary = make_dictionary(20)
    task = SimpleNamespace(target_dictionary=dictionary, verifier=None)
    with pytest.raises(ValueError, match="--soft-target-weight 1.5"):
        DraftHeadLossCriterion(task, label_smoothing=0.0, soft_target_weight=1.5)


def test_attention_dropout_is_its_own_option():
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=2, layers=1)
    batch = make_batch(dictionary, [[4, 5, 6], [7, 8]], targets=[[9, 10, 11], [12]])
    for attention_dropout, same in ((0.0, True), (0.5, False)):
        model = build_head(verifier, attention_dropout=attention_dropout).train()  # no other dropout
        torch.manual_seed(0)
        first, _ = model(**batch["net_input"])
        assert torch.equal(first, model(**batch["net_input"])[0]) == same


def test_the_head_saves_its_own_weights_and_keeps_the_verifier_in_eval_mode():
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=1, layers=1)
    model = build_head(verifier).train()
    assert not verifier.training and all(not p.requires_grad for p in verifier.parameters())
    state = model.state_dict()
    assert state and not any(key.startswith("verifier.") for key in state)
    other = build_head(verifier, seed=9)
    other.load_state_dict(state)
    assert torch.equal(other.head.fuse.weight, model.head.fuse.weight)


DRAFT_HEAD = ["--task", "translation_draft_head", "--arch", "draft_head", "--criterion", "draft_head_loss",
              "--block-size", 3, "--head-attention-heads", 2, "--head-ffn-dim", 32,
              *TINY_TRANSFORMER[TINY_TRANSFORMER.index("--optimizer"):]]


@pytest.fixture(scope="module")
def toy_head(toy_experiment, tmp_path_factory):
    checkpoints = tmp_path_factory.mktemp("toy_head")
    log = run_fairseq("train", toy_experiment["data"], "--user-dir", USER_DIR, *DRAFT_HEAD,
                      "--verifier-path", toy_experiment["checkpoint"], "--max-update", 4, "--save-dir", checkpoints,
                      "--log-interval", 1, "--log-format", "simple", "--draft-vocab", 16)
    return {"checkpoint": checkpoints / "checkpoint_last.pt", "log": log}


def test_a_head_trained_through_fairseq_train_decodes_losslessly(toy_experiment, toy_head, tmp_path):
    assert "accepted" in toy_head["log"] and "slot1_acc" in toy_head["log"]
    state = checkpoint_utils.load_checkpoint_to_cpu(str(toy_head["checkpoint"]))
    assert not any(key.startswith("verifier.") for key in state["model"])
    # trained to draft among the first 16 words, it drafts among them unless told otherwise
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(toy_experiment["checkpoint"])])
    generation = argparse.Namespace(**GENERATION_DEFAULTS)
    for draft_vocab, words in ((None, 16), (0, len(task.target_dictionary)), (10, 10)):
        decoding = DecodingConfig(drafter_path=str(toy_head["checkpoint"]), draft_vocab=draft_vocab)
        drafter = build_generator("gad", models, task.target_dictionary, generation, decoding).decoder.drafter
        assert drafter.output_layer.weight.size(1) == words
    # a shortlist learnt from the task's train split adds words beyond the head's first 16
    decoding = decoding_config(SimpleNamespace(data=str(toy_experiment["data"]), source_lang="src",
                                               target_lang="tgt", drafter_path=str(toy_head["checkpoint"]),
                                               draft_shortlist=2))
    drafter = build_generator("gad", models, task.target_dictionary, generation, decoding).decoder.drafter
    assert drafter.shortlist.first_words == 16 and (drafter.shortlist.table >= 16).any()
    del state["cfg"].model.head_attention_dropout  # a head saved before the option existed still loads
    DraftHeadDrafter.from_state(toy_head["checkpoint"], state, task.source_dictionary, task.target_dictionary,
                                models[0])
    generate = ("generate", toy_experiment["data"], "--user-dir", USER_DIR, "--task", "translation_pardec",
                "--path", toy_experiment["checkpoint"], "--gen-subset", "test", "--max-len-b", 20)

    greedy = hypotheses(run_fairseq(*generate, "--beam", 1, "--batch-size", 16))
    assert len(greedy) == 100
    for batch_size, options in ((1, ()), (16, ()), (16, ("--draft-vocab", 0)), (16, ("--draft-head-steps", 3)),
                                (16, ("--draft-shortlist", 2))):
        gad = run_fairseq(*generate, "--gen-algo", "gad", "--drafter-path", toy_head["checkpoint"],
                          "--batch-size", batch_size, *options)
        assert hypotheses(gad) == greedy
    # a head trained for other verifier weights is refused before decoding
    verifier_state = checkpoint_utils.load_checkpoint_to_cpu(str(toy_experiment["checkpoint"]))
    verifier_state["model"]["decoder.embed_tokens.weight"][5] += 1.0
    verifier_state["cfg"] = OmegaConf.to_container(verifier_state["cfg"])
    torch.save(verifier_state, tmp_path / "other_verifier.pt")
    other = list(generate)
    other[other.index("--path") + 1] = tmp_path / "other_verifier.pt"
    with pytest.raises(AssertionError, match="is a draft head trained for another verifier"):
        run_fairseq(*other, "--gen-algo", "gad", "--drafter-path", toy_head["checkpoint"])
    with pytest.raises(AssertionError, match="pass the verifier's checkpoint with --verifier-path"):
        run_fairseq("train", toy_experiment["data"], "--user-dir", USER_DIR, *DRAFT_HEAD, "--max-update", 1,
                    "--save-dir", tmp_path / "unused")
    with pytest.raises(AssertionError, match="use --arch draft_head"):
        run_fairseq("train", toy_experiment["data"], "--user-dir", USER_DIR, "--task", "translation_draft_head",
                    "--criterion", "draft_head_loss", *TINY_TRANSFORMER,
                    "--verifier-path", toy_experiment["checkpoint"], "--max-update", 1, "--save-dir", tmp_path / "unused")


def test_kept_verifier_states_train_as_the_verifiers_forward_does(toy_experiment, tmp_path):
    """Two epochs through ``fairseq-train``: with the verifier's states kept after the first, every update's
    loss is the one computed with the verifier run on each batch."""
    def losses(*options):
        log = run_fairseq("train", toy_experiment["data"], "--user-dir", USER_DIR, *DRAFT_HEAD,
                          "--verifier-path", toy_experiment["checkpoint"], "--max-epoch", 2, "--max-tokens", 300,
                          "--save-dir", tmp_path / str(len(options)), "--log-interval", 1, "--log-format", "simple",
                          *options)
        return [line.split(" loss=")[1].split(",")[0] for line in log.splitlines() if "train_inner" in line], log

    plain, log = losses()
    assert len(plain) > 6, "two epochs of several updates each"
    kept, log = losses("--keep-verifier-states")
    assert "kept the verifier's states of all 600 training sentences" in log
    assert kept == plain


def test_head_training_with_two_local_processes(toy_experiment, tmp_path):
    output = run_script("train_distributed.sh", "--nproc", 2, "--backend", "gloo",
                        "--master", f"127.0.0.1:{free_port()}", "--log-dir", tmp_path / "logs", "--",
                        toy_experiment["data"], "--user-dir", USER_DIR, *DRAFT_HEAD,
                        "--verifier-path", toy_experiment["checkpoint"], "--max-update", 3,
                        "--keep-verifier-states", "--save-dir", tmp_path / "checkpoints")
    assert "distributed init (rank 1)" in (tmp_path / "logs" / "rank1.log").read_text()
    assert "done training" in output and (tmp_path / "checkpoints" / "checkpoint_last.pt").exists()


def test_train_draft_head_script_trains_once_and_reports_failures(toy_experiment, tmp_path):
    save = tmp_path / "head"
    common = (toy_experiment["data"], toy_experiment["checkpoint"], save, "-s", "src", "-t", "tgt", "--minutes", 5,
              "--block-size", 2)
    output = run_script("train_draft_head.sh", *common, "--", "--max-update", 3)
    assert "valid on 'valid' subset" in output and "accepted" in output
    assert (save / ".trained").exists() and (save / "checkpoint_last.pt").exists()
    assert "reusing the head" in run_script("train_draft_head.sh", *common)
    failed = subprocess.run(["bash", str(REPO / "scripts" / "train_draft_head.sh"), *map(str, common[:2]),
                             str(tmp_path / "broken"), *map(str, common[3:]), "--", "--no-such-option"],
                            capture_output=True, text=True, timeout=600)
    assert failed.returncode != 0 and "train_draft_head.sh: fairseq-train failed" in failed.stderr
    assert not (tmp_path / "broken" / ".trained").exists()
    # a one-slot head is trained with EAGLE's feature loss, a 256-wide feed-forward block, reads tokens through
    # the verifier's first layer, and drafts three steps per pass
    one_slot = tmp_path / "one_slot"
    run_script("train_draft_head.sh", *common[:2], one_slot, *common[3:-1], 1, "--", "--max-update", 2)
    state = checkpoint_utils.load_checkpoint_to_cpu(str(one_slot / "checkpoint_last.pt"))
    assert state["cfg"].criterion.state_regression_weight == 10 and state["cfg"].task.block_size == 1
    assert state["cfg"].model.head_ffn_dim == 256 and state["cfg"].model.head_input_layers == 1
    # the verifier's states are kept after the first epoch unless the script is told otherwise
    assert state["cfg"].task.keep_verifier_states
    recomputed = tmp_path / "recomputed"
    run_script("train_draft_head.sh", *common[:2], recomputed, *common[3:-1], 1, "--recompute-states",
               "--input-layers", 0, "--", "--max-update", 1)
    recomputed_state = checkpoint_utils.load_checkpoint_to_cpu(str(recomputed / "checkpoint_last.pt"))
    assert not recomputed_state["cfg"].task.keep_verifier_states
    assert recomputed_state["cfg"].model.head_input_layers == 0
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(toy_experiment["checkpoint"])])
    drafter = DraftHeadDrafter.from_state(one_slot / "checkpoint_last.pt", state, task.source_dictionary,
                                          task.target_dictionary, models[0])
    assert drafter.steps == MOST_CHAIN_STEPS
    # its draft trees through fairseq-generate keep fairseq's greedy output
    generate = ("generate", toy_experiment["data"], "--user-dir", USER_DIR, "--task", "translation_pardec",
                "--path", toy_experiment["checkpoint"], "--gen-subset", "test", "--max-len-b", 20, "--batch-size", 16)
    greedy = hypotheses(run_fairseq(*generate, "--beam", 1))
    chain = run_fairseq(*generate, "--gen-algo", "gad", "--drafter-path", one_slot / "checkpoint_last.pt")
    assert hypotheses(chain) == greedy
    # the trees of a head reading the embedding (one reading the verifier's layers drafts chains alone)
    tree = run_fairseq(*generate, "--gen-algo", "gad", "--drafter-path", recomputed / "checkpoint_last.pt",
                       "--draft-head-branches", 2, "--draft-head-threshold", 0.05, "--draft-head-nodes", 3)
    assert hypotheses(tree) == greedy


@pytest.mark.slow
def test_draft_head_recipe_trains_the_head_and_compares_the_three_drafters(toy_experiment, tmp_path):
    """What ``run.sh --draft-head --head-compare`` runs: the verifier's greedy outputs, a head trained on
    them with the recipe's ``--head-*`` options (the last one given wins; one slot by default), the
    benchmark of greedy and gad with it; then GAD's block drafter and frozen BPD heads, built like the
    verifier (its preset), trained as long on the same outputs with ``--compare-block-size`` slots,
    each benchmarked beside greedy."""
    save = tmp_path / "verifier"
    run_script("train_transformer.sh", toy_experiment["data"], save, "-s", "src", "-t", "tgt", "--preset", "cpu",
               "--", "--max-update", 2)
    output = run_script("draft_head_recipe.sh", toy_experiment["data"], save, "-s", "src", "-t", "tgt",
                        "--references", toy_experiment["root"] / "test.tgt", "--head-draft-vocab", 8,
                        "--head-minutes", 0.05, "--head-draft-vocab", 16,
                        "--head-algorithms", "gad", "--head-compare", "--compare-block-size", 2, "--preset", "cpu",
                        "--", "--max-sentences", 4, "--batch-size", 2, "--max-len-b", 6, "--repetitions", 1,
                        "--detok", "space", "--name", "bench")
    assert (save / "self_distilled" / ".done").exists(), output
    head = checkpoint_utils.load_checkpoint_to_cpu(str(save / "head_k1_l1_in1_v16_m0.05" / "checkpoint_last.pt"))
    assert head["cfg"]["task"].block_size == 1 and head["cfg"]["task"].draft_vocab == 16
    for folder, algorithm in (("head_k1_l1_in1_v16_m0.05", "gad"), ("block_nat_k2_m0.05", "gad"),
                              ("bpd_k2_m0.05", "bpd")):
        assert (save / folder / ".trained").exists(), output
        report = json.loads((save / folder / "bench.json").read_text())
        rows = {row["algorithm"]: row for row in report["results"]}
        assert report["meta"]["sentences"] == 4 and rows[algorithm]["identical_to_greedy"] == 1.0
    block_nat = checkpoint_utils.load_checkpoint_to_cpu(str(save / "block_nat_k2_m0.05" / "checkpoint_last.pt"))
    heads = checkpoint_utils.load_checkpoint_to_cpu(str(save / "bpd_k2_m0.05" / "checkpoint_last.pt"))
    assert block_nat["cfg"]["task"].block_size == 2 and heads["cfg"]["model"].block_heads == 2
    assert heads["cfg"]["model"].freeze_base
    unknown = subprocess.run(["bash", str(REPO / "scripts" / "draft_head_recipe.sh"), str(toy_experiment["data"]),
                              str(save), "--minutes", "5"], capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "draft_head_recipe.sh: unknown option --minutes" in unknown.stderr


@pytest.mark.slow
def test_draft_head_recipe_with_head_distill_beam_learns_the_verifiers_beam_search(toy_experiment, tmp_path):
    """``--head-distill-beam 2`` (a head for gad++): the head learns the verifier's beam-2 outputs of the
    training and valid sets, distilled into their own folder, and its folder says so; no beam size is refused."""
    save = tmp_path / "verifier"
    run_script("train_transformer.sh", toy_experiment["data"], save, "-s", "src", "-t", "tgt", "--preset", "cpu",
               "--", "--max-update", 2)
    output = run_script("draft_head_recipe.sh", toy_experiment["data"], save, "-s", "src", "-t", "tgt",
                        "--references", toy_experiment["root"] / "test.tgt", "--head-minutes", 0.05,
                        "--head-distill-beam", 2, "--no-bench")
    targets = save / "beam2_distilled"
    assert (targets / ".done").exists() and not (save / "self_distilled").exists(), output
    for split in ("train", "valid"):
        assert "with beam=2:" in (targets / "text" / f"{split}.generate.log").read_text()
    head = checkpoint_utils.load_checkpoint_to_cpu(str(save / "head_k1_l1_in1_b2_m0.05" / "checkpoint_last.pt"))
    assert head["cfg"]["task"].data == str(targets)
    refused = subprocess.run(["bash", str(REPO / "scripts" / "draft_head_recipe.sh"), str(toy_experiment["data"]),
                              str(save), "-s", "src", "-t", "tgt", "--references", "ref", "--head-distill-beam", "0"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "--head-distill-beam takes a beam size" in refused.stderr
