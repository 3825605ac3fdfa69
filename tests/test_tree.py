"""Several drafts in one pass: a tree per row, scored with ancestor-only attention, its longest
accepted path kept. Trees give fairseq's greedy output and the scores of separate chain passes."""
import argparse
import math
import random

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pardec_fairseq.decoding import DecodingConfig, build_generator
from pardec_fairseq.decoding.acceptance import ExactAcceptance, RelaxedAcceptance, in_top_k, tree_verdict
from pardec_fairseq.decoding.drafters import Drafter
from pardec_fairseq.decoding.fairseq_verifier import FairseqVerifier
from pardec_fairseq.decoding.fast_layers import FastCache
from pardec_fairseq.decoding.fast_verifier import FastVerifier
from pardec_fairseq.decoding.options import DecodingOptions
from pardec_fairseq.decoding.proposals import DraftTree, Proposal
from pardec_fairseq.decoding.verifier import _fairseq_log_probs
from test_engine import run_engine
from test_retrieval import write_split
from test_lossless_matches_fairseq import GENERATION_DEFAULTS, assert_same_hypotheses, fairseq_beam_one
from tiny import build_transformer, make_batch, make_dictionary


def random_tree(rng, reference, depth, branches, noise, vocab):
    """(tokens, parents) of one row: the reference continuation from the last accepted token (tokens
    wrong with probability ``noise``) and ``branches`` random branches hanging off any earlier node,
    the branches in random order; a parent always comes before its child."""
    tokens, parents = [], []
    chains = [(True, [(t if rng.random() >= noise else rng.randrange(4, vocab)) for t in reference[:depth]])]
    chains += [(False, [rng.randrange(4, vocab) for _ in range(rng.randint(1, 3))]) for _ in range(branches)]
    rng.shuffle(chains)
    for from_root, chain in chains:
        parent = 0 if from_root else rng.randint(0, len(tokens))  # 0: the last accepted token
        for token in chain:
            tokens.append(token)
            parents.append(parent)
            parent = len(tokens)  # this node's pass position
    return tokens, parents


class TreeDrafter(Drafter):
    def __init__(self, references, depth, branches, noise, vocab, seed):
        self.references, self.depth, self.branches, self.noise, self.vocab = references, depth, branches, noise, vocab
        self.rng = random.Random(seed)

    def propose(self, state):
        trees = [random_tree(self.rng, self.references[row][length:], self.depth, self.branches, self.noise,
                             self.vocab) for row, length in zip(state.rows.tolist(), state.lengths.tolist())]
        k = max(len(tokens) for tokens, _ in trees)
        return Proposal(tokens=torch.tensor([t + [1] * (k - len(t)) for t, _ in trees]).view(len(trees), k),
                        lengths=torch.tensor([len(t) for t, _ in trees]),
                        parents=torch.tensor([p + [0] * (k - len(p)) for _, p in trees]).view(len(trees), k))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), depth=st.integers(1, 6), branches=st.integers(0, 4),
       noise=st.sampled_from([0.0, 0.2, 0.6]), eos_bias=st.floats(-1.0, 2.0),
       batch=st.lists(st.lists(st.integers(4, 23), min_size=1, max_size=10), min_size=1, max_size=5))
