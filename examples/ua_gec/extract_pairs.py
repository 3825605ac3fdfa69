#!/usr/bin/env python3
"""Sentence pairs for Ukrainian grammatical error correction from the ``ua-gec`` package.

Uses the ``gec-only`` annotation layer with its official split. Training pairs come from the first
annotator; the test set keeps both annotators (``test.tgt`` and ``test.tgt2``) for two-reference
scores. Every 20th training document is held out whole as the validation set.
"""
import argparse
from pathlib import Path

import ua_gec


def read(path):
    return path.read_text(encoding="utf-8").splitlines()


def document_pairs(folder, doc_id, annotator):
    sources = read(folder / "source-sentences" / f"{doc_id}.src.txt")
    targets = read(folder / "target-sentences" / f"{doc_id}.{annotator}.txt")
    if len(sources) != len(targets):
        raise SystemExit(f"error: {doc_id}.{annotator} is not line-aligned with its source")
    pairs = [(s.strip(), t.strip()) for s, t in zip(sources, targets)]
    empty = [n + 1 for n, (s, t) in enumerate(pairs) if not s or not t]
    if empty:  # fairseq would turn an empty line into a sentence of only </s>
        print(f"ua_gec: skipping empty lines {empty} of {folder.name}/{doc_id}.{annotator}")
    return [(s, t) for s, t in pairs if s and t]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out-dir", required=True, type=Path)
    parser.add_argument("--valid-every", type=int, default=20, help="hold out every N-th training document")
    args = parser.parse_args()
    data = Path(ua_gec.__file__).parent / "data" / "gec-only"

    def doc_ids(split):
        return sorted(p.name.split(".")[0] for p in (data / split / "source-sentences").glob("*.src.txt"))

    splits = {"train": [], "valid": []}
    for n, doc_id in enumerate(doc_ids("train")):
        splits["valid" if n % args.valid_every == 0 else "train"] += document_pairs(data / "train", doc_id, "a1")

    test, second_references = [], []
    for doc_id in doc_ids("test"):
        first, second = (document_pairs(data / "test", doc_id, a) for a in ("a1", "a2"))
        if [s for s, _ in first] != [s for s, _ in second]:
            raise SystemExit(f"error: the two test annotations of {doc_id} cover different sentences")
        test += first
        second_references += [t for _, t in second]
    splits["test"] = test

    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, pairs in splits.items():
        (args.out_dir / f"{name}.src").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
        (args.out_dir / f"{name}.tgt").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
        unchanged = sum(s == t for s, t in pairs) / max(len(pairs), 1)
        print(f"ua_gec {name}: {len(pairs)} sentence pairs ({100 * unchanged:.0f}% need no correction)")
    (args.out_dir / "test.tgt2").write_text("".join(t + "\n" for t in second_references), encoding="utf-8")


if __name__ == "__main__":
    main()
