"""Draft refinement (Kim et al. 2024): the n-gram model, the k-best search over the heads' lattice,
the tree of its paths, local neural rescoring, bpd and the draft head with refined drafts still
fairseq's greedy output, the CLI from training the rescoring LM to fairseq-generate, the analysis plot."""
import argparse
import importlib.util
import itertools
import json
import math
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.data import MonolingualDataset
from fairseq.models.transformer_lm import TransformerLanguageModel, base_lm_architecture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pardec_fairseq.decoding import DecodingConfig, build_generator
from pardec_fairseq.decoding.drafters.blockwise import BlockwiseHeadsDrafter
from pardec_fairseq.decoding.drafters.draft_head import DraftHeadDrafter
from pardec_fairseq.decoding.drafters import output_tail
from pardec_fairseq.decoding.drafters.ngram_lm import NgramLM
from pardec_fairseq.decoding.drafters.refinement import (_NO_TABLES, Lattice, LatticeRescoring, LocalNeuralRescoring,
                                                          _best_paths, tree_of_paths)
from pardec_fairseq.tasks.target_language_modeling import SentencesAfterEos
from conftest import REPO, USER_DIR, run_fairseq
from test_blockwise import BLOCKWISE, hypotheses
from test_draft_head import build_head
from test_lossless_matches_fairseq import (GENERATION_DEFAULTS, assert_same_hypotheses, fairseq_beam_one, model_for,
                                           plugin, sentences)
from test_retrieval import EOS, State, corpus, write_split
from test_scripts import run_script
from tiny import build_transformer, make_batch, make_dictionary


def tiny_lm(dictionary, seed=0, max_positions=64):
    """A random fairseq ``transformer_lm``."""
    args = argparse.Namespace(decoder_layers=1, decoder_embed_dim=16, decoder_attention_heads=2,
                              decoder_ffn_embed_dim=32, tokens_per_sample=max_positions,
                              max_target_positions=max_positions, dropout=0.0, share_decoder_input_output_embed=True)
    base_lm_architecture(args)
    torch.manual_seed(seed)
    return TransformerLanguageModel.build_model(args, SimpleNamespace(source_dictionary=dictionary,
                                                                      target_dictionary=dictionary)).eval()


def test_the_ngram_model_backs_off_to_the_longest_context_seen():
    lm = NgramLM(corpus([5, 6], [5, 7]), order=3, vocab_size=20)  # EOS 5 6 EOS 5 7 EOS
    score = lambda context, length, word: float(lm.log_scores(np.array([context]), np.array([length]),
                                                              np.array([word]))[0])
    assert score([EOS, 5], 2, 6) == pytest.approx(math.log(1 / 2))  # EOS 5 6 once, EOS 5 twice
    assert score([9, 5], 2, 6) == pytest.approx(math.log(0.4 * 1 / 2))  # 9 5 unseen: bigram 5 6, backed off once
    assert score([9, 9], 2, 5) == pytest.approx(math.log(0.4 ** 2 * 2 / 7))  # unigram 5: 2 of 7 tokens
    assert score([9, 5], 1, 6) == pytest.approx(math.log(1 / 2))  # one context token: the bigram, no backoff
    assert score([EOS, 5], 2, 9) == pytest.approx(3 * math.log(0.4) - math.log(8))  # never seen
    with pytest.raises(ValueError, match="order 3 or less"):
        NgramLM(corpus([5]), order=4, vocab_size=2 ** 16)
    with pytest.raises(ValueError, match="at least 2"):
        NgramLM(corpus([5]), order=1, vocab_size=20)


def counted_backoff(text, order, context, word, backoff=0.4):
    """Stupid backoff from n-gram counts made by hand: the reference of the model's hash tables."""
    text = [int(t) for t in text]
    count = lambda gram: sum(tuple(text[i: i + len(gram)]) == gram for i in range(len(text) - len(gram) + 1))
    context = tuple(int(t) for t in context)[len(context) - min(len(context), order - 1):]
    for m in range(len(context), -1, -1):
        seen = count(context[len(context) - m:] + (word,))
        if seen:
            after = len(text) if m == 0 else count(context[len(context) - m:])
            return math.log(seen / after) + (len(context) - m) * math.log(backoff)
    return (len(context) + 1) * math.log(backoff) - math.log(len(text) + 1)


