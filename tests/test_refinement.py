"""Draft refinement (Kim et al. 2024): the n-gram model, the k-best search over the heads' lattice,
the tree of its paths, and bpd with refined drafts still fairseq's greedy output."""
import argparse
import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pardec_fairseq.decoding import DecodingConfig, build_generator
from pardec_fairseq.decoding.drafters.blockwise import BlockwiseHeadsDrafter
from pardec_fairseq.decoding.drafters.ngram_lm import NgramLM
from pardec_fairseq.decoding.drafters.refinement import Lattice, LatticeRescoring, tree_of_paths
from test_lossless_matches_fairseq import (GENERATION_DEFAULTS, assert_same_hypotheses, fairseq_beam_one, model_for,
                                           plugin, sentences)
from test_retrieval import EOS, State, corpus, write_split
from tiny import make_batch, make_dictionary


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


def test_rescoring_repairs_a_repeated_draft():
    """Heads 2 and 3 both say 7 first (Kim et al.'s repetition); the corpus never repeats it."""
    lm = NgramLM(corpus([6, 7, 8], [6, 7, 9], [7, 8]), order=2, vocab_size=20)
    lattice = Lattice(torch.tensor([[[7, 8], [7, 8]]]), torch.log(torch.tensor([[[0.6, 0.4], [0.55, 0.45]]])))
    state = State([[6]])
    plain = LatticeRescoring(drafts=1).propose(lattice, state)
    assert plain.tokens.tolist() == [[7, 7]]
    refined = LatticeRescoring(drafts=1, lm=lm, weight=1.0).propose(lattice, state)
    assert refined.tokens.tolist() == [[7, 8]] and refined.lengths.tolist() == [2] and refined.parents is None
    # two drafts: 7 8, then 7 7 (8 after 6 and 7 after 8 were never seen), sharing their first node
    both = LatticeRescoring(drafts=2, lm=lm, weight=1.0).propose(lattice, state)
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
    rescoring = LatticeRescoring(drafts, NgramLM(text, order, 20) if with_lm else None, weight)
    tokens = np.stack([np.stack([generator.permutation(np.arange(4, 10))[:k] for _ in range(positions)])
                       for _ in range(rows)])
    scores = np.log(generator.dirichlet(np.ones(k), size=(rows, positions)))
    context = generator.integers(4, 9, size=(rows, rescoring.remembered))
    context_lengths = np.array([data.draw(st.integers(1, rescoring.remembered)) for _ in range(rows)])
    paths, found = rescoring.best_paths(tokens, scores, context, context_lengths)
    for row in range(rows):
        every = sorted((path_score(rescoring, tokens[row], scores[row], context[row], context_lengths[row],
                                   [tokens[row, j, c] for j, c in enumerate(choice)])
                        for choice in itertools.product(range(k), repeat=positions)), reverse=True)
        kept = paths[row][found[row]]
        assert len(kept) == min(drafts, k ** positions) and len({tuple(p) for p in kept}) == len(kept)
        got = [path_score(rescoring, tokens[row], scores[row], context[row], context_lengths[row], p) for p in kept]
        assert got == pytest.approx(every[:len(kept)])


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
    drafter = BlockwiseHeadsDrafter(model.decoder, LatticeRescoring(drafts, lm, weight), top_k)
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
