"""The lexical shortlist (``--draft-shortlist``): each source word's translations by Dice's coefficient,
counted by hand on a tiny corpus, and the projection onto the first words and a batch's shortlist on
the vector kernel and through torch."""
import os

import numpy as np
import pytest
import torch

from pardec_fairseq.decoding import vector_kernels
from pardec_fairseq.decoding.drafters.shortlist import LexicalShortlist, ShortlistProjection
from tiny import make_dictionary, write_split


def tiny_shortlist(per_word):
    """Three sentence pairs (EOS 2 before each sentence; words below 10 are the first words on the
    target side): source words {5, 6}, {5, 7}, {6}; target words {12, 4}, {12, 13}, {13}."""
    source = np.array([2, 5, 6, 2, 5, 7, 2, 6], dtype=np.int32)
    target = np.array([2, 12, 4, 2, 13, 12, 12, 2, 13], dtype=np.int32)
    to_target = np.arange(20)
    to_target[8] = 15  # source word 8 is target word 15
    return LexicalShortlist.build(source, target, to_target, first_words=10, target_words=20, per_word=per_word)


def test_each_source_words_translations_are_its_likeliest_by_dice_over_the_sentence_pairs():
    # pairs holding both / (pairs holding the source word + pairs holding the target word), times 2:
    # 5-12: 2 * 2 / (2 + 2) = 1, 5-13: 2 / 4; 6-12, 6-13: 2 / 4 (equals: the lower id first); 7-12, 7-13: 2 / 3
    one, two = tiny_shortlist(1), tiny_shortlist(2)
    assert one.table[[5, 6, 7]].tolist() == [[12], [12], [12]]
    assert two.table[[5, 6, 7]].tolist() == [[12, 13], [12, 13], [12, 13]]
    assert (one.table[[0, 1, 2, 3, 4, 8, 9]] == -1).all()  # specials and unseen words have none
    # a batch's words: its source words' translations and the source words beyond the first words themselves
    assert one.words(torch.tensor([[5, 8, 2], [7, 1, 1]])).tolist() == [12, 15]
    assert two.words(torch.tensor([[6, 2]])).tolist() == [12, 13]
    assert one.words(torch.tensor([[9, 4, 2]])).tolist() == []


@pytest.mark.parametrize("block", [1, 7, 100])
def test_counting_the_pairs_in_blocks_gives_the_table_of_counting_them_at_once(block):
    """A corpus counted a few (source word, target word)s at a time, as a large one is, ranks alike."""
    generator = np.random.default_rng(block)

    def corpus(words):  # 40 sentences of 0-6 words, each after EOS (2)
        return np.concatenate([np.concatenate([[2], generator.integers(4, words, generator.integers(0, 7))])
                               for _ in range(40)]).astype(np.int32)
    source, target = corpus(30), corpus(25)
    once, blocks = (LexicalShortlist.build(source, target, np.arange(30), first_words=8, target_words=25, per_word=4,
                                           block=size) for size in (1 << 24, block))
    assert (once.table >= 0).sum() > 40
    np.testing.assert_array_equal(blocks.table, once.table)


def test_a_shortlist_corpus_is_a_parallel_split_named_as_fairseq_preprocess_names_it(tmp_path):
    dictionary = make_dictionary(20)
    with pytest.raises(ValueError, match="name a binarized parallel split as fairseq-preprocess does, "
                                         "DIR/SPLIT.SRC-TGT"):
        LexicalShortlist.for_corpus(str(tmp_path / "train"), dictionary, dictionary, torch.arange(20), 10, 2)
    with pytest.raises(FileNotFoundError, match="found no binarized split .*--draft-shortlist-corpus"):
        LexicalShortlist.for_corpus(str(tmp_path / "train.en-de"), dictionary, dictionary, torch.arange(20), 10, 2)


def test_the_shortlist_is_cached_beside_the_split_and_rebuilt_when_a_side_changes(tmp_path, monkeypatch):
    dictionary = make_dictionary(20)
    prefix = str(tmp_path / "train.en-de")
    write_split(f"{prefix}.en", [[5, 6], [5, 7], [6]])  # the pairs of ``tiny_shortlist``
    write_split(f"{prefix}.de", [[12, 4], [13, 12, 12], [13]])

    def shortlist(per_word=1):
        return LexicalShortlist.for_corpus(prefix, dictionary, dictionary, torch.arange(20), 10, per_word)
    built = shortlist()
    assert built.table[[5, 6, 7]].tolist() == [[12], [12], [12]]
    cache = tmp_path / "train.en-de.shortlist-10-1.npz"
    assert cache.exists()

    def fail(*args, **kwargs):
        raise AssertionError("the cached table was rebuilt")
    with monkeypatch.context() as patched:
        patched.setattr(LexicalShortlist, "build", fail)
        np.testing.assert_array_equal(shortlist().table, built.table)
        with pytest.raises(AssertionError, match="rebuilt"):  # another length of list is another table
            shortlist(per_word=2)

    # a side binarized again (one token longer: its size tells it apart whatever the clock's grain)
    write_split(f"{prefix}.de", [[13, 4], [12, 13, 13], [12, 12]])
    assert shortlist().table[[5, 6, 7]].tolist() == [[13], [12], [12]]

    cache.write_bytes(b"not a zip")  # a cache a killed run left broken is rebuilt, not fatal
    assert shortlist().table[[5, 6, 7]].tolist() == [[13], [12], [12]]
    assert np.load(cache, allow_pickle=False)["table"][[5, 6, 7]].tolist() == [[13], [12], [12]]

    def refuse(path, **arrays):
        raise PermissionError(f"{path} is read-only")
    monkeypatch.setattr(np, "savez", refuse)  # where the split's folder is read-only: built each run, a warning
    assert shortlist(per_word=3).table.shape == (20, 3)
    assert not (tmp_path / "train.en-de.shortlist-10-3.npz").exists() and len(os.listdir(tmp_path)) == 5


@pytest.mark.parametrize("precision", ["float32", "bfloat16", "int8"])
@pytest.mark.parametrize("first_words", [70, 128])
def test_a_shortlist_projection_scores_the_first_words_and_the_selected_ones_alone(precision, first_words):
    torch.manual_seed(0)
    projection = torch.nn.Linear(24, 300)
    shortlisted = ShortlistProjection(projection, first_words, precision)
    x = torch.randn(3, 24)
    all_words = shortlisted.all_words(x)
    for words in (np.array([75, 140, 299]), np.arange(first_words, 300, 3), np.array([201]), np.zeros(0, int)):
        words = words[words >= first_words]
        shortlisted.select(words)
        expected = torch.cat([torch.arange(first_words), torch.from_numpy(words)])
        assert shortlisted.column_words.tolist() == expected.tolist()
        # on the kernel, the columns are the first words' and the selected words', each as among all words
        columns = vector_kernels.product(x.numpy(), *shortlisted.operands)
        assert columns.shape == (3, expected.numel())
        torch.testing.assert_close(torch.from_numpy(columns), all_words[:, expected])
        # through torch, every word's score, the words not drafted hidden
        logits = shortlisted(x)
        drafted = torch.zeros(300, dtype=torch.bool)
        drafted[expected] = True
        torch.testing.assert_close(logits[:, drafted], all_words[:, drafted])
        assert torch.isneginf(logits[:, ~drafted]).all()
