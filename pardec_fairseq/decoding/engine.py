"""The draft -> verify -> accept loop every algorithm of the plugin runs.

Each iteration the drafter proposes up to ``k`` tokens per row, a chain or a tree of candidate
continuations (``DraftTree``); one verifier pass scores each row's last accepted token and its draft;
the acceptance rule keeps a prefix of the chain (a path of the tree) plus the verifier's own token;
the cache is rolled back to what each row kept. Rows accept different
numbers of tokens, and rows that end leave the batch, so a sentence's output does not depend on
its batch. The statistics and the tools watch the loop through its observers (``observers``).
"""
from dataclasses import dataclass
from typing import List

import numba
import numpy as np
import torch
from torch import Tensor

from pardec_fairseq.decoding.observers import LoopObserver, PartClock
from pardec_fairseq.decoding.proposals import DraftTree, Proposal, Verdict


@dataclass
class DecodedSentence:
    """One finished output: tokens end with EOS; scores are fairseq's cumulative scores."""

    tokens: Tensor
    cumulative_scores: Tensor


@dataclass
class DecodingState:
    """The accepted output of the rows still decoding."""

    max_len: int  # fairseq's output length limit: EOS is forced at output index max_len + 1
    tokens: Tensor  # [rows, 2 * max_len + 2]: BOS, the accepted tokens (then stale), room for a batch-wide draft
    cumulative: Tensor  # [rows, 2 * max_len + 2]: fairseq's cumulative score after each token (0 at BOS)
    lengths: Tensor  # [rows] accepted tokens after BOS; the last one is not in the cache yet
    rows: Tensor  # [rows] index of each row in the batch (on the CPU)
    offsets: Tensor  # 0 .. 2 * max_len + 1, the columns of a pass's tokens after a row's last one

    @classmethod
    def begin(cls, rows, max_len, bos, pad, device):
        # a row's draft ends by output index max_len, but the batch's widest draft may pass its end
        width = 2 * max_len + 2
        tokens = torch.full((rows, width), pad, dtype=torch.long, device=device)
        tokens[:, 0] = bos
        return cls(max_len, tokens, torch.zeros(rows, width, device=device),
                   torch.zeros(rows, dtype=torch.long, device=device), torch.arange(rows),
                   torch.arange(width, device=device))

    def last_tokens(self):
        return self.tokens.gather(1, self.lengths.unsqueeze(1))

    def last_cumulative(self):
        return self.cumulative.gather(1, self.lengths.unsqueeze(1)).squeeze(1)

    def advance(self, verdict: Verdict, eos):
        """Append what each row accepted; return which rows ended and their output lengths. All of a
        verdict's tokens are written: what follows a row's accepted ones is written over by its next pass.
        fairseq forces EOS at the length limit; a row whose EOS scored -inf ends there too."""
        first_end = verdict.output_ends(eos)
        if self.tokens.device.type == "cpu" and self.cumulative.dtype == verdict.cumulative.dtype == torch.float32:
            # one compiled call: the torch operations took 0.1 ms a pass on the Zen 3 VM
            done, output_lengths = _advance(self.tokens.numpy(), self.cumulative.numpy(), self.lengths.numpy(),
                                            verdict.tokens.numpy(), verdict.cumulative.numpy(),
                                            verdict.accepted.numpy(), first_end.numpy(), self.max_len)
            return torch.from_numpy(done), torch.from_numpy(output_lengths)
        return self.advance_vectorised(verdict, first_end)

    def advance_vectorised(self, verdict: Verdict, first_end: Tensor):
        """``advance`` in torch operations (on a GPU, or in another precision), with the verdict's output
        ends ``first_end``."""
        n = verdict.tokens.size(1)
        index = (self.lengths + 1).unsqueeze(1) + self.offsets[:n]
        self.tokens.scatter_(1, index, verdict.tokens)
        self.cumulative.scatter_(1, index, verdict.cumulative)
        ended = first_end < n
        end_lengths = self.lengths + 1 + first_end
        self.lengths += verdict.accepted + 1
        done = ended | (self.lengths > self.max_len)
        return done, torch.where(ended, end_lengths, self.lengths)

    def keep(self, keep: Tensor):
        self.tokens, self.cumulative, self.lengths = self.tokens[keep], self.cumulative[keep], self.lengths[keep]
        self.rows = self.rows[keep.cpu()]


