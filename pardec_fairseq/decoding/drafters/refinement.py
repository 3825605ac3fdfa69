"""Draft refinement (Kim et al. 2024): drafts chosen from the top-k lattice of a block drafter.

A block drafter (the heads of a ``blockwise_transformer``) predicts each drafted position on its
own, so its top-1 draft repeats tokens and grows unsure with distance. Its top-``k`` tokens per
position form a "sausage" lattice: any choice of one token per position is a draft. Global n-gram
rescoring scores every path by the drafter's log-probabilities plus ``weight`` times an n-gram
model's scores, and dynamic programming over the lattice (a k-best Viterbi whose states are the
last ``order - 1`` choices) gives the ``drafts`` best paths; several are verified together as a
tree. With no language model the same search gives the paths the drafter alone ranks best (Kim et
al.'s "parallel base BPD"). Local neural rescoring instead walks the positions in order, choosing
each one's candidate by the drafter's log-probability plus ``weight`` times a small autoregressive
language model's, given the accepted output and the draft chosen so far: one draft, the model called
once per drafted position. Drafts only change speed: exact acceptance keeps the verifier's output.
"""
import os
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Optional

import numpy as np
import torch
from fairseq import checkpoint_utils
from fairseq import models as fairseq_models
from fairseq.data import Dictionary
from torch import Tensor

from pardec_fairseq.decoding.drafters.ngram_lm import NgramLM
from pardec_fairseq.decoding.proposals import Proposal


@dataclass
class Lattice:
    """Each drafted position's ``k`` most likely tokens under the drafter, best first."""

    tokens: Tensor  # [rows, positions, k]
    scores: Tensor  # [rows, positions, k] the drafter's log-probabilities

    @classmethod
    def of(cls, logits: Tensor, k: int) -> "Lattice":
        """From the drafter's logits ``[rows, positions, vocab]``."""
        top = torch.log_softmax(logits.float(), -1).topk(min(k, logits.size(-1)), -1)
        return cls(top.indices, top.values)


def _check_top_k(top_k):
    if top_k < 1:
        raise ValueError(f"--refine-top-k must be at least 1 (got {top_k})")


