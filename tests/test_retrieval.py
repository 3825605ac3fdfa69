"""Retrieval drafting: the suffix index finds every occurrence, the drafter follows the most
frequent continuation, and decoding with it stays fairseq's greedy output."""
import math
import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pardec_fairseq.decoding.acceptance import ExactAcceptance
from pardec_fairseq.decoding.drafters.retrieval import RetrievalDrafter, SuffixIndex
from test_engine import run_engine
from test_lossless_matches_fairseq import assert_same_hypotheses, fairseq_beam_one
from tiny import build_transformer, make_batch, make_dictionary, write_split

EOS, PAD = 2, 1


@settings(max_examples=60, deadline=None)
@given(text=st.lists(st.integers(2, 6), min_size=1, max_size=60), key_tokens=st.integers(1, 5),
       patterns=st.lists(st.lists(st.integers(2, 6), min_size=1, max_size=5), min_size=1, max_size=8))
def test_ranges_hold_exactly_the_occurrences_of_each_pattern(text, key_tokens, patterns):
    text = np.array(text, dtype=np.int32)
    index = SuffixIndex.build(text, key_tokens)
    patterns = [p[:key_tokens] for p in patterns]
    padded = np.array([p + [0] * (key_tokens - len(p)) for p in patterns])
    lo, hi = index.ranges(padded, np.array([len(p) for p in patterns]))
    for pattern, start, stop in zip(patterns, lo, hi):
        found = sorted(index.suffixes[start:stop].tolist())
        assert found == [i for i in range(text.size) if text[i:i + len(pattern)].tolist() == pattern]


class State:
    def __init__(self, outputs):
        width = max(map(len, outputs)) + 1
        self.tokens = torch.tensor([[EOS] + o + [PAD] * (width - 1 - len(o)) for o in outputs])
        self.lengths = torch.tensor([len(o) for o in outputs])


def corpus(*sentences):
    return np.array([EOS] + [t for s in sentences for t in s + [EOS]], dtype=np.int32)


def test_drafts_follow_the_most_frequent_continuation_of_the_longest_suffix_found():
    index = SuffixIndex.build(corpus([5, 6, 7], [5, 6, 8], [5, 6, 7, 9], [10, 11], [4, 12, 11, 13]), 8)
    drafter = RetrievalDrafter(index, EOS, PAD, max_suffix=8, depth=8, occurrences=256)
    proposal = drafter.propose(State([[5, 6], [], [14], [10, 11], [12, 11]]))
    assert proposal.lengths.tolist() == [2, 4, 0, 1, 2]
    assert proposal.tokens[0, :2].tolist() == [7, EOS]  # 7 twice against 8 once; then EOS, the smaller of a tie
    assert proposal.tokens[1].tolist() == [5, 6, 7, EOS]  # from BOS: the sentence starts
    assert proposal.tokens[3, :1].tolist() == [EOS]  # "10 11" only ends a sentence
    assert proposal.tokens[4, :2].tolist() == [13, EOS]  # "12 11" is longer than "11": it decides

    branching = RetrievalDrafter(index, EOS, PAD, max_suffix=8, depth=3, occurrences=256, branches=2)
    proposal = branching.propose(State([[], [5, 6], [14]]))
    assert proposal.lengths.tolist() == [6, 4, 0]
    # from BOS: "5 6 7" (three sentences start with 5), then "4 12 11" (4 and 10 tie: the smaller token)
    assert proposal.tokens[0].tolist() == [5, 6, 7, 4, 12, 11]
    assert proposal.parents[0].tolist() == [0, 1, 2, 0, 4, 5]
    assert proposal.tokens[1, :4].tolist() == [7, EOS, 8, EOS] and proposal.parents[1, :4].tolist() == [0, 1, 0, 3]

    # "5 6" goes on to 7 in 2 of 3 occurrences, then to EOS in 1 of 2: a share of 0.6 stops before EOS;
    # from BOS, 5 starts 3 of 5 sentences
    agreed = RetrievalDrafter(index, EOS, PAD, max_suffix=8, depth=8, occurrences=256, min_share=0.6)
    proposal = agreed.propose(State([[5, 6], []]))
    assert proposal.lengths.tolist() == [1, 3] and proposal.tokens[1].tolist() == [5, 6, 7]
    with pytest.raises(ValueError, match="--retrieval-min-share"):
        RetrievalDrafter(index, EOS, PAD, max_suffix=8, depth=8, occurrences=256, min_share=1.5)

    shallow = RetrievalDrafter(index, EOS, PAD, max_suffix=1, depth=2, occurrences=1)
    proposal = shallow.propose(State([[5, 6], [10, 11]]))
    assert proposal.lengths.tolist() == [2, 1]  # depth 2, and one sampled occurrence of "6"
    assert proposal.tokens[1, 0].item() == EOS


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), eos_bias=st.floats(-1.0, 2.0), noise=st.sampled_from([0.0, 0.3]),
       max_suffix=st.integers(1, 6), depth=st.integers(1, 6), occurrences=st.sampled_from([1, 3, 256]),
       branches=st.integers(1, 3), min_share=st.sampled_from([0.0, 0.5]),
       batch=st.lists(st.lists(st.integers(4, 23), min_size=1, max_size=10), min_size=1, max_size=6))
