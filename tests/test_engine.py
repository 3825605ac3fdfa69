"""The draft -> verify -> accept engine: long accepted drafts, rows that accept different amounts,
the acceptance rules, and the drafters' proposals on hand-checked cases."""
import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pardec_fairseq.decoding.acceptance import (ExactAcceptance, RelaxedAcceptance, _accept_top_beta, build_acceptance,
                                                fairseq_top_one, in_top_beta_within_tau, in_top_k, within_distance)
from pardec_fairseq.decoding.config import DecodingConfig
from pardec_fairseq.decoding.drafters import Drafter
from pardec_fairseq.decoding.drafters.input_copy import InputCopyDrafter
from pardec_fairseq.decoding.drafters.jacobi import JacobiDrafter
from pardec_fairseq.decoding.engine import DecodingState, DraftVerifyDecoder
from pardec_fairseq.decoding.generator import ParallelDecodingGenerator
from pardec_fairseq.decoding.observers import LoopObserver
from pardec_fairseq.decoding.options import DecodingOptions
from pardec_fairseq.decoding.proposals import Proposal, Verdict, first_kept_ends, first_kept_ends_compiled
from pardec_fairseq.decoding.registry import build_verifier
from pardec_fairseq.decoding.stats import _count_pass, count_pass
from test_lossless_matches_fairseq import assert_same_hypotheses, fairseq_beam_one, plugin
from tiny import build_transformer, make_batch, make_dictionary


class ReferenceDrafter(Drafter):
    """Drafts the known output of each sentence, each drafted token replaced by a wrong one with
    probability ``noise``: drafts are accepted for long stretches and rejected at random places."""

    def __init__(self, references, block, noise, vocab, seed):
        self.references, self.block, self.noise, self.vocab = references, block, noise, vocab
        self.random = random.Random(seed)

    def propose(self, state):
        drafts = []
        for row, length in zip(state.rows.tolist(), state.lengths.tolist()):
            reference = self.references[row][length:length + self.block]
            drafts.append([t if self.random.random() >= self.noise else self.random.randrange(4, self.vocab)
                           for t in reference])
        k = max(map(len, drafts))
        tokens = torch.tensor([d + [1] * (k - len(d)) for d in drafts], dtype=torch.long).view(len(drafts), k)
        return Proposal(tokens=tokens, lengths=torch.tensor([len(d) for d in drafts]))


class FixedScores:
    """Stands in for ``VerifierScores`` with given log-probabilities."""

    def __init__(self, lprobs):
        self.lprobs = lprobs

    def span(self, start, stop, rows=None, needed=None):
        lprobs = (self.lprobs if rows is None else self.lprobs[rows])[:, start:stop]
        return lprobs if needed is None else lprobs.masked_fill(~needed.unsqueeze(-1), -math.inf)

    def all(self):
        return self.lprobs


def run_engine(models, dictionary, batch, drafter, acceptance, **generation):
    options = DecodingOptions(**generation)
    verifier = build_verifier("fast", models, dictionary, options)
    decoder = DraftVerifyDecoder(verifier, drafter, acceptance, dictionary, options)
    generator = ParallelDecodingGenerator("test", decoder, dictionary, options)
    return generator.generate(models, batch), generator.stats


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), block=st.integers(1, 12), noise=st.sampled_from([0.0, 0.1, 0.4]),
       eos_bias=st.floats(-1.0, 2.0), first_chunk=st.sampled_from([1, 3, 16]),
       batch=st.lists(st.lists(st.integers(4, 23), min_size=1, max_size=10), min_size=1, max_size=6))
def test_long_accepted_drafts_and_uneven_rows_keep_the_greedy_output(seed, block, noise, eos_bias, first_chunk,
                                                                     batch):
    """Drafts longer than the acceptance's first chunk (``first_chunk`` < ``block``) are ranked in chunks."""
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=seed, layers=2, eos_bias=eos_bias)
    collated = make_batch(dictionary, batch)
    expected = fairseq_beam_one([model], dictionary, collated, max_len_b=30)
    references = [h[0]["tokens"].tolist() for h in expected]
    drafter = ReferenceDrafter(references, block, noise, len(dictionary), seed)
    acceptance = ExactAcceptance(chunk_range=(first_chunk, first_chunk))
    actual, stats = run_engine([model], dictionary, collated, drafter, acceptance, max_len_b=30)
    assert_same_hypotheses(expected, actual)
    if noise == 0.0:  # every drafted token is right: block + 1 tokens per pass, counted per sentence
        lengths = dict(zip(collated["id"].tolist(), map(len, references)))
        for sentence in stats.per_sentence:  # rows sit in the batch by source length, not by id
            assert sentence.hyp_len == lengths[sentence.id]
            assert sentence.iterations == math.ceil(sentence.hyp_len / (block + 1))
            assert sentence.accepted_drafts == sentence.drafted
            # each pass adds the verifier's own token, except a last pass that ends on a drafted EOS
            assert sentence.hyp_len - sentence.accepted_drafts in (sentence.iterations, sentence.iterations - 1)
        assert stats.draft_acceptance == 1.0