@numba.njit(cache=True, nogil=True)
def _advance(tokens, cumulative, lengths, new_tokens, new_cumulative, accepted, ends, max_len):
    """``DecodingState.advance`` of numpy arrays (the state's updated in place)."""
    rows, n = new_tokens.shape
    done = np.empty(rows, dtype=np.bool_)
    output_lengths = np.empty(rows, dtype=np.int64)
    for r in range(rows):
        if lengths[r] + n >= tokens.shape[1]:
            raise IndexError("a verdict reaches past the decoding state's columns")
        for j in range(n):
            tokens[r, lengths[r] + 1 + j] = new_tokens[r, j]
            cumulative[r, lengths[r] + 1 + j] = new_cumulative[r, j]
        ended = ends[r] < n
        end_length = lengths[r] + 1 + ends[r]
        lengths[r] += accepted[r] + 1
        done[r] = ended or lengths[r] > max_len
        output_lengths[r] = end_length if ended else lengths[r]
    return done, output_lengths


class DraftVerifyDecoder:
    """An algorithm: a drafter and an acceptance rule around the verifier."""

    def __init__(self, verifier, drafter, acceptance, tgt_dict, options):
        self.verifier, self.drafter, self.acceptance, self.options = verifier, drafter, acceptance, options
        self.pad, self.eos = tgt_dict.pad(), tgt_dict.eos()
        self.observers: List[LoopObserver] = []  # tools watching the loop (``observers``)

    def decode(self, sample, bos_token=None) -> List[DecodedSentence]:
        with torch.no_grad():
            return self._decode(sample, bos_token)

    def _decode(self, sample, bos_token):
        verifier = self.verifier
        net_input = sample["net_input"]
        src_tokens = net_input["src_tokens"]
        for observer in self.observers:
            observer.batch_started(src_tokens.size(0), src_tokens.device)
        clock = PartClock(self.observers, src_tokens.device)  # its laps cost nothing unless an observer times parts
        max_len = self.options.max_len(src_tokens.size(1), verifier.max_decoder_positions())
        cache = verifier.start(net_input, max_len)
        clock.lap("verifier layers")
        state = DecodingState.begin(src_tokens.size(0), max_len, self.eos if bos_token is None else bos_token,
                                    self.pad, src_tokens.device)
        self.drafter.begin(net_input, max_len, verifier.encoder_states(cache), cache)
        clock.lap("drafter")
        finished = [None] * src_tokens.size(0)
        while True:
            proposal, tokens = self._pass_tokens(self.drafter.propose(state), state, max_len)
            n = tokens.size(1)
            clock.lap("drafter")
            scores = verifier.score(cache, tokens, state.lengths, max_len, DraftTree.of(proposal), on_demand=True)
            clock.watch(scores)
            if self.drafter.reads_all_scores:
                scores.all()
            clock.lap("verifier layers")
            verdict = self.acceptance.accept(proposal, scores, state.last_cumulative())
            clock.lap("acceptance")
            for observer in self.observers:
                observer.after_pass(state, proposal, scores, verdict)
            verifier.rollback(cache, state.lengths, verdict.accepted + 1, n, verdict.path)
            clock.lap("verifier layers")
            self.drafter.update(scores, verdict, state)
            clock.lap("drafter")
            done, output_lengths = state.advance(verdict, self.eos)
            going_on = not bool(done.any()) or self._rows_leave(state, done, output_lengths, finished, cache)
            clock.lap("engine")
            clock.report()
            if not going_on:
                return finished

    def _rows_leave(self, state, done, output_lengths, finished, cache) -> bool:
        """The rows that ended leave the batch; whether any row goes on."""
        ended = done.nonzero().squeeze(1)
        for row, length in zip(ended.tolist(), output_lengths[ended].tolist()):
            finished[state.rows[row]] = DecodedSentence(tokens=state.tokens[row, 1: length + 1].clone(),
                                                        cumulative_scores=state.cumulative[row, 1: length + 1].clone())
        for observer in self.observers:
            observer.rows_ended(state, ended)
        keep = (~done).nonzero().squeeze(1)
        if keep.numel() == 0:
            return False
        state.keep(keep)
        self.verifier.keep_rows(cache, keep)
        self.drafter.keep_rows(keep)
        for observer in self.observers:
            observer.keep_rows(keep)
        return True

    @staticmethod
    def _pass_tokens(proposal: Proposal, state: DecodingState, max_len):
        """The proposal within the length limit and the pass's tokens: each row's last accepted one,
        then its draft. Drafts never reach past the last output position fairseq allows (a tree's
        nodes past it are never accepted: ``ExactAcceptance`` checks their steps). On a CPU a chain's
        tokens come from one compiled call: 34 us a pass in a hot loop on the Zen 3 VM, against 64 for
        the torch operations."""
        if proposal.tokens.size(1) == 0:
            return proposal, state.last_tokens()
        if proposal.parents is not None:
            if state.tokens.device.type == "cpu":
                return proposal, torch.from_numpy(_tree_pass_tokens(state.tokens.numpy(), state.lengths.numpy(),
                                                                    proposal.tokens.contiguous().numpy()))
            return proposal, torch.cat([state.last_tokens(), proposal.tokens], 1)
        if state.tokens.device.type == "cpu":
            tokens, lengths = _chain_pass_tokens(state.tokens.numpy(), state.lengths.numpy(),
                                                 proposal.tokens.numpy(), proposal.lengths.numpy(), max_len)
            return Proposal(tokens=proposal.tokens[:, :tokens.shape[1] - 1], lengths=torch.from_numpy(lengths)), \
                torch.from_numpy(tokens)
        return DraftVerifyDecoder.chain_pass_tokens_vectorised(proposal, state, max_len)

    @staticmethod
    def chain_pass_tokens_vectorised(proposal: Proposal, state: DecodingState, max_len):
        """``_pass_tokens`` of a chain in torch operations (on a GPU)."""
        lengths = torch.minimum(proposal.lengths, max_len - state.lengths)
        draft = proposal.tokens[:, :int(lengths.max())]
        return Proposal(tokens=draft, lengths=lengths), torch.cat([state.last_tokens(), draft], 1)


