#!/usr/bin/env python3
"""Align the King James Version with the World English Bible verse by verse (English -> English).

Both texts come from the SWORD modules of the Debian packages sword-text-kjv and sword-text-web,
read with ``diatheke -f OSIS``: its ``plain`` format glues words together where markup stood, so
the OSIS markup is stripped here instead (notes dropped with their content, words kept). A pair is
one verse reference present in both modules. Whole books are held out for test and valid, so no
book contributes to two splits.
"""
import argparse
import html
import re
import subprocess
from collections import Counter
from pathlib import Path

# The 66 books as diatheke names them (English locale), in canonical order.
BOOKS = (
    "Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth",
    "I Samuel", "II Samuel", "I Kings", "II Kings", "I Chronicles", "II Chronicles", "Ezra",
    "Nehemiah", "Esther", "Job", "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon", "Isaiah",
    "Jeremiah", "Lamentations", "Ezekiel", "Daniel", "Hosea", "Joel", "Amos", "Obadiah", "Jonah",
    "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai", "Zechariah", "Malachi",
    "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "I Corinthians", "II Corinthians",
    "Galatians", "Ephesians", "Philippians", "Colossians", "I Thessalonians", "II Thessalonians",
    "I Timothy", "II Timothy", "Titus", "Philemon", "Hebrews", "James", "I Peter", "II Peter",
    "I John", "II John", "III John", "Jude", "Revelation of John",
)
# Old and New Testament as two diatheke ranges: the WEB module (NRSVA versification) places the
# deuterocanonical books between them, and they have no KJV counterpart.
RANGES = ("Gen 1:1-Mal 4:6", "Matt 1:1-Rev 22:21")
MODULES = {"kjv": "engKJV2006eb", "web": "engWEB2015eb"}

# diatheke prints one verse per line as "Book C:V: text". Before the key it may repeat a stale
# (canonical) heading, e.g. a psalm title, even in later books: everything before the key is dropped.
KEY = re.compile(r"(?:^|(?<=[\s>]))(?P<book>%s) (?P<chapter>\d+):(?P<verse>\d+): "
                 % "|".join(re.escape(b) for b in sorted(BOOKS, key=len, reverse=True)))
TRAILER = re.compile(r"^\s*\([^()\s]+\)\s*$")  # the "(moduleName)" line that ends the output

NOTE = re.compile(r"<note\b[^>]*/>|<note\b[^>]*>.*?</note>", re.S)
# elements whose content is not verse text: headings and (defensively) rendering helpers
DROPPED = re.compile(r"<(title|rdg|figure)\b[^>]*/>|<(title|rdg|figure)\b[^>]*>.*?</\2>", re.S)
QUOTE_MARKER = re.compile(r"<q\b[^>]*\bmarker=\"([^\"]*)\"[^>]*>")
# tags that separate words (poetry lines, paragraphs, line breaks); other tags (<w>, <transChange>,
# <divineName>, <hi>, ...) may sit inside a word (KJV: "<w>afrai</w>d") and are removed without a space
BLOCK_TAG = re.compile(r"</?(?:l|lg|lb|p|div|milestone|chapter|verse|list|item)\b[^>]*>")
TAG = re.compile(r"<[^>]*>")
NOTE_GAP = "\x00"
# The WEB module lost the space after a footnote ("God<note>…</note><w>created</w>"): where a note
# stood between a non-space and the start of a word or an opening quote, it becomes a space.
NOTE_SPACE = re.compile(NOTE_GAP + r"+(?=[\w“‘(\[])")
USFM_MARKER = re.compile(r"\\\+?[a-z]+\d*\*?")  # leftovers of the USFM sources: "\nd LORD" in the KJV
PILCROW = "¶"  # the KJV's paragraph signs: layout, not words
# The WEB module stores its glossary after Rev 22:21, and diatheke prints it as part of that verse.
APPENDIX = re.compile(r"The following words used in the World English Bible\b.*", re.S)


def clean_osis(fragment):
    """The words of one verse's OSIS text, on one line with single spaces."""
    text = APPENDIX.sub("", NOTE.sub(NOTE_GAP, fragment))
    text = DROPPED.sub(" ", text)
    text = QUOTE_MARKER.sub(lambda m: m.group(1), text)
    text = BLOCK_TAG.sub(" ", text)
    text = USFM_MARKER.sub("", TAG.sub("", text)).replace(PILCROW, " ")
    text = NOTE_SPACE.sub(" ", text).replace(NOTE_GAP, "")
    return " ".join(html.unescape(text).split())


