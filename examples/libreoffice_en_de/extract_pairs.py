#!/usr/bin/env python3
"""Align the English and German LibreOffice help pages into sentence pairs.

Both help trees have the same page names and give each paragraph the same id, so a pair is the
text of one (page, id, occurrence) in both languages. The Mac-only variants hidden in
``<span class="MAC">`` are dropped so that each side keeps the default wording. Whole pages are
held out for test and valid, so no page contributes to two splits.
"""
import argparse
import random
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

TEXT_ELEMENTS = {"p", "h1", "h2", "h3", "h4", "h5", "h6"}
PARAGRAPH_ID = re.compile(r"^(par|hd)_id")


class ParagraphParser(HTMLParser):
    """Collects the visible text of every paragraph or heading that carries a help id."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs = []  # (key, text) in document order
        self._open_id = None
        self._open_tag = None
        self._text = []
        self._skip_depth = 0  # > 0 inside a hidden Mac-only span
        self._occurrences = Counter()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if self._skip_depth:
            if tag == "span":
                self._skip_depth += 1
            return
        if tag == "span" and "MAC" in (attrs.get("class") or "").split():
            self._skip_depth = 1
        elif tag in TEXT_ELEMENTS and PARAGRAPH_ID.match(attrs.get("id") or ""):
            self._open_id, self._open_tag, self._text = attrs["id"], tag, []

    def handle_endtag(self, tag):
        if self._skip_depth:
            if tag == "span":
                self._skip_depth -= 1
            return
        if self._open_id is not None and tag == self._open_tag:
            occurrence = self._occurrences[self._open_id]
            self._occurrences[self._open_id] += 1
            text = " ".join("".join(self._text).split())
            self.paragraphs.append(((self._open_id, occurrence), text))
            self._open_id = None

    def handle_data(self, data):
        if self._open_id is not None and not self._skip_depth:
            self._text.append(data)


def read_paragraphs(path):
    parser = ParagraphParser()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return dict(parser.paragraphs)


def page_pairs(en_page, de_page):
    english, german = read_paragraphs(en_page), read_paragraphs(de_page)
    for key, en_text in english.items():
        de_text = german.get(key)
        if en_text and de_text:
            yield en_text, de_text


def split_pages(pages, test_pairs, valid_pairs, seed):
    """Shuffle whole pages and fill test, then valid, up to the wanted pair counts."""
    order = sorted(pages)
    random.Random(seed).shuffle(order)
    splits = {"test": [], "valid": [], "train": []}
    for page in order:
        if len(splits["test"]) < test_pairs:
            splits["test"].extend(pages[page])
        elif len(splits["valid"]) < valid_pairs:
            splits["valid"].extend(pages[page])
        else:
            splits["train"].extend(pages[page])
    return splits


def deduplicate(splits):
    """Keep each pair once per split and drop training pairs whose source is held out."""
    held_out_sources = set()
    for name in ("test", "valid"):
        seen = set()
        splits[name] = [p for p in splits[name] if not (p in seen or seen.add(p))]
        held_out_sources.update(en for en, _ in splits[name])
    seen = set()
    splits["train"] = [
        p for p in splits["train"]
        if p[0] not in held_out_sources and not (p in seen or seen.add(p))
    ]
    return splits


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--help-root", required=True, type=Path,
                        help="folder holding en-US/ and de/ (…/share/libreoffice/help)")
    parser.add_argument("--out-dir", required=True, type=Path)
    parser.add_argument("--test-pairs", type=int, default=1500)
    parser.add_argument("--valid-pairs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    en_root, de_root = args.help_root / "en-US" / "text", args.help_root / "de" / "text"
    if not en_root.is_dir() or not de_root.is_dir():
        raise SystemExit(f"error: {en_root} or {de_root} is missing; extract both help packages first")
    pages = {}
    for en_page in en_root.rglob("*.html"):
        relative = en_page.relative_to(en_root)
        de_page = de_root / relative
        if de_page.exists():
            pairs = list(page_pairs(en_page, de_page))
            if pairs:
                pages[str(relative)] = pairs
    splits = deduplicate(split_pages(pages, args.test_pairs, args.valid_pairs, args.seed))

    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, pairs in splits.items():
        for side, lang in ((0, "en"), (1, "de")):
            with open(args.out_dir / f"{name}.{lang}", "w", encoding="utf-8") as out:
                out.writelines(pair[side] + "\n" for pair in pairs)
        print(f"{name}: {len(pairs)} pairs")
    print(f"pages: {len(pages)}")


if __name__ == "__main__":
    main()