def test_tree_drafts_keep_the_greedy_output(seed, depth, branches, noise, eos_bias, batch):
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=seed, layers=2, eos_bias=eos_bias)
    collated = make_batch(dictionary, batch)
    expected = fairseq_beam_one([model], dictionary, collated, max_len_b=25)
    references = [h[0]["tokens"].tolist() for h in expected]
    drafter = TreeDrafter(references, depth, branches, noise, len(dictionary), seed)
    actual, stats = run_engine([model], dictionary, collated, drafter, ExactAcceptance(), max_len_b=25)
    assert_same_hypotheses(expected, actual)
    if noise == 0.0:  # the reference branch is always right (a random branch may be right beyond it)
        passes = sum(math.ceil(len(r) / (depth + 1)) for r in references)
        assert stats.iterations == passes if branches == 0 else stats.iterations <= passes


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), rows=st.integers(1, 4), branches=st.integers(1, 4), data=st.data())
def test_a_tree_pass_scores_each_branch_as_its_own_chain_pass_and_keeps_the_chosen_path(seed, rows, branches, data):
    """After a prefix pass, one tree pass gives every path the log-probabilities a chain pass of that
    path gives; keeping a path leaves the cache as the chain pass kept in full does."""
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=seed, layers=2)
    batch = make_batch(dictionary, [data.draw(st.lists(st.integers(4, 23), min_size=1, max_size=8))
                                    for _ in range(rows)])
    rng = random.Random(seed)
    prefix_n = data.draw(st.integers(1, 4))
    kept = torch.tensor([rng.randint(1, prefix_n) for _ in range(rows)])
    prefix = torch.randint(4, 24, (rows, prefix_n), generator=torch.Generator().manual_seed(seed))
    trees = [random_tree(rng, [], 0, branches, 0.0, 24) for _ in range(rows)]
    k = max(len(t) for t, _ in trees)
    proposal = Proposal(tokens=torch.tensor([t + [1] * (k - len(t)) for t, _ in trees]),
                        lengths=torch.tensor([len(t) for t, _ in trees]),
                        parents=torch.tensor([p + [0] * (k - len(p)) for _, p in trees]))
    tree = DraftTree.of(proposal)
    last = torch.randint(4, 24, (rows, 1), generator=torch.Generator().manual_seed(seed + 1))
    max_len = prefix_n + k + 4
    verifier = FastVerifier([model], dictionary, DecodingOptions())
    zeros = torch.zeros(rows, dtype=torch.long)

    def after_prefix():
        cache = verifier.start(batch["net_input"], max_len)
        verifier.score(cache, prefix, zeros, max_len)
        verifier.rollback(cache, zeros, kept, prefix_n)
        return cache

    with torch.no_grad():
        tree_cache = after_prefix()
        tree_lprobs = verifier.score(tree_cache, torch.cat([last, proposal.tokens], 1), kept, max_len, tree).all()
        deepest = (tree.depth * (torch.arange(k + 1) <= proposal.lengths.unsqueeze(1))).argmax(1)
        for leaf in range(1, k + 1):
            # each row's path to node `leaf` (or to its deepest node, for rows with fewer nodes)
            ends = torch.where(torch.tensor(leaf) <= proposal.lengths, torch.tensor(leaf), deepest)
            on_path = tree.sees[torch.arange(rows), ends]
            paths = [torch.nonzero(row).squeeze(1) for row in on_path.unbind()]  # by position, so by depth
            width = max(len(p) for p in paths)
            path = torch.stack([torch.cat([p, torch.arange(len(p), width)]) for p in paths])
            chain_tokens = torch.cat([last, proposal.tokens], 1).gather(1, path)
            chain_cache = after_prefix()
            chain_lprobs = verifier.score(chain_cache, chain_tokens, kept, max_len).all()
            for r, p in enumerate(paths):
                torch.testing.assert_close(tree_lprobs[r, p], chain_lprobs[r, :len(p)], rtol=1e-4, atol=1e-5)
            # keep the path, then one more token: as after the chain pass kept in full
            path_cache = after_prefix()
            verifier.score(path_cache, torch.cat([last, proposal.tokens], 1), kept, max_len, tree)
            path_lengths = torch.tensor([len(p) for p in paths])
            verifier.rollback(path_cache, kept, path_lengths, k + 1, path)
            verifier.rollback(chain_cache, kept, path_lengths, width)
            following = torch.full((rows, 1), 7)
            after_path = verifier.score(path_cache, following, kept + path_lengths, max_len).all()
            after_chain = verifier.score(chain_cache, following, kept + path_lengths, max_len).all()
            torch.testing.assert_close(after_path, after_chain, rtol=1e-4, atol=1e-5)