@settings(max_examples=60, deadline=None)
@given(sentences=st.lists(st.lists(st.integers(4, 12), max_size=12), min_size=1, max_size=30),
       order=st.integers(2, 4), queries=st.lists(st.tuples(st.lists(st.integers(2, 14), max_size=4),
                                                           st.integers(2, 14)), min_size=1, max_size=30))
def test_the_ngram_model_scores_as_counting_by_hand(sentences, order, queries):
    """Small vocabularies fill the hash tables' slots densely and make keys share their first slot."""
    text = corpus(*sentences)
    lm = NgramLM(text, order, vocab_size=15)
    width = order - 1
    contexts = np.array([[EOS] * (width - len(c[-width:])) + c[-width:] for c, _ in queries])
    lengths = np.array([min(len(c), width) for c, _ in queries])
    words = np.array([w for _, w in queries])
    expected = [counted_backoff(text, order, contexts[i][width - lengths[i]:], words[i]) for i in range(len(queries))]
    assert lm.log_scores(contexts, lengths, words) == pytest.approx(expected)


def test_rescoring_repairs_a_repeated_draft():
    """Heads 2 and 3 both say 7 first (Kim et al.'s repetition); the corpus never repeats it."""
    lm = NgramLM(corpus([6, 7, 8], [6, 7, 9], [7, 8]), order=2, vocab_size=20)
    lattice = Lattice(torch.tensor([[[7, 8], [7, 8]]]), torch.log(torch.tensor([[[0.6, 0.4], [0.55, 0.45]]])))
    state = State([[6]])
    plain = LatticeRescoring(2, drafts=1).propose(lattice, state)
    assert plain.tokens.tolist() == [[7, 7]]
    refined = LatticeRescoring(2, drafts=1, lm=lm, weight=1.0).propose(lattice, state)
    assert refined.tokens.tolist() == [[7, 8]] and refined.lengths.tolist() == [2] and refined.parents is None
    # two drafts: 7 8, then 7 7 (8 after 6 and 7 after 8 were never seen), sharing their first node
    both = LatticeRescoring(2, drafts=2, lm=lm, weight=1.0).propose(lattice, state)
    assert both.tokens.tolist() == [[7, 8, 7]] and both.parents.tolist() == [[0, 1, 1]]
    assert both.lengths.tolist() == [3]


def test_the_tree_of_paths_shares_common_prefixes():
    paths = np.array([[[1, 2, 3], [1, 2, 4], [1, 5, 6], [7, 8, 9]]])
    draft, parents, nodes = tree_of_paths(paths, np.array([[3, 3, 3, 2]]))
    assert draft.tolist() == [[1, 2, 3, 4, 5, 6, 7, 8]]
    assert parents.tolist() == [[0, 1, 2, 2, 1, 5, 0, 7]]  # node j at pass position j + 1
    assert nodes.tolist() == [8]
    draft, parents, nodes = tree_of_paths(np.array([[[1, 2], [1, 2]], [[3, 4], [5, 6]]]), np.array([[2, 2], [2, 1]]))
    assert nodes.tolist() == [2, 3] and draft[1].tolist() == [3, 4, 5] and parents[1].tolist() == [0, 1, 0]


def path_score(rescoring, tokens, scores, context, context_length, path):
    """A path's score computed word by word: ``tokens``/``scores`` ``[positions, k]`` of one row."""
    history, total, width = list(context), 0.0, rescoring.remembered
    for j, word in enumerate(path):
        total += scores[j, list(tokens[j]).index(word)]
        if rescoring.lm is not None:
            total += rescoring.weight * float(rescoring.lm.log_scores(
                np.array([history[-width:]]), np.array([min(width, context_length + j)]), np.array([word]))[0])
        history.append(word)
    return total


@settings(max_examples=60, deadline=None)
@given(data=st.data(), rows=st.integers(1, 3), positions=st.integers(1, 4), k=st.integers(1, 4),
       drafts=st.integers(1, 6), order=st.integers(2, 4), weight=st.sampled_from([0.0, 0.3, 1.0, 5.0]),
       with_lm=st.booleans(), seed=st.integers(0, 1000))