class EndRecorder(LoopObserver):
    """Records the batch rows each ``rows_ended`` call names and the rows of the state at each pass."""

    def __init__(self):
        self.ended, self.passes = [], []

    def batch_started(self, rows, device):
        self.rows = rows

    def after_pass(self, state, proposal, scores, verdict):
        self.passes.append(state.rows.tolist())

    def rows_ended(self, state, ended):
        self.ended.extend(state.rows[ended].tolist())


def test_observers_see_every_sentence_end_once_and_the_counts_follow_rows_that_leave():
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=3, eos_bias=0.5)
    collated = make_batch(dictionary, [[4, 5, 6], [7, 8, 9, 10, 11, 12, 13], [14], [15, 16, 17, 18]])
    options = DecodingOptions(max_len_b=20)
    decoder = DraftVerifyDecoder(build_verifier("fast", [model], dictionary, options),
                                 JacobiDrafter(dictionary.pad(), block_size=3), ExactAcceptance(), dictionary, options)
    generator = ParallelDecodingGenerator("test", decoder, dictionary, options)
    recorder = EndRecorder()
    decoder.observers.append(recorder)
    generator.generate([model], collated)
    assert recorder.rows == 4 and sorted(recorder.ended) == [0, 1, 2, 3]
    rows_of_sentence = {int(i): row for row, i in enumerate(collated["id"].tolist())}
    for sentence in generator.stats.per_sentence:  # passes while the sentence's row was in the batch
        row = rows_of_sentence[sentence.id]
        assert sentence.iterations == sum(row in rows for rows in recorder.passes)


def test_relaxed_rules_keep_correct_drafts_and_minimum_blocks_force_wrong_ones():
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=4, eos_bias=0.5)
    collated = make_batch(dictionary, [[4, 5, 6], [7, 8, 9, 10, 11]])
    expected = fairseq_beam_one([model], dictionary, collated, max_len_b=20)
    references = [h[0]["tokens"].tolist() for h in expected]
    for rule in (RelaxedAcceptance(in_top_k(3)), RelaxedAcceptance(in_top_beta_within_tau(3, 1.0))):
        actual, _ = run_engine([model], dictionary, collated, ReferenceDrafter(references, 4, 0.0, 20, 0),
                               rule, max_len_b=20)
        assert_same_hypotheses(expected, actual)

    unk = dictionary.unk()

    class UnknownWordDrafter(Drafter):  # drafts <unk> four times, which the penalty below rules out
        def propose(self, state):
            rows = state.lengths.size(0)
            return Proposal(tokens=torch.full((rows, 4), unk), lengths=torch.full((rows,), 4))

    actual, stats = run_engine([model], dictionary, collated, UnknownWordDrafter(),
                               build_acceptance(DecodingConfig(min_block_size=3)), max_len_b=20, unk_penalty=100.0)
    for hypos in actual:  # each pass keeps two drafted <unk>, then the verifier's token
        tokens = hypos[0]["tokens"].tolist()
        assert all(tokens[i:i + 2] == [unk, unk] and tokens[i + 2] != unk for i in range(0, len(tokens) - 2, 3))
    assert stats.iterations == sum(math.ceil(len(h[0]["tokens"]) / 3) for h in actual)