class LatticeRescoring:
    """The ``drafts`` best paths through a lattice of ``top_k`` tokens per position by drafter score +
    ``weight`` x ``lm`` score (``lm`` ``None``: by drafter score alone)."""

    def __init__(self, top_k: int, drafts: int, lm: Optional[NgramLM] = None, weight: float = 0.0):
        _check_top_k(top_k)
        if drafts < 1:
            raise ValueError(f"--refine-drafts must be at least 1 (got {drafts})")
        self.top_k, self.drafts, self.lm, self.weight = top_k, drafts, lm, weight
        # the choices a state remembers: what the n-gram model's context reaches back to
        self.remembered = lm.order - 1 if lm is not None else 1

    def propose(self, lattice: Lattice, state) -> Proposal:
        """The best paths as a proposal after each row's accepted output (``state``): a chain for one
        draft, else a tree of the paths sharing their common prefixes."""
        rows, positions, k = lattice.tokens.shape
        device = lattice.tokens.device
        if positions == 0:
            return Proposal(tokens=lattice.tokens[:, :, 0], lengths=torch.zeros_like(state.lengths))
        tokens = lattice.tokens.cpu().numpy()
        context, context_lengths = self._context(state)
        paths, found = self.best_paths(tokens, lattice.scores.cpu().numpy(), context, context_lengths)
        if paths.shape[1] == 1:
            return Proposal(tokens=torch.from_numpy(paths[:, 0]).to(device),
                            lengths=torch.from_numpy(found[:, 0] * positions).to(device))
        draft, parents, nodes = tree_of_paths(paths, found * positions)
        return Proposal(tokens=torch.from_numpy(draft).to(device), lengths=torch.from_numpy(nodes).to(device),
                        parents=torch.from_numpy(parents).to(device))

    def _context(self, state):
        """Each row's last ``order - 1`` accepted tokens (BOS included), right-aligned, and how many
        of them there are."""
        width = self.remembered
        columns = state.lengths.unsqueeze(1) - width + 1 + torch.arange(width, device=state.lengths.device)
        context = state.tokens.gather(1, columns.clamp(min=0)).cpu().numpy()
        return context, np.minimum(state.lengths.cpu().numpy() + 1, width)

    def best_paths(self, tokens: np.ndarray, scores: np.ndarray, context: np.ndarray, context_lengths: np.ndarray):
        """``[rows, drafts, positions]`` the best paths' tokens, best first, and ``[rows, drafts]``
        whether each exists (a lattice may hold fewer paths than ``drafts``).

        The state after position j is the last ``m = min(j + 1, remembered)`` choices, a number in
        base k (the latest choice least significant); each state keeps its ``drafts`` best partial
        paths and, per path, the flat index (state x drafts + rank) of the path it extends."""
        rows, positions, k = tokens.shape
        drafts = min(self.drafts, k ** positions)
        best = np.full((rows, 1, drafts), -np.inf)
        best[:, 0, 0] = 0.0
        pointers = []
        for j, step in enumerate(self._step_scores(tokens, scores, context, context_lengths)):
            held = min(j, self.remembered)  # choices the states before position j remember
            extended = best[:, :, :, None] + step[:, :, None, :]
            states = k ** held  # extended: [rows, states, drafts, k]
            if held < self.remembered:  # the state grows by the new choice: one predecessor each
                best = extended.transpose(0, 1, 3, 2).reshape(rows, states * k, drafts)
                origin = np.broadcast_to(np.arange(states * drafts).reshape(states, 1, drafts), (states, k, drafts))
                pointers.append(np.broadcast_to(origin.reshape(1, states * k, drafts), best.shape))
                continue
            # the oldest choice d drops out: predecessors d x kept + kept for every d
            kept = states // k
            candidates = extended.reshape(rows, k, kept, drafts, k).transpose(0, 2, 4, 1, 3)
            candidates = candidates.reshape(rows, kept * k, k * drafts)
            order = np.argsort(-candidates, axis=-1, kind="stable")[..., :drafts]
            best = np.take_along_axis(candidates, order, -1)
            dropped, rank = np.divmod(np.arange(k * drafts), drafts)
            origin = (dropped * kept + np.arange(kept)[:, None]) * drafts + rank  # [kept, k * drafts]
            origin = np.broadcast_to(origin[:, None, :], (kept, k, k * drafts)).reshape(kept * k, k * drafts)
            pointers.append(np.take_along_axis(np.broadcast_to(origin, candidates.shape), order, -1))
        flat = best.reshape(rows, -1)
        at = np.argsort(-flat, axis=-1, kind="stable")[:, :drafts]
        found = np.isfinite(np.take_along_axis(flat, at, -1))
        paths = np.empty((rows, drafts, positions), dtype=np.int64)
        for j in range(positions - 1, -1, -1):
            choice = (at // drafts) % k
            paths[:, :, j] = np.take_along_axis(tokens[:, j], choice, -1)
            at = np.take_along_axis(pointers[j].reshape(rows, -1), at, -1)
        return paths, found

    def _step_scores(self, tokens, scores, context, context_lengths):
        """Per position j, ``[rows, k ** held, k]``: the score of choice c at j after each state of the
        ``held = min(j, remembered)`` choices before it; the language model scores every position's
        n-grams in one call."""
        rows, positions, k = tokens.shape
        held = [min(j, self.remembered) for j in range(positions)]
        if self.lm is None:
            return [np.broadcast_to(scores[:, j, None, :], (rows, k ** held[j], k)) for j in range(positions)]
        width = self.remembered
        histories, lengths, words = [], [], []
        for j in range(positions):
            states = k ** held[j]
            digits = (np.arange(states)[:, None] // k ** np.arange(held[j] - 1, -1, -1)) % k  # oldest first
            chosen = tokens[:, np.arange(j - held[j], j)[None, :], digits]  # [rows, states, held]
            before = np.broadcast_to(context[:, None, held[j]:], (rows, states, width - held[j]))
            history = np.concatenate([before, chosen], -1).reshape(rows * states, width)  # right-aligned
            histories.append(np.repeat(history, k, 0))
            lengths.append(np.repeat(np.minimum(context_lengths + j, width), states * k))
            words.append(np.broadcast_to(tokens[:, j, None, :], (rows, states, k)).ravel())
        lm = np.split(self.lm.log_scores(np.concatenate(histories), np.concatenate(lengths), np.concatenate(words)),
                      np.cumsum([rows * k ** (h + 1) for h in held])[:-1])
        return [scores[:, j, None, :] + self.weight * lm[j].reshape(rows, k ** held[j], k) for j in range(positions)]


class LocalNeuralRescoring:
    """Kim et al.'s local rescoring with a fairseq ``transformer_lm`` of the target side, greedy."""

    drafts = 1

    def __init__(self, top_k: int, lm, weight: float, pad: int):
        _check_top_k(top_k)
        self.top_k, self.lm, self.weight, self.pad = top_k, lm, weight, pad
        self.max_positions = lm.max_positions()

    def propose(self, lattice: Lattice, state) -> Proposal:
        """Rows right-aligned (the language model reads padding on the left as fairseq's decoders do),
        so each step appends one column and reads the last one; an output longer than the model's
        positions is read through its latest ones."""
        rows, positions, _ = lattice.tokens.shape
        width = int(state.lengths.max()) + 1
        columns = state.lengths.unsqueeze(1) - width + 1 + torch.arange(width, device=state.lengths.device)
        history = state.tokens.gather(1, columns.clamp(min=0)).masked_fill(columns < 0, self.pad)
        for j in range(positions):
            logits, _ = self.lm(history[:, -self.max_positions:])
            lprobs = torch.log_softmax(logits[:, -1].float(), -1).gather(1, lattice.tokens[:, j])
            choice = (lattice.scores[:, j] + self.weight * lprobs).argmax(-1, keepdim=True)
            history = torch.cat([history, lattice.tokens[:, j].gather(1, choice)], 1)
        return Proposal(tokens=history[:, width:], lengths=torch.full_like(state.lengths, positions))


def draft_refinement(cfg, tgt_dict, like: Tensor):
    """The refinement of ``--refine``/``--refine-drafts`` (``None``: each position's top-1), its
    language model on ``like``'s device and dtype."""
    refine = getattr(cfg.refine, "value", cfg.refine)
    if refine == "neural":
        if cfg.refine_drafts != 1:
            raise ValueError("--refine neural chooses one draft per pass (greedy local rescoring): drop "
                             "--refine-drafts or use --refine ngram for several")
        lm = load_rescoring_lm(cfg.refine_lm_path, tgt_dict, like)
        return LocalNeuralRescoring(cfg.refine_top_k, lm, cfg.refine_lm_weight, tgt_dict.pad())
    if refine == "none":
        return LatticeRescoring(cfg.refine_top_k, cfg.refine_drafts) if cfg.refine_drafts != 1 else None
    if cfg.refine_corpus is None:
        raise ValueError("--refine ngram counts the n-grams of target-side text: pass --refine-corpus PREFIX of a "
                         "binarized split (the task's data folder has no language pair to find its train split)")
    lm = NgramLM.for_corpus(cfg.refine_corpus, tgt_dict, cfg.refine_ngram_order)
    return LatticeRescoring(cfg.refine_top_k, cfg.refine_drafts, lm, cfg.refine_lm_weight)


def load_rescoring_lm(path, tgt_dict, like: Tensor):
    """The ``transformer_lm`` of ``--refine-lm-path`` on ``like``'s device and dtype, refusing a model
    of another vocabulary than the verifier's target dictionary."""
    if not path or not os.path.isfile(path):
        raise ValueError(f"--refine neural rescores drafts with a target-side language model: pass its checkpoint "
                         f"with --refine-lm-path (trained by scripts/train_rescoring_lm.sh); got {path!r}")
    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    cfg = state["cfg"]
    task = getattr(cfg.task, "_name", None)
    if task not in ("target_language_modeling", "language_modeling"):
        raise ValueError(f"--refine-lm-path {path} is not a language model (task {task}): train one with "
                         f"scripts/train_rescoring_lm.sh")
    folder = str(cfg.task.data).split(os.pathsep)[0]
    saved_dict = os.path.join(folder, f"dict.{cfg.task.target_lang}.txt" if task == "target_language_modeling"
                              else "dict.txt")
    symbols = Dictionary.load(saved_dict).symbols if os.path.isfile(saved_dict) else None
    vocabulary = state["model"]["decoder.embed_tokens.weight"].size(0)
    if (symbols is not None and symbols != tgt_dict.symbols) or vocabulary != len(tgt_dict):
        raise ValueError(f"--refine-lm-path {path} was trained with another dictionary than the verifier's target "
                         f"dictionary ({vocabulary} vs {len(tgt_dict)} words): train it on the target side of data "
                         f"binarized with the verifier's dictionaries")
    model = fairseq_models.build_model(cfg.model, SimpleNamespace(source_dictionary=tgt_dict,
                                                                   target_dictionary=tgt_dict))
    model.load_state_dict(state["model"], strict=True, model_cfg=cfg.model)
    return model.to(device=like.device, dtype=like.dtype).eval()


def tree_of_paths(paths: np.ndarray, lengths: np.ndarray):
    """Paths ``[rows, p, depth]`` (the first ``lengths[r, i]`` tokens of path i) as one tree per row
    whose paths share their common prefixes: node tokens ``[rows, nodes]``, each node's parent as a
    pass position (0: the last accepted token, j + 1: node j), node counts ``[rows]``. Nodes are
    numbered path by path, so a parent always comes before its children."""
    rows, p, depth = paths.shape
    valid = np.arange(depth) < lengths[:, :, None]  # [rows, p, depth]
    agree = (paths[:, :, None, :] == paths[:, None, :, :]) & valid[:, :, None, :] & valid[:, None, :, :]
    same_prefix = np.logical_and.accumulate(agree, axis=-1)  # [rows, p, q, depth]
    owner = np.argmax(same_prefix, axis=2)  # [rows, p, depth]: the first path with that prefix
    new = valid & (owner == np.arange(p)[None, :, None])
    number = np.cumsum(new.reshape(rows, -1), 1).reshape(rows, p, depth) - 1  # node number of new nodes
    node = np.take_along_axis(number.reshape(rows, p * depth), (owner * depth + np.arange(depth)).reshape(rows, -1),
                              1).reshape(rows, p, depth)  # the node of each (path, depth)
    parent = np.concatenate([np.zeros((rows, p, 1), dtype=np.int64), node[:, :, :-1] + 1], 2)
    nodes = new.sum((1, 2))
    width = int(nodes.max()) if rows else 0
    draft = np.zeros((rows, width + 1), dtype=np.int64)
    parents = np.zeros((rows, width + 1), dtype=np.int64)
    slot = np.where(new, node, width)  # column ``width``: nowhere
    row = np.broadcast_to(np.arange(rows)[:, None, None], slot.shape)
    draft[row, slot] = paths
    parents[row, slot] = parent
    return draft[:, :width], parents[:, :width], nodes