def test_the_search_returns_the_best_paths_of_the_lattice(data, rows, positions, k, drafts, order, weight, with_lm,
                                                          seed):
    """Against enumerating every path: the scores of the paths found are the best ones, best first."""
    generator = np.random.default_rng(seed)
    text = corpus(*[list(generator.integers(4, 9, size=generator.integers(1, 8))) for _ in range(6)])
    rescoring = LatticeRescoring(k, drafts, NgramLM(text, order, 20) if with_lm else None, weight)
    tokens = np.stack([np.stack([generator.permutation(np.arange(4, 10))[:k] for _ in range(positions)])
                       for _ in range(rows)])
    scores = np.log(generator.dirichlet(np.ones(k), size=(rows, positions)))
    context = generator.integers(4, 9, size=(rows, rescoring.remembered))
    context_lengths = np.array([data.draw(st.integers(1, rescoring.remembered)) for _ in range(rows)])
    tables = rescoring.lm.tables if with_lm else _NO_TABLES
    paths, found = _best_paths(tokens.astype(np.int64), scores, context.astype(np.int64),
                               context_lengths.astype(np.int64), min(drafts, k ** positions), rescoring.remembered,
                               float(weight), with_lm, *tables)
    for row in range(rows):
        every = sorted((path_score(rescoring, tokens[row], scores[row], context[row], context_lengths[row],
                                   [tokens[row, j, c] for j, c in enumerate(choice)])
                        for choice in itertools.product(range(k), repeat=positions)), reverse=True)
        kept = paths[row][found[row]]
        assert len(kept) == min(drafts, k ** positions) and len({tuple(p) for p in kept}) == len(kept)
        got = [path_score(rescoring, tokens[row], scores[row], context[row], context_lengths[row], p) for p in kept]
        assert got == pytest.approx(every[:len(kept)])


@settings(max_examples=60, deadline=None)
@given(outputs=st.lists(st.lists(st.integers(4, 12), max_size=6), min_size=1, max_size=4), positions=st.integers(1, 3),
       k=st.integers(1, 3), drafts=st.integers(1, 4), order=st.integers(2, 4), seed=st.integers(0, 1000))
def test_the_compiled_proposal_reads_each_rows_output_tail(outputs, positions, k, drafts, order, seed):
    """The proposal's one compiled call takes each row's context from the state as ``output_tail`` does
    (BOS repeated before a short output's start) and builds the draft the search's paths make: the best
    path as a chain, several as their tree. A wrong context changes drafts, not outputs, so only this
    test would see it."""
    generator = np.random.default_rng(seed)
    text = corpus(*[list(generator.integers(4, 13, size=generator.integers(1, 8))) for _ in range(12)])
    rescoring = LatticeRescoring(k, drafts, NgramLM(text, order, 20), 1.0)
    state = State(outputs)
    tokens = torch.from_numpy(np.stack([np.stack([generator.permutation(np.arange(4, 13))[:k]
                                                  for _ in range(positions)]) for _ in outputs]))
    scores = np.log(generator.dirichlet(np.ones(k), size=(len(outputs), positions)))
    scores = torch.from_numpy(scores.astype(np.float32))
    proposal = rescoring.propose(Lattice(tokens, scores), state)
    context, _ = output_tail(state, rescoring.remembered)
    context_lengths = np.minimum(state.lengths.numpy() + 1, rescoring.remembered)
    paths, found = _best_paths(tokens.numpy(), scores.numpy(), context.numpy(), context_lengths,
                               min(drafts, k ** positions), rescoring.remembered, 1.0, True, *rescoring.lm.tables)
    if min(drafts, k ** positions) == 1:
        assert proposal.parents is None and proposal.tokens.tolist() == paths[:, 0].tolist()
        assert proposal.lengths.tolist() == (found[:, 0] * positions).tolist()
    else:
        draft, parents, nodes = tree_of_paths(paths, found.astype(np.int64) * positions)
        assert proposal.tokens.tolist() == draft.tolist() and proposal.parents.tolist() == parents.tolist()
        assert proposal.lengths.tolist() == nodes.tolist()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), block_heads=st.integers(2, 5), zero_heads=st.booleans(),
       eos_bias=st.floats(-2.0, 3.0), batch=sentences, max_len_b=st.integers(1, 30), batch_of=st.integers(1, 6),
       top_k=st.integers(1, 4), drafts=st.integers(1, 4), order=st.integers(2, 4),
       weight=st.sampled_from([0.0, 0.5, 2.0]), with_lm=st.booleans())