def test_acceptance_rules_on_hand_checked_scores():
    #            position 0: best 5, then 6 (gap 0.5), 7 (gap 2.0); position 1: best 9
    lprobs = torch.full((1, 3, 12), -20.0)
    lprobs[0, 0, 5], lprobs[0, 0, 6], lprobs[0, 0, 7] = -0.1, -0.6, -2.1
    lprobs[0, 1, 9], lprobs[0, 1, 8] = -0.2, -0.3
    lprobs[0, 2, 3] = -0.05
    lprobs = FixedScores(lprobs)
    draft = Proposal(tokens=torch.tensor([[6, 8]]), lengths=torch.tensor([2]))
    zero = torch.zeros(1)

    exact = ExactAcceptance().accept(draft, lprobs, zero)
    assert exact.accepted.tolist() == [0] and exact.tokens[0, 0].item() == 5
    assert exact.cumulative[0, 0].item() == torch.tensor(-0.1).item()
    top_two = RelaxedAcceptance(in_top_k(2)).accept(draft, lprobs, zero)
    assert top_two.accepted.tolist() == [2] and top_two.tokens[0].tolist() == [6, 8, 3]
    torch.testing.assert_close(top_two.cumulative, torch.tensor([[-0.6, -0.9, -0.95]]))
    assert RelaxedAcceptance(in_top_beta_within_tau(3, 0.4)).accept(draft, lprobs, zero).accepted.tolist() == [0]
    assert RelaxedAcceptance(in_top_beta_within_tau(3, 0.6)).accept(draft, lprobs, zero).accepted.tolist() == [2]
    far = Proposal(tokens=torch.tensor([[7, 9]]), lengths=torch.tensor([2]))
    assert RelaxedAcceptance(in_top_beta_within_tau(3, 1.0)).accept(far, lprobs, zero).accepted.tolist() == [0]
    assert RelaxedAcceptance(within_distance(2)).accept(far, lprobs, zero).accepted.tolist() == [2]
    assert RelaxedAcceptance(within_distance(1)).accept(far, lprobs, zero).accepted.tolist() == [0]
    short = Proposal(tokens=torch.tensor([[5, 9]]), lengths=torch.tensor([1]))  # the 9 is filler
    assert ExactAcceptance().accept(short, lprobs, zero).accepted.tolist() == [1]


def follow_greedy(tokens, row, lprobs, before, count):
    """Draft fairseq's beam-1 choice into ``tokens[row, :count]``, from the running score ``before``."""
    for j in range(count):
        top = torch.topk(lprobs[row, j] + before, k=2)
        tokens[row, j], before = top.indices[0], top.values[0]


def sequential_greedy_reference(lprobs, proposal, running):
    """What fairseq's beam 1 keeps of each row's draft, one position at a time with ``topk``: the drafted
    tokens kept, and the choices and cumulative scores up to the first rejected position."""
    kept, choices = [], []
    for row in range(lprobs.size(0)):
        before, tokens, scores = running[row], [], []
        for j in range(int(proposal.lengths[row]) + 1):
            top = torch.topk(lprobs[row, j] + before, k=2)
            tokens.append(int(top.indices[0]))
            scores.append(float(top.values[0]))
            before = top.values[0]
            if j == int(proposal.lengths[row]) or tokens[-1] != int(proposal.tokens[row, j]):
                break
        kept.append(len(tokens) - 1)
        choices.append((tokens, scores))
    return kept, choices


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), rows=st.integers(1, 4), k=st.integers(0, 40), vocab=st.integers(2, 40),
       coarse=st.booleans(), first_chunk=st.sampled_from([1, 2, 16]), whole=st.booleans())
