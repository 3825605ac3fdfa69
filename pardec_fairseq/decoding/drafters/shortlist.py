"""A lexical shortlist (as Marian's ``--shortlist``) for a drafter that drafts among the target
dictionary's first words alone: each batch's drafts may also be the words its sources call for.

Why: a draft head projects onto the first ``--draft-vocab`` words (4,096 of LibreOffice En-De's 8,296)
because on a CPU the projection's bytes cost as much as the verifier's own; but 6.4% of the verifier's
tokens lie beyond them, never drafted. Drafting among all words kept 2.44 tokens a pass instead of 2.34
and cost 6.5% more a pass, so no speed. Drafting among the first 512 words, each source word's 40 most
associated words and the source's own words, the recipe's head kept 2.42 tokens a pass at a fifth of
the projection's bytes: 1.31x plugin greedy against 1.22x (2026-11-28, Zen 3 VM, stop 56 in
``docs/results.md``). The words drafted only change speed: the verifier checks every one.
"""
import os

import numba
import numpy as np
import torch
from torch import Tensor

from pardec_fairseq.decoding import vector_kernels
from pardec_fairseq.decoding.drafters.corpus import corpus_text, load_cached, save_cached, split_stamp
from pardec_fairseq.decoding.fast_ops import Product

SHORTLIST_FORMAT = 1  # bump when the cached table changes meaning


class LexicalShortlist:
    """Per source word, the target words beyond the first ``first_words`` that a batch holding it may
    draft: its ``per_word`` likeliest translations and itself (by symbol; a shared or joined
    dictionary's source words are often copied). ``table`` ``[source words, per_word]`` (-1: none);
    ``to_target``: each source word's target id (``source_to_target``)."""

    def __init__(self, table: np.ndarray, to_target: np.ndarray, first_words: int, target_words: int):
        self.table, self.to_target = table, to_target
        self.first_words, self.target_words = first_words, target_words

    @classmethod
    def build(cls, source_text: np.ndarray, target_text: np.ndarray, to_target: np.ndarray, first_words: int,
              target_words: int, per_word: int, eos=(2, 2), specials: int = 4,
              block: int = 1 << 24) -> "LexicalShortlist":
        """From a parallel corpus, each side one sequence of its sentences each after its ``eos`` (source's,
        target's; as ``corpus_text`` reads them; source ids below ``specials`` are no words): a source
        word's likeliest translations are the target words most associated with it by Dice's coefficient
        over the sentence pairs (twice the pairs holding both against the pairs holding each; of equals
        the lower id first). The pairs are counted ``block`` (source word, target word)s at a time, so that
        a large corpus needs memory for its distinct pairs, not for every sentence's."""
        source_words = len(to_target)
        src_sentence, src_word = _sentence_words(source_text, eos[0], specials)
        tgt_sentence, tgt_word = _sentence_words(target_text, eos[1], first_words)
        pairs, together = _pair_counts(src_sentence, src_word, tgt_sentence, tgt_word, target_words, block)
        source, target = pairs // target_words, pairs % target_words
        dice = 2.0 * together / (np.bincount(src_word, minlength=source_words)[source]
                                 + np.bincount(tgt_word, minlength=target_words)[target])
        order = np.lexsort((target, -dice, source))
        source, target = source[order], target[order]
        rank = np.arange(source.size) - np.searchsorted(source, source, side="left")
        kept = rank < per_word
        table = np.full((source_words, per_word), -1, dtype=np.int64)
        table[source[kept], rank[kept]] = target[kept]
        return cls(table, to_target, first_words, target_words)

    @classmethod
    def for_corpus(cls, prefix: str, src_dict, tgt_dict, to_target: Tensor, first_words: int,
                   per_word: int) -> "LexicalShortlist":
        """The shortlist of the binarized parallel split ``DIR/SPLIT.SRC-TGT`` (its ``.SRC`` and ``.TGT``),
        its table cached beside the split in ``PREFIX.shortlist-FIRST-PER_WORD.npz`` (rebuilt when either
        side's ``.bin`` or the dictionaries' sizes change; loaded without pickle): counting a WMT-sized
        corpus's word pairs takes minutes at every start, LibreOffice En-De's 2 s."""
        option = "--draft-shortlist-corpus"
        languages = os.path.basename(prefix).rsplit(".", 1)[-1].split("-")
        if len(languages) != 2 or "." not in os.path.basename(prefix):
            raise ValueError(f"{option} {prefix}: name a binarized parallel split as fairseq-preprocess does, "
                             "DIR/SPLIT.SRC-TGT (such as data-bin/train.en-de)")
        sides = [f"{prefix}.{language}" for language in languages]
        cache = f"{prefix}.shortlist-{first_words}-{per_word}.npz"
        eos, specials = (src_dict.eos(), tgt_dict.eos()), src_dict.nspecial
        stamp = np.array([SHORTLIST_FORMAT, first_words, per_word, len(src_dict), len(tgt_dict), *eos, specials,
                          *split_stamp(sides[0], option), *split_stamp(sides[1], option)], dtype=np.int64)
        stored = load_cached(cache, stamp)
        if stored is not None:
            return cls(stored["table"], to_target.numpy(), first_words, len(tgt_dict))
        source, target = corpus_text(sides[0], src_dict, option), corpus_text(sides[1], tgt_dict, option)
        if np.count_nonzero(source == src_dict.eos()) != np.count_nonzero(target == tgt_dict.eos()):
            raise ValueError(f"{option} {prefix}: its two sides hold different numbers of sentences; binarize both "
                             "sides of one parallel split")
        shortlist = cls.build(source, target, to_target.numpy(), first_words, len(tgt_dict), per_word, eos, specials)
        save_cached(cache, stamp, "the shortlist", table=shortlist.table)
        return shortlist

    def words(self, src_tokens: Tensor) -> np.ndarray:
        """The words beyond the first ``first_words`` that ``src_tokens`` ``[rows, length]`` call for, ascending
        (one compiled call: numpy's took 0.11 ms a sentence on a Zen 4 VM)."""
        return _called_for(src_tokens.cpu().numpy().astype(np.int64, copy=False), self.table, self.to_target,
                           self.first_words, self.target_words)