def test_refined_bpd_equals_fairseq_greedy_of_head_one(seed, block_heads, zero_heads, eos_bias, batch, max_len_b,
                                                       batch_of, top_k, drafts, order, weight, with_lm):
    dictionary = make_dictionary(20)
    model = model_for("bpd", dictionary, block_heads, zero_heads, seed=seed, layers=2, eos_bias=eos_bias)
    collated = make_batch(dictionary, (batch * batch_of)[:max(len(batch), batch_of)])
    generator = np.random.default_rng(seed)
    text = corpus(*[list(generator.integers(4, 24, size=generator.integers(1, 10))) for _ in range(20)])
    lm = NgramLM(text, order, len(dictionary)) if with_lm else None
    drafter = BlockwiseHeadsDrafter(model.decoder, LatticeRescoring(top_k, drafts, lm, weight))
    expected = fairseq_beam_one([model], dictionary, collated, max_len_b=max_len_b)
    actual, stats = plugin("bpd", [model], dictionary, collated, drafter=drafter, max_len_b=max_len_b)
    assert_same_hypotheses(expected, actual)
    assert stats.iterations <= stats.tokens


def test_refine_options_build_the_refined_drafter_and_name_what_is_missing(tmp_path):
    dictionary = make_dictionary(20)
    model = model_for("bpd", dictionary, block_heads=3, zero_heads=True, seed=3, layers=2)
    batch = make_batch(dictionary, [[4, 5, 6, 7], [8, 9]])
    prefix = str(tmp_path / "train.src-tgt.tgt")
    write_split(prefix, [[5, 6, 7], [8, 9], [5, 6, 8]])
    generation = argparse.Namespace(**dict(GENERATION_DEFAULTS, max_len_b=12))
    expected = fairseq_beam_one([model], dictionary, batch, max_len_b=12)
    for options in ({"refine": "ngram"}, {"refine": "ngram", "refine_drafts": 3}, {"refine_drafts": 2}):
        config = DecodingConfig(refine_corpus=prefix, refine_top_k=3, **options)
        generator = build_generator("bpd", [model], dictionary, generation, config)
        refinement = generator.decoder.drafter.refinement
        assert (refinement.lm is not None) == (options.get("refine") == "ngram")
        assert refinement.drafts == options.get("refine_drafts", 1)
        assert_same_hypotheses(expected, generator.generate([model], batch))
    assert build_generator("bpd", [model], dictionary, generation, DecodingConfig()).decoder.drafter.refinement is None
    with pytest.raises(FileNotFoundError, match="--refine-corpus"):
        build_generator("bpd", [model], dictionary, generation,
                        DecodingConfig(refine="ngram", refine_corpus=str(tmp_path / "absent")))
    with pytest.raises(ValueError, match="several drafts per pass as a tree"):
        build_generator("bpd", [model], dictionary, generation,
                        DecodingConfig(verifier="fairseq", refine_corpus=prefix, refine_drafts=2))
    with pytest.raises(ValueError, match="--refine-top-k"):
        build_generator("bpd", [model], dictionary, generation,
                        DecodingConfig(refine="ngram", refine_corpus=prefix, refine_top_k=0))
    with pytest.raises(ValueError, match="--draft-vocab 2 keeps fewer words than the lattice's --refine-top-k 3"):
        build_generator("bpd", [model], dictionary, generation,
                        DecodingConfig(refine_drafts=2, refine_top_k=3, draft_vocab=2))


def test_local_neural_rescoring_picks_by_the_language_model_given_the_draft_so_far():
    dictionary = make_dictionary(20)
    lm = tiny_lm(dictionary, seed=1)
    state = State([[5, 6, 7], [8], [9, 10, 11, 12, 4]])  # rows of different lengths: padded on the left
    lattice = Lattice(torch.tensor([[[4, 5, 6]] * 3] * 3), torch.log(torch.tensor([[[0.5, 0.3, 0.2]] * 3] * 3)))
    with torch.no_grad():
        plain = LocalNeuralRescoring(3, lm, 0.0, dictionary.pad()).propose(lattice, state)
        assert plain.tokens.tolist() == [[4, 4, 4]] * 3 and plain.lengths.tolist() == [3] * 3
        rescored = LocalNeuralRescoring(3, lm, 100.0, dictionary.pad()).propose(lattice, state)
        # the language model's own choice among the candidates, word by word, each row as if alone
        for row, output in enumerate([[5, 6, 7], [8], [9, 10, 11, 12, 4]]):
            history = [dictionary.eos()] + output
            for j in range(3):
                logits, _ = lm(torch.tensor([history]))
                history.append(4 + int(logits[0, -1, 4:7].argmax()))
            assert rescored.tokens[row].tolist() == history[-3:]
        # an output longer than the model's positions is read through its latest ones
        short = LocalNeuralRescoring(3, tiny_lm(dictionary, seed=1, max_positions=4), 1.0, dictionary.pad())
        assert short.propose(lattice, state).tokens.shape == (3, 3)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), block_heads=st.integers(2, 5), zero_heads=st.booleans(),
       eos_bias=st.floats(-2.0, 3.0), batch=sentences, max_len_b=st.integers(1, 30), batch_of=st.integers(1, 6),
       top_k=st.integers(1, 4), weight=st.sampled_from([0.5, 2.0]))