def test_exact_acceptance_keeps_what_fairseqs_topk_keeps_position_by_position(seed, rows, k, vocab, coarse,
                                                                                first_chunk, whole):
    """Drafts that follow the greedy choice for a random stretch; with ``coarse`` scores, many tied
    (fairseq's ``topk`` decides those) and some -inf, as forbidden tokens are; ranked in chunks, or
    (``whole``) in one call as the rule does once earlier passes showed that it pays."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, k + 1, vocab, generator=generator)
    if coarse:
        logits = logits.round().masked_fill(torch.rand(rows, k + 1, vocab, generator=generator) < 0.2, -math.inf)
        logits[..., 0] = 0.0  # at least one token allowed
    lprobs = torch.log_softmax(logits, -1).contiguous()
    running = -torch.rand(rows, generator=generator) * 5
    lengths = torch.randint(0, k + 1, (rows,), generator=generator)
    tokens = torch.randint(0, vocab, (rows, k), generator=generator)
    greedy_stretch = torch.randint(0, k + 1, (rows,), generator=generator)
    for row in range(rows):  # follow fairseq's choice for a while, so that long prefixes are kept
        follow_greedy(tokens, row, lprobs, running[row], int(greedy_stretch[row]))
    proposal = Proposal(tokens=tokens, lengths=lengths)
    acceptance = ExactAcceptance(chunk_range=(first_chunk, first_chunk))
    acceptance.merging_gain = 1.0 if whole else 0.0
    verdict = acceptance.accept(proposal, FixedScores(lprobs), running)
    kept, choices = sequential_greedy_reference(lprobs, proposal, running)
    assert verdict.accepted.tolist() == kept
    for row, (tokens, scores) in enumerate(choices):
        assert verdict.tokens[row, :len(tokens)].tolist() == tokens
        assert verdict.cumulative[row, :len(scores)].tolist() == scores


class CountedScores(FixedScores):
    """``FixedScores`` that count the calls ranking positions."""

    def __init__(self, lprobs):
        super().__init__(lprobs)
        self.calls = 0

    def span(self, start, stop, rows=None, needed=None):
        self.calls += 1
        return super().span(start, stop, rows, needed)


def test_exact_acceptance_ranks_whole_passes_while_splitting_them_does_not_pay():
    """A fresh rule ranks a 25-position pass as 16 + 9; after passes whose first chunk was kept whole it
    ranks such passes in one call; after passes rejected early it splits them again."""
    generator = torch.Generator().manual_seed(0)
    lprobs = torch.log_softmax(torch.randn(1, 25, 30, generator=generator), -1)
    running = torch.zeros(1)
    right = Proposal(tokens=torch.zeros(1, 24, dtype=torch.long), lengths=torch.tensor([24]))
    follow_greedy(right.tokens, 0, lprobs, running[0], 24)
    wrong = Proposal(tokens=right.tokens.clone(), lengths=right.lengths)
    wrong.tokens[0, 0] = (wrong.tokens[0, 0] + 1) % 30
    acceptance = ExactAcceptance()

    def calls(proposal):
        scores = CountedScores(lprobs)
        verdict = acceptance.accept(proposal, scores, running)
        assert verdict.accepted.tolist() == ([24] if proposal is right else [0])
        return scores.calls

    assert calls(right) == 2
    assert [calls(right) for _ in range(3)] == [1, 1, 1]
    while acceptance.merging_gain > 0:  # each early rejection: 9 positions a split would not have run
        assert calls(wrong) == 1
    assert calls(right) == 2


def state_with_output(outputs, pad=1, bos=2):
    """A decoding state whose rows have accepted ``outputs`` (lists of token ids)."""
    width = max(map(len, outputs)) + 2
    tokens = torch.full((len(outputs), width), pad)
    tokens[:, 0] = bos
    for row, output in enumerate(outputs):
        tokens[row, 1:len(output) + 1] = torch.tensor(output, dtype=torch.long)
    return SimpleNamespace(tokens=tokens, lengths=torch.tensor([len(o) for o in outputs]))


def test_input_copy_drafts_after_a_unique_source_match():
    dictionary = make_dictionary(20)
    eos, pad = dictionary.eos(), dictionary.pad()
    drafter = InputCopyDrafter(dictionary, dictionary, min_ngram=1, max_ngram=3)
    #        source: 4 5 6 4 5 7 8 EOS (left-padded in its batch)
    source = torch.tensor([[pad, 4, 5, 6, 4, 5, 7, 8, eos]] * 6)
    drafter.begin({"src_tokens": source}, max_len=30)
    proposal = drafter.propose(state_with_output([[], [6], [4, 5], [9, 4, 5, 7], [4, 9], [6, 4, 5]]))
    drafts = [proposal.tokens[r, :n].tolist() for r, n in enumerate(proposal.lengths.tolist())]
    assert drafts == [
        [4, 5, 6, 4, 5, 7, 8, eos],  # nothing generated yet: the whole source
        [4, 5, 7, 8, eos],  # "6" occurs once
        [],  # "5" twice, "4 5" twice, "? 4 5" has too few tokens: no unique match
        [8, eos],  # "7" occurs once
        [],  # "9" does not occur
        [7, 8, eos],  # "5", "4 5" twice; "6 4 5" once
    ]
    longer_only = InputCopyDrafter(dictionary, dictionary, min_ngram=2, max_ngram=2)
    longer_only.begin({"src_tokens": source[:1]}, max_len=30)
    assert longer_only.propose(state_with_output([[6]])).lengths.tolist() == [0]  # 1 token < 2


def test_input_copy_reenters_near_the_expected_source_position():
    dictionary = make_dictionary(20)
    eos, pad = dictionary.eos(), dictionary.pad()
    #        source positions: 1 2 3 4 5 6 7 8 9 10 (0 is padding)
    source = torch.tensor([[pad, 4, 5, 6, 4, 5, 7, 8, 4, 5, 9, eos]])
    drafts = {}
    for reentry in ("unique", "nearest", "expected"):
        drafter = InputCopyDrafter(dictionary, dictionary, max_ngram=2, reentry=reentry)
        drafter.begin({"src_tokens": source}, max_len=30)
        first = drafter.propose(state_with_output([[]]))
        assert first.lengths.tolist() == [11]
        # the verifier kept 6 drafted tokens and chose 13 instead of "8": the copy would go on at
        # source position 8 (after 6 + 1 tokens); "13" does not occur in the source
        drafter.update(None, SimpleNamespace(accepted=torch.tensor([6])), None)
        after_substitution = drafter.propose(state_with_output([[4, 5, 6, 4, 5, 7, 13]]))
        drafter.update(None, SimpleNamespace(accepted=torch.tensor([0])), None)
        # expected position now 9; the output has gone on with "4 5", which occurs three times
        ambiguous = drafter.propose(state_with_output([[4, 5, 6, 4, 5, 7, 13, 4, 5]]))
        drafts[reentry] = [p.tokens[0, :int(p.lengths[0])].tolist() for p in (after_substitution, ambiguous)]
    assert drafts["unique"] == [[], []]  # the reference rule waits
    assert drafts["nearest"] == [[], [9, eos]]  # the occurrence of "4 5" at 8-9, not 1-2 or 4-5
    assert drafts["expected"] == [[4, 5, 9, eos], [9, eos]]  # guess: a substitution, go on after it
    with pytest.raises(ValueError, match="--iad-reentry must be one of"):
        InputCopyDrafter(dictionary, dictionary, reentry="first")


def test_input_copy_cuts_drafts_to_the_pass_token_budget():
    dictionary = make_dictionary(20)
    source = torch.tensor([[4, 5, 6, 7, 8, 9, dictionary.eos()]] * 3)
    outputs = [[], [4], [4, 5, 6, 7, 8]]  # drafts of 7, 6 and 2 tokens without a budget
    budgets = {0: [7, 6, 2], 12: [3, 3, 2], 3: [0, 0, 0]}  # 12 // 3 rows - 1 = 3; 3 // 3 - 1 = 0
    for budget, expected in budgets.items():
        drafter = InputCopyDrafter(dictionary, dictionary, pass_tokens=budget)
        drafter.begin({"src_tokens": source}, max_len=30)
        proposal = drafter.propose(state_with_output(outputs))
        assert proposal.lengths.tolist() == expected
        assert proposal.tokens[0, :expected[0]].tolist() == [4, 5, 6, 7, 8, 9, dictionary.eos()][:expected[0]]
    with pytest.raises(ValueError, match="--iad-pass-tokens"):
        InputCopyDrafter(dictionary, dictionary, pass_tokens=-1)


def test_adaptive_input_copy_drafts_twice_what_the_last_pass_kept():
    dictionary = make_dictionary(20)
    eos = dictionary.eos()
    source = torch.tensor([[4, 5, 6, 7, 8, 9, 10, 11, 12, 13, eos]] * 3)
    drafter = InputCopyDrafter(dictionary, dictionary, draft_length="adaptive")
    drafter.begin({"src_tokens": source}, max_len=30)
    assert drafter.propose(state_with_output([[], [], []])).lengths.tolist() == [11, 11, 11]  # the whole source
    # row 0 kept its first drafted token, row 1 none, row 2 three: 2 x (accepted + the verifier's token)
    drafter.update(None, SimpleNamespace(accepted=torch.tensor([1, 0, 3])), None)
    outputs = [[4, 5], [14], [4, 5, 6, 7]]  # row 1's "14" is in no source: no draft
    proposal = drafter.propose(state_with_output(outputs))
    assert proposal.lengths.tolist() == [4, 0, 7]  # row 2's 8 are cut by the source's end
    assert proposal.tokens[0, :4].tolist() == [6, 7, 8, 9]
    drafter.keep_rows(torch.tensor([0]))  # rows 1 and 2 ended
    drafter.update(None, SimpleNamespace(accepted=torch.tensor([4])), None)  # the whole draft kept: it doubles
    assert drafter.propose(state_with_output([[4, 5, 6, 7, 8, 9, 10]])).lengths.tolist() == [4]  # source's end
    drafter.update(None, SimpleNamespace(accepted=torch.tensor([0])), None)
    assert drafter.propose(state_with_output([[4, 5, 6, 7]])).lengths.tolist() == [2]
    lengths = {}
    for draft_length in ("source", "auto"):  # the default, "auto": adaptive on a CPU
        drafter = InputCopyDrafter(dictionary, dictionary, draft_length=draft_length)
        drafter.begin({"src_tokens": source[:1]}, max_len=30)
        drafter.update(None, SimpleNamespace(accepted=torch.tensor([0])), None)
        lengths[draft_length] = drafter.propose(state_with_output([[4]])).lengths.tolist()
    assert lengths == {"source": [10], "auto": [2]}
    assert InputCopyDrafter(dictionary, dictionary).draft_length == "auto"
    with pytest.raises(ValueError, match="--iad-draft-length must be one of auto, source, adaptive"):
        InputCopyDrafter(dictionary, dictionary, draft_length="short")


def test_input_copy_maps_separate_dictionaries_by_symbol():
    source_dict, target_dict = make_dictionary(20), make_dictionary(20)
    target_dict.add_symbol("extra")
    source_dict = make_dictionary(0)
    for word in ("w7", "w3", "w5"):
        source_dict.add_symbol(word)
    drafter = InputCopyDrafter(source_dict, target_dict)
    drafter.begin({"src_tokens": torch.tensor([[4, 5, 6, source_dict.eos()]])}, max_len=30)
    proposal = drafter.propose(state_with_output([[]]))
    assert [target_dict[t] for t in proposal.tokens[0].tolist()] == ["w7", "w3", "w5", "</s>"]


def jacobi_pass(drafter, state, predictions, accepted):
    """Feed the drafter one verifier pass whose argmax is ``predictions`` [rows, n]."""
    lprobs = torch.nn.functional.one_hot(torch.tensor(predictions), 20).float()
    verdict = Verdict(accepted=torch.tensor(accepted), tokens=None, cumulative=None)
    drafter.update(FixedScores(lprobs), verdict, state)


def test_jacobi_iterates_within_blocks_and_the_hybrid_goes_on_one_token_at_a_time():
    pad = 1
    drafter = JacobiDrafter(pad, block_size=3, parallel_length=5)
    drafter.begin({"src_tokens": torch.zeros(1, 4, dtype=torch.long)}, max_len=30)
    state = state_with_output([[]])
    first = drafter.propose(state)
    assert first.tokens.tolist() == [[pad] * 3] and first.lengths.tolist() == [3]  # indices 1..3
    jacobi_pass(drafter, state, [[7, 8, 9, 10]], accepted=[0])  # only 7 is certain
    state = state_with_output([[7]])
    second = drafter.propose(state)  # the rest of the block, from the previous iterate
    assert second.tokens.tolist() == [[8, 9]] and second.lengths.tolist() == [2]
    jacobi_pass(drafter, state, [[8, 9, 11]], accepted=[2])  # converged, plus the next token
    state = state_with_output([[7, 8, 9, 11]])
    third = drafter.propose(state)  # a new block, cut at the parallel length 5
    assert third.tokens.tolist() == [[pad]] and third.lengths.tolist() == [1]
    state = state_with_output([[7, 8, 9, 11, 12, 13]])
    assert drafter.propose(state).lengths.tolist() == [0]  # past it: one token per pass

    whole = JacobiDrafter(pad)
    whole.begin({"src_tokens": torch.zeros(2, 4, dtype=torch.long)}, max_len=6)
    # one block over the whole output: as long as the limit allows from the start (the engine cuts
    # each row's draft where its own output must end)
    assert whole.propose(state_with_output([[], [5, 6]])).lengths.tolist() == [7, 7]


def test_jacobi_with_parallel_length_zero_is_greedy():
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=8, eos_bias=0.5)
    batch = make_batch(dictionary, [[4, 5, 6, 7], [8, 9]])
    actual, stats = plugin("hybrid-jacobi", [model], dictionary, batch,
                           DecodingConfig(jacobi_parallel_length=0), max_len_b=20)
    assert_same_hypotheses(fairseq_beam_one([model], dictionary, batch, max_len_b=20), actual)
    assert stats.iterations == stats.tokens


def test_statistics_count_drafted_and_accepted_tokens():
    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=9, eos_bias=-1.0)
    batch = make_batch(dictionary, [[4, 5, 6, 7, 8, 9]])
    _, stats = plugin("gs-jacobi", [model], dictionary, batch, DecodingConfig(jacobi_block_size=2), max_len_b=10)
    sentence = stats.per_sentence[0]
    assert sentence.drafted >= sentence.accepted_drafts >= 0
    assert sentence.hyp_len - sentence.accepted_drafts in (sentence.iterations, sentence.iterations - 1)
    assert 0.0 <= stats.to_dict()["draft_acceptance"] <= 1.0


def test_fairseq_top_one_is_the_first_of_fairseqs_topk_with_and_without_ties():
    generator = torch.Generator().manual_seed(0)
    unique = torch.randn(3, 4, 50, generator=generator)
    tied = unique.clone()
    tied[1, 2, [7, 30, 41]] = tied[1, 2].max() + 1.0  # three best tokens share the score
    tied[2, :, :] = -math.inf  # every token forbidden
    for scores in (unique, tied):
        values, indices = fairseq_top_one(scores)
        top = torch.topk(scores, k=2)
        assert torch.equal(indices, top.indices[..., 0]) and torch.equal(values, top.values[..., 0])


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 5), m=st.integers(1, 6), data=st.data())
def test_the_compiled_output_ends_and_pass_counts_are_the_vectorised_ones(rows, m, data):
    """On a CPU a verdict's output ends and the statistics' counts of a pass are compiled calls: the same
    numbers as the torch operations a GPU runs, with EOS inside and after the accepted tokens, scored
    -inf or not."""
    eos = 2
    tokens = torch.tensor(data.draw(st.lists(st.lists(st.sampled_from([eos, 4, 5]), min_size=m, max_size=m),
                                             min_size=rows, max_size=rows)))
    cumulative = torch.tensor(data.draw(st.lists(st.lists(st.sampled_from([-1.5, -math.inf]), min_size=m, max_size=m),
                                                 min_size=rows, max_size=rows)), dtype=torch.float32)
    accepted = torch.tensor(data.draw(st.lists(st.integers(0, m - 1), min_size=rows, max_size=rows)))
    ends = first_kept_ends(tokens, cumulative, accepted, eos)
    assert torch.equal(first_kept_ends_compiled(tokens, cumulative, accepted, eos), ends)
    drafted = torch.tensor(data.draw(st.lists(st.integers(0, m), min_size=rows, max_size=rows)))
    counts = torch.tensor(data.draw(st.lists(st.lists(st.integers(0, 9), min_size=rows, max_size=rows),
                                             min_size=4, max_size=4)))
    compiled = counts.clone()
    _count_pass(compiled.numpy(), drafted.numpy(), accepted.numpy(), ends.numpy())
    count_pass(counts, drafted, accepted, ends)
    assert torch.equal(compiled, counts)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 4), max_len=st.integers(2, 8), data=st.data())
def test_the_compiled_advance_is_the_vectorised_one(rows, max_len, data):
    """On a CPU the state advances in one compiled call: the same tokens, scores, lengths, ended rows and
    output lengths as the torch operations a GPU runs, rows ending by EOS or by the length limit."""
    eos = 2
    lengths = torch.tensor(data.draw(st.lists(st.integers(0, max_len), min_size=rows, max_size=rows)))
    m = data.draw(st.integers(1, max_len + 1))
    tokens = torch.tensor(data.draw(st.lists(st.lists(st.sampled_from([eos, 4, 5]), min_size=m, max_size=m),
                                             min_size=rows, max_size=rows)))
    cumulative = torch.tensor(data.draw(st.lists(st.lists(st.sampled_from([-1.5, -math.inf]), min_size=m, max_size=m),
                                                 min_size=rows, max_size=rows)), dtype=torch.float32)
    accepted = torch.tensor(data.draw(st.lists(st.integers(0, m - 1), min_size=rows, max_size=rows)))
    states, results = [], []
    for compiled in (True, False):
        state = DecodingState.begin(rows, max_len, eos, 1, torch.device("cpu"))
        state.lengths.copy_(lengths)
        verdict = Verdict(accepted=accepted, tokens=tokens, cumulative=cumulative)
        results.append(state.advance(verdict, eos) if compiled else
                       state.advance_vectorised(verdict, verdict.output_ends(eos)))
        states.append(state)
    (compiled_done, compiled_lengths), (done, output_lengths) = results
    assert torch.equal(compiled_done, done) and torch.equal(compiled_lengths, output_lengths)
    for field in ("tokens", "cumulative", "lengths"):
        assert torch.equal(getattr(states[0], field), getattr(states[1], field))


@settings(max_examples=150, deadline=None)
@given(rows=st.integers(1, 4), k=st.integers(1, 5), vocab=st.integers(2, 8), beta=st.integers(1, 4),
       tau=st.sampled_from([0.0, 0.6, 1.0, math.inf]), min_block_size=st.integers(1, 3), data=st.data())
def test_the_compiled_top_beta_rule_is_the_vectorised_one(rows, k, vocab, beta, tau, min_block_size, data):
    """On a CPU GAD++'s rule (and top-k's) is one compiled call: the same kept tokens, verifier's tokens and
    cumulative scores as its torch operations, with log-probabilities tied, -inf, and short drafts."""
    level = st.sampled_from([-0.25, -0.5, -1.0, -1.5, -4.0, -math.inf])
    lprobs = torch.tensor(data.draw(st.lists(st.lists(st.lists(level, min_size=vocab, max_size=vocab), min_size=k + 1,
                                                      max_size=k + 1), min_size=rows, max_size=rows)))
    proposal = Proposal(tokens=torch.tensor(data.draw(st.lists(st.lists(st.integers(0, vocab - 1), min_size=k,
                                                                        max_size=k), min_size=rows, max_size=rows))),
                        lengths=torch.tensor(data.draw(st.lists(st.integers(0, k), min_size=rows, max_size=rows))))
    before = torch.tensor(data.draw(st.lists(st.sampled_from([0.0, -2.7, -math.inf]), min_size=rows, max_size=rows)))
    rule = RelaxedAcceptance(in_top_beta_within_tau(beta, tau), min_block_size)
    vectorised = rule.accept_vectorised(proposal, lprobs, before)
    compiled = _accept_top_beta(lprobs.numpy(), proposal.tokens.numpy(), proposal.lengths.numpy(), beta,
                                np.float32(tau), min_block_size - 1, before.numpy())
    if compiled is None:  # a drafted token within tau tied the beta-th best: torch's topk decides it
        tied = [(row, j) for row in range(rows) for j in range(int(proposal.lengths[row]))
                if (lprobs[row, j] > lprobs[row, j, proposal.tokens[row, j]]).sum() < beta <
                (lprobs[row, j] >= lprobs[row, j, proposal.tokens[row, j]]).sum()]
        assert tied
        compiled = rule.accept(proposal, FixedScores(lprobs), before)
    else:
        compiled = Verdict(*(torch.from_numpy(part) for part in compiled))
    for field in ("accepted", "tokens", "cumulative"):
        assert torch.equal(getattr(compiled, field), getattr(vectorised, field)), field


def test_the_compiled_top_beta_rule_leaves_a_tie_at_the_beta_th_best_to_topk():
    lprobs = torch.tensor([[[-0.5, -1.0, -1.0, -3.0], [-0.1, -2.0, -3.0, -4.0]]])
    before = torch.zeros(1)
    for draft, beta, kept in ((1, 3, 1), (3, 3, 0), (1, 2, None)):  # the two -1.0 are 2nd and 3rd
        result = _accept_top_beta(lprobs.numpy(), torch.tensor([[draft]]).numpy(), torch.tensor([1]).numpy(), beta,
                                  np.float32(5.0), 0, before.numpy())
        assert (result is None) if kept is None else result[0].tolist() == [kept]


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 4), max_len=st.integers(1, 8), k=st.integers(1, 6), data=st.data())
def test_the_compiled_pass_tokens_are_the_vectorised_ones(rows, max_len, k, data):
    """On a CPU a chain's pass tokens come from one compiled call: the same tokens and drafts cut at the
    length limit as the torch operations a GPU runs, for rows at any length up to the limit."""
    state = DecodingState.begin(rows, max_len, 2, 1, torch.device("cpu"))
    state.tokens.copy_(torch.tensor(data.draw(st.lists(st.lists(st.integers(3, 9), min_size=state.tokens.size(1),
                                                                max_size=state.tokens.size(1)),
                                                       min_size=rows, max_size=rows))))
    state.lengths.copy_(torch.tensor(data.draw(st.lists(st.integers(0, max_len), min_size=rows, max_size=rows))))
    drafted = torch.tensor(data.draw(st.lists(st.integers(0, k), min_size=rows, max_size=rows)))
    proposal = Proposal(tokens=torch.randint(3, 20, (rows, k)), lengths=drafted)
    compiled, compiled_tokens = DraftVerifyDecoder._pass_tokens(proposal, state, max_len)
    vectorised, tokens = DraftVerifyDecoder.chain_pass_tokens_vectorised(proposal, state, max_len)
    assert torch.equal(compiled_tokens, tokens) and torch.equal(compiled.tokens, vectorised.tokens)
    assert torch.equal(compiled.lengths, vectorised.lengths)
    assert torch.equal(tokens[:, 0], state.tokens.gather(1, state.lengths.unsqueeze(1)).squeeze(1))
    assert bool((state.lengths + vectorised.lengths <= max_len).all())