@numba.njit(cache=True, nogil=True)
def _chain_pass_tokens(output, lengths, draft, drafted, max_len):
    """``DraftVerifyDecoder._pass_tokens`` of a chain in numpy arrays: the pass's tokens ``[rows, 1 + k]``
    and each row's drafted tokens within the limit (``k`` the most of them)."""
    rows = lengths.shape[0]
    kept = np.minimum(drafted, max_len - lengths)
    k = kept.max() if rows else 0
    tokens = np.empty((rows, k + 1), dtype=draft.dtype)
    for r in range(rows):
        tokens[r, 0] = output[r, lengths[r]]
        tokens[r, 1:] = draft[r, :k]
    return tokens, kept


@numba.njit(cache=True, nogil=True)
def _tree_pass_tokens(output, lengths, draft):
    """``DraftVerifyDecoder._pass_tokens`` of a tree in numpy arrays: each row's last accepted token, then
    its drafted nodes ``[rows, k]`` (the torch operations took 0.03 ms a pass on the Zen 3 VM)."""
    rows, k = draft.shape
    tokens = np.empty((rows, k + 1), dtype=draft.dtype)
    for r in range(rows):
        tokens[r, 0] = output[r, lengths[r]]
        tokens[r, 1:] = draft[r]
    return tokens