class TreeScores:
    """Stands in for ``VerifierScores`` of a tree pass with given log-probabilities and fairseq steps, and
    with ``logits`` and ``rule`` the logits they were normalised from (``fairseq_log_probs_into``'s)."""

    def __init__(self, lprobs, tree, steps, max_len, logits=None, rule=None):
        self.lprobs, self.tree, self.steps, self.max_len = lprobs, tree, steps, max_len
        self.given_logits, self.rule = logits, rule

    def logits(self, stop):
        return None if self.given_logits is None else self.given_logits[:, :stop].contiguous().numpy()

    def log_prob_rule(self):
        return self.rule

    def span(self, start, stop, rows=None, needed=None):
        if needed is None:
            return self.lprobs[:, start:stop]
        return self.lprobs[:, start:stop].masked_fill(~needed.unsqueeze(-1), -math.inf)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), rows=st.integers(1, 4), branches=st.integers(0, 5), vocab=st.integers(2, 12),
       coarse=st.booleans(), max_len=st.integers(0, 8), handed_logits=st.booleans())
def test_exact_acceptance_of_a_tree_keeps_the_deepest_path_of_fairseqs_choices(seed, rows, branches, vocab, coarse,
                                                                                 max_len, handed_logits):
    """Walked by hand with fairseq's ``topk`` from the last accepted token: the deepest node (the first
    of the deepest) whose path holds the choice at every step within the length limit, its choices and
    scores. With ``coarse`` scores many are tied (``topk`` decides those) and some -inf; small
    vocabularies give siblings with one token. With ``handed_logits`` the verifier hands over logits,
    which the ranking normalises where it reaches (pad, an unknown word's penalty, EOS's length rules)."""
    rng, generator = random.Random(seed), torch.Generator().manual_seed(seed)
    trees = [random_tree(rng, [rng.randrange(vocab) for _ in range(4)], rng.randint(0, 4), branches, 0.3, 24)
             for _ in range(rows)]
    trees = [([t % vocab for t in tokens], parents) for tokens, parents in trees]
    k = max(1, max(len(t) for t, _ in trees))
    proposal = Proposal(tokens=torch.tensor([t + [0] * (k - len(t)) for t, _ in trees]),
                        lengths=torch.tensor([len(t) for t, _ in trees]),
                        parents=torch.tensor([p + [0] * (k - len(p)) for _, p in trees]))
    tree = DraftTree.of(proposal)
    logits = torch.randn(rows, k + 1, vocab, generator=generator)
    if coarse:
        logits = logits.round().masked_fill(torch.rand(rows, k + 1, vocab, generator=generator) < 0.2, -math.inf)
        logits[..., 0] = 0.0
    lprobs = torch.log_softmax(logits, -1)
    steps = torch.randint(0, 3, (rows, 1), generator=generator) + tree.depth
    running = -torch.rand(rows, generator=generator) * 5
    scores = TreeScores(lprobs, tree, steps, max_len)
    if handed_logits:  # pad 1, unknown 0 penalised, EOS 2 forced from step max_len, forbidden before step 1
        rule = (max_len, 1, 1 % vocab, 0, np.float32(0.5), 2 % vocab)
        lprobs = torch.from_numpy(_fairseq_log_probs(logits.view(-1, vocab).numpy(), steps.reshape(-1).numpy(),
                                                     rule)).view(logits.shape)
        scores = TreeScores(lprobs, tree, steps, max_len, logits, rule)
    verdict = ExactAcceptance().accept(proposal, scores, running)
    # on a CPU one compiled call reads the path off; the torch version, which a GPU runs, reads the same
    real = torch.arange(k + 1) <= proposal.lengths.unsqueeze(1)
    with_last = torch.cat([proposal.tokens.new_zeros(rows, 1), proposal.tokens], 1)
    top_scores, top_tokens, deepest = ExactAcceptance._rank_every_node(scores.span(0, k + 1, None, real), with_last,
                                                                       tree, real, steps <= max_len, running)
    expected = tree_verdict(tree, deepest, top_scores, top_tokens)
    assert torch.equal(verdict.accepted, expected.accepted) and torch.equal(verdict.path, expected.path)
    for row, (tokens, parents) in enumerate(trees):
        def walk(position, before):
            """(depth, position) of the deepest kept node under ``position``, and the choices on its path."""
            top = torch.topk(lprobs[row, position] + before, k=2 if vocab > 1 else 1)
            choice, score = int(top.indices[0]), top.values[0]
            best = (0, -position, [(choice, float(score))], position)
            for child in range(1, len(tokens) + 1):
                if parents[child - 1] == position and tokens[child - 1] == choice and steps[row, child] <= max_len:
                    depth, first, path, deepest = walk(child, score)
                    if (depth + 1, first) > best[:2]:
                        best = (depth + 1, first, [(choice, float(score))] + path, deepest)
            return best
        depth, _, path, _ = walk(0, running[row])
        assert int(verdict.accepted[row]) == depth
        assert verdict.tokens[row, :depth + 1].tolist() == [token for token, _ in path]
        assert verdict.cumulative[row, :depth + 1].tolist() == [score for _, score in path]


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 3), n=st.integers(1, 7), data=st.data())
def test_the_compiled_path_move_is_the_vectorised_one(rows, n, data):
    """On a CPU a tree's accepted path moves in the cache in one compiled call: the same buffers as the
    torch operations a GPU runs, for paths of any depth (a position at least its depth, increasing)."""
    valid = torch.tensor(data.draw(st.lists(st.integers(0, 4), min_size=rows, max_size=rows)))
    m = data.draw(st.integers(1, n))
    path = torch.arange(m).repeat(rows, 1)
    for row in range(rows):
        kept = data.draw(st.lists(st.integers(1, n - 1), max_size=m - 1, unique=True)) if n > 1 else []
        path[row, 1:len(kept) + 1] = torch.tensor(sorted(kept), dtype=torch.long)
    buffers = torch.randn(2, 2, rows, 3, 4 + n, 5, generator=torch.Generator().manual_seed(n))
    compiled, vectorised = (FastCache(buffers.clone(), None, None, None, None) for _ in range(2))
    compiled.keep_path(valid, path)
    vectorised.keep_path_vectorised(valid, path)
    assert torch.equal(compiled.buffers, vectorised.buffers)