@numba.njit(cache=True, nogil=True)
def _called_for(src_tokens, table, to_target, first_words, target_words):
    """``LexicalShortlist.words`` of a numpy ``src_tokens`` (ids outside the table call for nothing)."""
    marked = np.zeros(target_words, dtype=np.bool_)
    for token in src_tokens.ravel():
        if 0 <= token < table.shape[0]:
            for word in table[token]:
                if word >= first_words:
                    marked[word] = True
            if to_target[token] >= first_words:
                marked[to_target[token]] = True
    return np.nonzero(marked)[0].astype(np.int64)


def _pair_counts(src_sentence, src_word, tgt_sentence, tgt_word, target_words: int, block: int):
    """Each (source word, target word) held by a sentence pair, as ``source * target_words + target``, ascending,
    and the number of pairs holding it; from ``_sentence_words`` of both sides, ``block`` pairs at a time."""
    # a target word of a sentence pairs with each source word of its sentence (``counts`` of them from ``starts``)
    starts = np.searchsorted(src_sentence, tgt_sentence, side="left")
    counts = np.searchsorted(src_sentence, tgt_sentence, side="right") - starts
    ends = np.cumsum(counts)
    edges = np.concatenate([[0], np.searchsorted(ends, np.arange(block, ends[-1] if ends.size else 0, block)),
                            [counts.size]])
    codes, totals = [], []
    for a, b in zip(edges[:-1], edges[1:]):
        part = counts[a:b]
        offsets = np.repeat(starts[a:b] - (np.cumsum(part) - part), part) + np.arange(part.sum())
        code, total = np.unique(src_word[offsets] * target_words + np.repeat(tgt_word[a:b], part), return_counts=True)
        codes.append(code)
        totals.append(total)
    if len(codes) == 1:
        return codes[0], totals[0]
    code, where = np.unique(np.concatenate(codes), return_inverse=True)
    return code, np.bincount(where, weights=np.concatenate(totals)).astype(np.int64)