def parse_osis(text):
    """``{(book, chapter, verse): text}`` from diatheke's OSIS output (verses without text kept empty)."""
    verses, ref, lines = {}, None, []

    def close():
        if ref is not None:
            verses[ref] = clean_osis("\n".join(lines))

    for line in text.splitlines():
        match = KEY.search(line)
        if match:
            close()
            ref = (match["book"], int(match["chapter"]), int(match["verse"]))
            if ref in verses:
                raise ValueError(f"verse {ref} appears twice in the diatheke output")
            lines = [line[match.end():]]
        elif TRAILER.match(line) or not line.strip():
            continue
        elif ref is None:
            raise ValueError(f"text before the first verse key: {line[:80]!r}")
        else:  # a verse printed over several lines
            lines.append(line)
    close()
    return verses


def align(source, target):
    """Pairs grouped by book for the references in both texts; the dropped ones, counted by reason."""
    books, dropped = {}, Counter()
    for ref in sorted(source.keys() | target.keys(), key=lambda r: (BOOKS.index(r[0]), r[1], r[2])):
        if ref not in source or ref not in target:
            dropped["in only one module (versification)"] += 1
            print(f"kjv_web: dropping {ref[0]} {ref[1]}:{ref[2]}: only in the "
                  f"{'KJV' if ref in source else 'WEB'} module")
        elif not source[ref] or not target[ref]:
            dropped["empty after cleaning"] += 1
            print(f"kjv_web: dropping {ref[0]} {ref[1]}:{ref[2]}: empty in the "
                  f"{'KJV' if not source[ref] else 'WEB'} module")
        else:
            books.setdefault(ref[0], []).append((source[ref], target[ref]))
    return books, dropped


def split_books(books, test_books, valid_books):
    """Whole books to test and valid, the rest to train, each in canonical order."""
    if set(test_books) & set(valid_books):
        raise ValueError("a book cannot be in both test and valid")
    for book in (*test_books, *valid_books):
        if book not in books:
            raise ValueError(f"unknown or empty book {book!r}; books are named as in BOOKS")
    splits = {"test": [], "valid": [], "train": []}
    for book in sorted(books, key=BOOKS.index):
        name = "test" if book in test_books else "valid" if book in valid_books else "train"
        splits[name].extend(books[book])
    return splits


def deduplicate(splits):
    """Keep each pair once per split and drop valid/train pairs whose source is held out before them.

    Returns the splits and how many pairs each lost, so that no pair disappears unreported.
    """
    lost, held_out_sources = Counter(), set()
    for name in ("test", "valid", "train"):
        seen, kept = set(), []
        for pair in splits[name]:
            if pair[0] not in held_out_sources and pair not in seen:
                seen.add(pair)
                kept.append(pair)
        lost[name] = len(splits[name]) - len(kept)
        splits[name] = kept
        held_out_sources.update(source for source, _ in kept)
    return splits, lost


def read_module(module):
    """All 66 books of one SWORD module as ``{(book, chapter, verse): text}``, via diatheke."""
    verses = {}
    for key in RANGES:
        # -o f: keep the footnotes in the output so that clean_osis sees where they stood
        result = subprocess.run(["diatheke", "-b", module, "-f", "OSIS", "-o", "f", "-k", key],
                                capture_output=True, text=True, check=True)
        verses.update(parse_osis(result.stdout))
    missing = set(BOOKS) - {book for book, _, _ in verses}
    if missing:
        raise SystemExit(f"error: module {module} gave no verses for {sorted(missing)}")
    return verses


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out-dir", required=True, type=Path)
    parser.add_argument("--kjv-module", default=MODULES["kjv"], help="SWORD name of the KJV module")
    parser.add_argument("--web-module", default=MODULES["web"], help="SWORD name of the WEB module")
    parser.add_argument("--test-books", default="Ruth,Proverbs,John,Galatians",
                        help="comma-separated books held out for test (names as in BOOKS)")
    parser.add_argument("--valid-books", default="Judges,Hebrews",
                        help="comma-separated books held out for valid")
    args = parser.parse_args()

    kjv, web = read_module(args.kjv_module), read_module(args.web_module)
    print(f"kjv_web: {len(kjv)} KJV verses, {len(web)} WEB verses")
    books, dropped = align(kjv, web)
    splits = split_books(books, args.test_books.split(","), args.valid_books.split(","))
    splits, duplicates = deduplicate(splits)
    for reason, count in sorted(dropped.items()):
        print(f"kjv_web: dropped {count} verses: {reason}")

    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, pairs in splits.items():
        for side, lang in ((0, "kjv"), (1, "web")):
            with open(args.out_dir / f"{name}.{lang}", "w", encoding="utf-8") as out:
                out.writelines(pair[side] + "\n" for pair in pairs)
        print(f"kjv_web {name}: {len(pairs)} verse pairs ({duplicates[name]} dropped as duplicates"
              f"{'' if name == 'test' else ' or held-out sources'})")


if __name__ == "__main__":
    main()