def test_trees_are_refused_where_they_cannot_be_scored():
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=0, layers=1)
    batch = make_batch(dictionary, [[4, 5, 6]])
    proposal = Proposal(tokens=torch.tensor([[5, 6]]), lengths=torch.tensor([2]), parents=torch.tensor([[0, 0]]))
    tree = DraftTree.of(proposal)
    verifier = FairseqVerifier([model], dictionary, DecodingOptions())
    with pytest.raises(ValueError, match="--verifier fast"):
        verifier.score(verifier.start(batch["net_input"], 10), torch.tensor([[2, 5, 6]]), torch.tensor([0]), 10, tree)
    fast = FastVerifier([model], dictionary, DecodingOptions())
    with torch.no_grad():
        scores = fast.score(fast.start(batch["net_input"], 10), torch.tensor([[2, 5, 6]]), torch.tensor([0]), 10, tree)
    with pytest.raises(ValueError, match="--acceptance exact"):
        RelaxedAcceptance(in_top_k(2)).accept(proposal, scores, torch.zeros(1))
    with pytest.raises(ValueError, match="parent must come before"):
        DraftTree.of(Proposal(tokens=torch.tensor([[5, 6]]), lengths=torch.tensor([2]), parents=torch.tensor([[0, 2]])))


@pytest.mark.parametrize("algorithm, options", [("lookahead", {}), ("retrieval", {"retrieval_branches": 2})])
def test_tree_drafting_algorithms_are_refused_on_the_fairseq_path_at_start(algorithm, options, tmp_path):
    """Not at the first pass: the generator is never built."""
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=0, layers=1)
    corpus = tmp_path / "train.src-tgt.tgt"
    write_split(str(corpus), [[5, 6, 7]])
    config = DecodingConfig(verifier="fairseq", retrieval_corpus=str(corpus), **options)
    generation = argparse.Namespace(**GENERATION_DEFAULTS)
    with pytest.raises(ValueError, match=f"--gen-algo {algorithm} verifies several drafts per pass as a tree"):
        build_generator(algorithm, [model], dictionary, generation, config)
    build_generator(algorithm, [model], dictionary, generation, DecodingConfig(retrieval_corpus=str(corpus), **options))