@numba.njit(cache=True, nogil=True)
def _copy_columns(word_columns, panel_bias, to_panels, to_bias, words, first_column):
    """Word ``words[i]``'s column (``word_columns[words[i]]``) and its entry in each part of ``panel_bias``
    (bias, then any scales and corrections, each a padded panel row long) into column ``first_column + i``
    of packed ``to_panels`` (``[panels, stripes, in, stripe]``) and of ``to_bias`` (one compiled call:
    numpy's fancy indexing over the panels took 0.17 ms a sentence on a Zen 4 VM)."""
    stripe = to_panels.shape[3]
    width = word_columns.shape[0]
    for i in range(words.size):
        source, target = words[i], first_column + i
        for part in range(panel_bias.size // width):
            to_bias[part * width + target] = panel_bias[part * width + source]
        q, t, lane = target // vector_kernels.PANEL, target % vector_kernels.PANEL // stripe, target % stripe
        for depth in range(word_columns.shape[1]):
            to_panels[q, t, depth, lane] = word_columns[source, depth]


def _sentence_words(text: np.ndarray, eos: int, lowest: int):
    """Each distinct (sentence, word) of ``text`` (sentences each after an ``eos``) with a word of id
    ``lowest`` or more, by sentence then word: the sentences' numbers and the words."""
    sentence = np.cumsum(text == eos) - 1
    kept = (text != eos) & (text >= lowest)
    width = int(text.max()) + 1
    codes = np.unique(sentence[kept].astype(np.int64) * width + text[kept])
    return codes // width, codes % width


def nothing_to_add(draft_vocab: int) -> str:
    """The refusal of a shortlist for a head drafting among all words."""
    words = draft_vocab or "all"
    return (f"--draft-shortlist adds words to those the head drafts among, the first --draft-vocab ({words}) of the "
            "target dictionary: with all of them there is nothing to add; drop --draft-shortlist or set --draft-vocab")


class ShortlistProjection:
    """A verifier's output projection onto the first ``first_words`` words and, per batch, the words
    ``select`` names: columns ``[first words | selected words, ascending]`` (so the first of equal
    scores is the lowest word's, as over the dictionary), ``column_words`` naming each column's word.
    On the vector kernel all words are packed once; ``select`` copies the selected words' columns
    after the first words' (a few KB), so a product reads the first words and those alone. Called from
    torch, it scores all words and hides the unselected ones (``-inf``): where the kernel is not used
    (a GPU), the bytes a projection reads cost little."""

    def __init__(self, projection: torch.nn.Linear, first_words: int, precision: str = "float32"):
        """``projection``: the verifier's output layer; ``precision``: ``Product``'s."""
        bias = None if projection.bias is None else projection.bias.detach()
        self.all_words = Product(projection.weight.detach().t(), bias, precision)
        self.first_words = first_words
        self.on_kernel = self.all_words.on_kernel
        if self.on_kernel:
            self.panels, self.panel_bias = self.all_words.panels.copy(), self.all_words.panel_bias.copy()
            # each word's column in one row ([words, in]): gathering a batch's columns from the panels read
            # a cache line per word and input, 0.1 ms a sentence from L3
            panels = self.all_words.panels
            self.word_columns = np.ascontiguousarray(panels.transpose(0, 1, 3, 2)).reshape(-1, panels.shape[2])
        self.select(np.zeros(0, dtype=np.int64))

    def select(self, words: np.ndarray):
        """Project onto the first words and ``words`` (ascending, all beyond the first) until the next call."""
        self.column_words = np.concatenate([np.arange(self.first_words), words]).astype(np.int64)
        self.hidden = None  # the words not drafted, made when torch projects
        if self.on_kernel:
            _copy_columns(self.word_columns, self.all_words.panel_bias, self.panels, self.panel_bias, words,
                          self.first_words)

    @property
    def operands(self):
        """``Product.operands`` of the columns."""
        return self.panels, self.panel_bias, self.column_words.size

    def __call__(self, x: Tensor) -> Tensor:
        """Logits over all words, ``-inf`` for the words not drafted."""
        if self.hidden is None:
            self.hidden = torch.ones(self.all_words.weight.size(1), dtype=torch.bool)
            self.hidden[torch.from_numpy(self.column_words)] = False
            self.hidden = self.hidden.to(self.all_words.weight.device)
        return self.all_words(x).masked_fill(self.hidden, -float("inf"))