def test_neural_refined_bpd_equals_fairseq_greedy_of_head_one(seed, block_heads, zero_heads, eos_bias, batch,
                                                              max_len_b, batch_of, top_k, weight):
    dictionary = make_dictionary(20)
    model = model_for("bpd", dictionary, block_heads, zero_heads, seed=seed, layers=2, eos_bias=eos_bias)
    collated = make_batch(dictionary, (batch * batch_of)[:max(len(batch), batch_of)])
    rescoring = LocalNeuralRescoring(top_k, tiny_lm(dictionary, seed=seed, max_positions=16), weight, dictionary.pad())
    drafter = BlockwiseHeadsDrafter(model.decoder, rescoring)
    expected = fairseq_beam_one([model], dictionary, collated, max_len_b=max_len_b)
    actual, _ = plugin("bpd", [model], dictionary, collated, drafter=drafter, max_len_b=max_len_b)
    assert_same_hypotheses(expected, actual)


def test_fairseq_generate_with_refined_drafts_reproduces_beam_one(toy_experiment, toy_drafter, tmp_path):
    """The recipe's steps on toy data: blockwise heads, the rescoring language model trained by its
    script, then ``fairseq-generate --gen-algo bpd --refine ...`` at batch sizes 1 and 16."""
    data, save = toy_experiment["data"], tmp_path / "blockwise"
    run_fairseq("train", data, "--user-dir", USER_DIR, "--task", "translation_pardec", *BLOCKWISE, "--block-heads", 3,
                "--criterion", "blockwise_cross_entropy", "--max-update", 6, "--save-dir", save)
    output = run_script("train_rescoring_lm.sh", data, tmp_path / "lm", "-s", "src", "-t", "tgt", "--layers", 1,
                        "--embed-dim", 64, "--", "--max-update", 3)
    assert "valid on" in output
    lm = tmp_path / "lm" / "checkpoint_best.pt"
    # --embed-dim is the whole model's width: no 512-wide embeddings projected in and out
    weights = checkpoint_utils.load_checkpoint_to_cpu(str(lm))["model"]
    shapes = {name: tuple(tensor.shape) for name, tensor in weights.items()}
    assert shapes["decoder.embed_tokens.weight"][1] == 64 and "decoder.project_in_dim.weight" not in shapes
    generate = ("generate", data, "--user-dir", USER_DIR, "--task", "translation_pardec", "--path",
                save / "checkpoint_last.pt")
    reference = hypotheses(run_fairseq(*generate, "--beam", 1, "--batch-size", 8))
    assert len(reference) == 100
    for options in (["--refine", "ngram", "--refine-drafts", 3, "--refine-top-k", 3],
                    ["--refine", "neural", "--refine-lm-path", lm, "--refine-lm-weight", 1.0]):
        for batch_size in (1, 16):
            assert hypotheses(run_fairseq(*generate, "--gen-algo", "bpd", *options, "--batch-size", batch_size)) \
                == reference
    with pytest.raises(AssertionError, match="not a language model"):
        run_fairseq(*generate, "--gen-algo", "bpd", "--refine", "neural", "--refine-lm-path",
                    save / "checkpoint_last.pt")
    with pytest.raises(AssertionError, match="block_nat drafter's drafts are not refined"):
        run_fairseq("generate", data, "--user-dir", USER_DIR, "--task", "translation_pardec", "--path",
                    toy_experiment["checkpoint"], "--gen-algo", "gad", "--drafter-path", toy_drafter["checkpoint"],
                    "--refine", "ngram")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), block_size=st.integers(1, 5), eos_bias=st.floats(-2.0, 3.0), batch=sentences,
       max_len_b=st.integers(1, 30), batch_of=st.integers(1, 6), top_k=st.integers(1, 4), drafts=st.integers(1, 3),
       neural=st.booleans())
