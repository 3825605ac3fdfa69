"""The KJV -> WEB aligner: OSIS cleaning of diatheke's output and the split by whole books.

No diatheke needed: the inputs are small hand-written imitations of ``diatheke -f OSIS -o f``.
"""

import pytest

from conftest import load_example_module


def load_extractor():
    return load_example_module("kjv_web")


# One line per verse, "Book C:V: text"; a stale psalm title may precede the key (a diatheke quirk),
# a verse may go on over a second line, and the output ends with "(moduleName)".
KJV_OSIS = """\
Genesis 1:1: <title type="main">THE FIRST BOOK OF MOSES</title>¶ In the <w lemma="strong:H7225">beginning</w> \
<w lemma="strong:H0430" morph="x">God</w> <w lemma="strong:H1254">created</w> the heaven.<milestone type="line"/>
Genesis 1:2: And the <w lemma="strong:H0776">earth</w> was <transChange type="added">without</transChange> \
<w>form</w>;<note placement="foot" osisRef="Gen.1.2">Or, <reference>waste</reference>.</note> and the \
<divineName type="yhwh">LORD</divineName> saw it.  <milestone type="line"/>
A <w lemma="strong:H4210">Psalm</w> of <w>David</w>.   Psalms 3:1: <w>LORD</w>, they being <w>afrai</w>d \
<w>wondered</w> at <lg sID="a"/><l sID="b"/>me<l eID="b"/><l sID="c"/>and thee.<l eID="c"/><lg eID="a"/>
A <w>Psalm</w> of <w>David</w>.   Psalms 3:2: by my <w>name</w> \\nd <w>JEHOVAH</w></divineName> was I \
<hi type="italic">not</hi> known &amp; seen,
so it goes on.
I John 5:7: <w>For</w> there are three.
John 5:7: <w>The</w> <w>sick</w> man.
Revelation of John 22:21: <w>Amen</w>.
(engKJV2006eb)
"""
WEB_OSIS = """\
Genesis 1:1: <w>In</w> <w>the</w> <w>beginning</w>, <w>God</w><note placement="foot">1:1 The Hebrew word \
rendered “God” is “אֱלֹהִ֑ים” (Elohim).</note><w>created</w> <w>the</w> <w>heavens</w>.<milestone type="line"/>
Genesis 1:2: <w>The</w> <w>earth</w> <w>was</w> <w>formless</w>,<note placement="foot">or, empty</note>\
“<w>void</w>”<note placement="foot">a second note</note>. <w>Yahweh</w><note placement="foot">“Yahweh” is \
God’s proper Name.</note> saw it.<milestone type="line"/>
For the Chief Musician.  Psalms 3:1: <w>Yahweh</w>, <w>being</w> afraid they wondered at me and you.
Psalms 3:2: <note placement="foot">3:2 only a note</note><milestone type="line"/>
I John 5:7: <w>For</w> <w>there</w> <w>are</w> <w>three</w> <w>who</w> <w>testify</w>:
Revelation of John 12:18: <milestone type="line"/>
Revelation of John 22:21: <w>Amen</w>.            The following words used in the World English Bible \
(WEB) are not very common. Abaddon Abaddon is Hebrew for destruction.
(engWEB2015eb)
"""


def test_parse_osis_keeps_the_words_and_drops_markup_notes_and_headings():
    extractor = load_extractor()
    assert extractor.parse_osis(KJV_OSIS) == {
        ("Genesis", 1, 1): "In the beginning God created the heaven.",
        ("Genesis", 1, 2): "And the earth was without form; and the LORD saw it.",
        ("Psalms", 3, 1): "LORD, they being afraid wondered at me and thee.",
        ("Psalms", 3, 2): "by my name JEHOVAH was I not known & seen, so it goes on.",
        ("I John", 5, 7): "For there are three.",
        ("John", 5, 7): "The sick man.",
        ("Revelation of John", 22, 21): "Amen.",
    }


def test_parse_osis_puts_a_space_where_a_footnote_glued_two_words():
    extractor = load_extractor()
    verses = extractor.parse_osis(WEB_OSIS)
    assert verses[("Genesis", 1, 1)] == "In the beginning, God created the heavens."
    assert verses[("Genesis", 1, 2)] == "The earth was formless, “void”. Yahweh saw it."
    assert verses[("Psalms", 3, 1)] == "Yahweh, being afraid they wondered at me and you."
    assert verses[("Psalms", 3, 2)] == ""  # a verse that is only a note: empty, dropped by align
    assert verses[("Revelation of John", 22, 21)] == "Amen."  # the glossary appended to it is cut


def test_parse_osis_refuses_text_before_the_first_verse():
    extractor = load_extractor()
    with pytest.raises(ValueError):
        extractor.parse_osis("stray text\nGenesis 1:1: In the beginning.\n")


def test_align_keeps_verses_in_both_texts_and_counts_what_it_drops(capsys):
    extractor = load_extractor()
    books, dropped = extractor.align(extractor.parse_osis(KJV_OSIS), extractor.parse_osis(WEB_OSIS))
    assert books["Genesis"][0] == ("In the beginning God created the heaven.",
                                  "In the beginning, God created the heavens.")
    assert sum(map(len, books.values())) == 5
    assert dropped == {"empty after cleaning": 1, "in only one module (versification)": 2}
    out = capsys.readouterr().out
    assert "Psalms 3:2: empty in the WEB module" in out and "John 5:7: only in the KJV module" in out


def test_whole_books_are_held_out_and_test_sources_never_reach_train():
    extractor = load_extractor()
    names = extractor.BOOKS[:10]
    books = {book: [(f"{book} kjv {i}", f"{book} web {i}") for i in range(5)] for book in names}
    books["Genesis"].append(("Ruth kjv 0", "a different rendering"))  # a test source in a train book
    books["Exodus"].append(("Judges kjv 1", "another rendering"))  # a valid source in a train book
    books["Exodus"].append(books["Exodus"][0])  # a duplicate pair
    splits = extractor.split_books(books, test_books=["Ruth", "Joshua"], valid_books=["Judges"])
    splits, lost = extractor.deduplicate(splits)
    book_of = {pair: book for book, pairs in books.items() for pair in pairs}
    split_books = {name: {book_of[pair] for pair in pairs} for name, pairs in splits.items()}
    assert split_books["test"] == {"Ruth", "Joshua"} and split_books["valid"] == {"Judges"}
    assert not split_books["train"] & (split_books["test"] | split_books["valid"])
    train_sources = {source for source, _ in splits["train"]}
    assert not train_sources & {source for source, _ in splits["test"] + splits["valid"]}
    assert (len(splits["test"]), len(splits["valid"]), len(splits["train"])) == (10, 5, 35)
    assert lost == {"test": 0, "valid": 0, "train": 3}


def test_split_books_refuses_a_book_in_two_held_out_splits_or_an_unknown_book():
    extractor = load_extractor()
    books = {"Ruth": [("a", "b")], "Judges": [("c", "d")]}
    with pytest.raises(ValueError):
        extractor.split_books(books, test_books=["Ruth"], valid_books=["Ruth"])
    with pytest.raises(ValueError):
        extractor.split_books(books, test_books=["Ruht"], valid_books=["Judges"])