def test_retrieval_decoding_is_fairseq_greedy(seed, eos_bias, noise, max_suffix, depth, occurrences, branches,
                                              min_share, batch):
    """The corpus holds the greedy outputs, some with wrong tokens, and random sentences."""
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=seed, layers=2, eos_bias=eos_bias)
    collated = make_batch(dictionary, batch)
    expected = fairseq_beam_one([model], dictionary, collated, max_len_b=30)
    generator = np.random.default_rng(seed)
    sentences = []
    for hypos in expected:
        tokens = hypos[0]["tokens"][:-1].tolist()
        wrong = generator.random(len(tokens)) < noise
        sentences.append([int(generator.integers(4, 24)) if w else t for t, w in zip(tokens, wrong)])
    sentences += [generator.integers(4, 24, size=generator.integers(1, 12)).tolist() for _ in range(4)]
    drafter = RetrievalDrafter(SuffixIndex.build(corpus(*sentences), max_suffix), EOS, PAD, max_suffix, depth,
                               occurrences, branches, min_share)
    actual, _ = run_engine([model], dictionary, collated, drafter, ExactAcceptance(), max_len_b=30)
    assert_same_hypotheses(expected, actual)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), depth=st.integers(1, 8), source=st.lists(st.integers(4, 23), min_size=1,
                                                                               max_size=10))
def test_a_corpus_holding_the_output_drafts_all_of_it(seed, depth, source):
    """Suffixes reach back to BOS (max_suffix beyond the output), so the one sentence is found at every
    pass: each pass keeps ``depth`` drafted tokens and adds the verifier's own."""
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=seed, layers=2)
    collated = make_batch(dictionary, [source])
    expected = fairseq_beam_one([model], dictionary, collated, max_len_b=20)
    output = expected[0][0]["tokens"].tolist()
    drafter = RetrievalDrafter(SuffixIndex.build(corpus(output[:-1]), 24), EOS, PAD, 24, depth, 256)
    actual, stats = run_engine([model], dictionary, collated, drafter, ExactAcceptance(), max_len_b=20)
    assert_same_hypotheses(expected, actual)
    assert stats.iterations == math.ceil(len(output) / (depth + 1))


def test_the_corpus_index_is_cached_beside_the_split_and_rebuilt_when_it_changes(tmp_path):
    dictionary = make_dictionary(20)
    prefix = str(tmp_path / "train.src-tgt.tgt")
    write_split(prefix, [[5, 6, 7], [8, 9]])
    index = SuffixIndex.for_corpus(prefix, dictionary, 4)
    assert index.text.tolist() == corpus([5, 6, 7], [8, 9]).tolist()
    cache = tmp_path / "train.src-tgt.tgt.suffix-index.npz"
    assert cache.exists()

    os.utime(cache, ns=(0, 0))  # a cache that is loaded, not rebuilt, is not written again
    assert SuffixIndex.for_corpus(prefix, dictionary, 4).text.tolist() == index.text.tolist()
    assert cache.stat().st_mtime_ns == 0

    write_split(prefix, [[5, 6, 7], [8, 9], [10]])
    assert SuffixIndex.for_corpus(prefix, dictionary, 4).text.tolist() == corpus([5, 6, 7], [8, 9], [10]).tolist()
    assert cache.stat().st_mtime_ns > 0


def test_a_missing_or_foreign_corpus_is_named(tmp_path):
    dictionary = make_dictionary(20)
    with pytest.raises(FileNotFoundError, match="--retrieval-corpus"):
        SuffixIndex.for_corpus(str(tmp_path / "absent"), dictionary, 4)
    write_split(str(tmp_path / "big"), [[5, 6, 70]])
    with pytest.raises(ValueError, match="beyond the target dictionary"):
        SuffixIndex.for_corpus(str(tmp_path / "big"), dictionary, 4)
    index = SuffixIndex.build(corpus([5]), 4)
    with pytest.raises(ValueError, match="--retrieval-max-suffix"):
        RetrievalDrafter(index, EOS, PAD, max_suffix=5, depth=2, occurrences=2)