def test_a_draft_head_refined_from_its_slots_lattice_equals_fairseq_greedy(seed, block_size, eos_bias, batch,
                                                                           max_len_b, batch_of, top_k, drafts, neural):
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=seed, layers=2, eos_bias=eos_bias)
    collated = make_batch(dictionary, (batch * batch_of)[:max(len(batch), batch_of)])
    if neural:
        refinement = LocalNeuralRescoring(top_k, tiny_lm(dictionary, seed=seed), 1.0, dictionary.pad())
    else:
        text = corpus(*[list(np.random.default_rng(seed).integers(4, 24, size=8)) for _ in range(10)])
        refinement = LatticeRescoring(top_k, drafts, NgramLM(text, 3, len(dictionary)), 0.5)
    drafter = DraftHeadDrafter(build_head(verifier, block_size, 1, seed + 1).eval(), refinement)
    assert drafter.drafts_trees == (not neural and drafts > 1)
    expected = fairseq_beam_one([verifier], dictionary, collated, max_len_b=max_len_b)
    actual, _ = plugin("greedy", [verifier], dictionary, collated, max_len_b=max_len_b, drafter=drafter)
    assert_same_hypotheses(expected, actual)


def test_the_refinement_plot_tabulates_each_kind_of_draft_against_the_oracle(tmp_path):
    spec = importlib.util.spec_from_file_location("refinement_plot", REPO / "scripts" / "refinement_plot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    heads = tmp_path / "heads.json"
    heads.write_text(json.dumps({"block_efficiency": {"1": 1.25, "4": 1.6}}))
    rows = {"fairseq-greedy": (4.0, 100, 100), "greedy": (2.0, 100, 100), "bpd": (1.9, 100, 80),
            "bpd:refine-drafts=4": (2.2, 100, 72), "bpd:refine=ngram": (1.8, 100, 75),
            "bpd:refine=ngram,refine-drafts=4": (2.1, 100, 68),
            "bpd:refine=neural,refine-lm-path=lm.pt,refine-top-k=8": (10.0, 100, 74), "ct2-float32": (3.0, 100, 100)}
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({
        "meta": {"checkpoint": "bw.pt", "sentences": 300, "subset": "test", "batch_size": 1, "hardware": "cpu",
                 "date": "2026-11-24"},
        "results": [{"algorithm": name, "ms_per_token": ms, "tokens": tokens, "iterations": passes}
                    for name, (ms, tokens, passes) in rows.items()]}))
    module.main([str(heads), str(bench), str(tmp_path / "out")])
    table = (tmp_path / "out.md").read_text().splitlines()
    assert table[4:9] == ["| top-1 of each head | 1 | 1 | 1.250 | +0.0% | 1.90 | 1.05x |",
                          "| heads alone | 4 | 4 | 1.389 | +11.1% | 2.20 | 0.91x |",
                          "| n-gram rescoring | 1 | 4 | 1.333 | +6.7% | 1.80 | 1.11x |",
                          "| n-gram rescoring | 4 | 4 | 1.471 | +17.6% | 2.10 | 0.95x |",
                          "| neural rescoring | 1 | 8 | 1.351 | +8.1% | 10.00 | 0.20x |"]
    assert table[-1] == "| tokens / pass | 1.250 | 1.600 |"
    assert (tmp_path / "out.png").stat().st_size > 10_000
    # run as a script, matplotlib's import-time debug lines stay out of its output
    script = subprocess.run([sys.executable, REPO / "scripts" / "refinement_plot.py", heads, bench, tmp_path / "again"],
                            capture_output=True, text=True, check=True)
    assert "DEBUG" not in script.stderr and (tmp_path / "again.md").read_text() == (tmp_path / "out.md").read_text()


def test_the_language_model_reads_each_target_sentence_after_eos():
    """As the translation decoder reads its output: input EOS + the sentence, targets the sentence."""
    sentences = [torch.tensor([5, 6, 7, EOS]), torch.tensor([8, EOS]), torch.tensor([EOS])]
    dictionary = make_dictionary(20)
    dataset = MonolingualDataset(SentencesAfterEos(sentences, EOS), [len(s) for s in sentences], dictionary,
                                 dictionary, add_eos_for_other_targets=False, shuffle=False, targets=["future"])
    samples = [dataset[i] for i in range(3)]
    assert [s["source"].tolist() for s in samples] == [[EOS, 5, 6, 7], [EOS, 8], [EOS]]
    assert [s["target"].tolist() for s in samples] == [[5, 6, 7, EOS], [8, EOS], [EOS]]
