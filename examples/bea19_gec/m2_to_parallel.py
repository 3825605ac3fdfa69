#!/usr/bin/env python3
"""English GEC data of the BEA-2019 shared task's restricted setting as parallel text, from the M2
files of the archives as distributed:

  train  W&I+LOCNESS v2.1 train (wi+locness/m2/ABC.train.gold.bea19.m2), plus, when present, FCE v2.1
         train (fce/m2/fce.train.gold.bea19.m2), Lang-8 (lang8.train.auto.bea19.m2) and NUCLE 3.3
         (release3.3/bea2019/nucle.train.gold.bea19.m2)
  valid  W&I+LOCNESS v2.1 dev (wi+locness/m2/ABCN.dev.gold.bea19.m2)
  test   CoNLL-2014 (conll14st-test-data/noalt/official-2014.combined.m2, two annotators), scored
         with the M2 scorer against that file, copied to RAW/test.m2

    python examples/bea19_gec/m2_to_parallel.py --archives DIR --out-dir RAW [--work-dir DIR]

writes RAW/{train,valid,test}.{src,tgt}: the source is the M2 'S' line, the target the sentence with
annotator 0's edits applied as the BEA-2019 organisers' corr_from_m2.py applies them (edits in file
order; noop, UNK and Um edits change nothing; the first of several alternative corrections; '-NONE-'
or an empty correction deletes). Sentences without edits stay, as copies. RAW/test.tgt2, ... are the
other test annotators' corrections (second references for BLEU and GLEU). The text is tokenized as
the M2 files are; it is not tokenized again.
"""
import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from recipe_data import DataError, locate  # noqa: E402  (scripts/recipe_data.py)

UNCHANGING_TYPES = {"noop", "UNK", "Um"}  # edits that leave the sentence as it is (corr_from_m2.py's skip set)

# (name, archive, member, required): the M2 files of the training set, in this order
TRAIN = [
    ("W&I+LOCNESS train", "wi+locness_v2.1.bea19.tar.gz", "wi+locness/m2/ABC.train.gold.bea19.m2", True),
    ("FCE train", "fce_v2.1.bea19.tar.gz", "fce/m2/fce.train.gold.bea19.m2", False),
    ("Lang-8", "lang8.bea19.tar.gz", "lang8.train.auto.bea19.m2", False),
    ("NUCLE", "release3.3.tar.bz2", "release3.3/bea2019/nucle.train.gold.bea19.m2", False),
]
VALID = ("W&I+LOCNESS dev", "wi+locness_v2.1.bea19.tar.gz", "wi+locness/m2/ABCN.dev.gold.bea19.m2")
TEST = ("CoNLL-2014 test", "conll14st-test-data.tar.gz", "conll14st-test-data/noalt/official-2014.combined.m2")


def read_m2(path):
    """The sentences of an M2 file: (tokens, edits), an edit being (start, end, type, correction
    tokens, annotator) in file order. Blocks are separated by blank lines; each has one 'S' line."""
    sentences, block = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n").rstrip("\r")
            if line.strip():
                block.append((number, line))
                continue
            if block:
                sentences.append(parse_block(path, block))
                block = []
    if block:
        sentences.append(parse_block(path, block))
    return sentences


def parse_block(path, block):
    (first_number, first), edits = block[0], []
    if not first.startswith("S "):
        raise DataError(f"{path}, line {first_number}: a block must start with an 'S ' line")
    for number, line in block[1:]:
        if not line.startswith("A "):
            raise DataError(f"{path}, line {number}: expected an 'A ' line (one 'S' line per block)")
        fields = line[2:].split("|||")
        try:
            start, end = map(int, fields[0].split())
            annotator = int(fields[5])
        except (ValueError, IndexError):
            raise DataError(f"{path}, line {number}: not an M2 edit "
                            "('A start end|||type|||correction|||required|||comment|||annotator')") from None
        correction = fields[2].split("||")[0].strip()
        tokens = [] if correction in ("", "-NONE-") else correction.split()
        edits.append((start, end, fields[1], tokens, annotator))
    return first[2:].split(), edits


def corrected(tokens, edits, annotator=0):
    """TOKENS with ANNOTATOR's edits applied in file order (offsets into the original sentence)."""
    out, shift = list(tokens), 0
    for start, end, kind, correction, who in edits:
        if who != annotator or kind in UNCHANGING_TYPES or start < 0:
            continue
        out[start + shift:end + shift] = correction
        shift += len(correction) - (end - start)
    return out


def annotators(sentences):
    """The annotator ids of an M2 file, sorted (noop edits count: an annotator who changed nothing)."""
    return sorted({edit[4] for _, edits in sentences for edit in edits} or {0})


def write_split(out_dir, split, pairs):
    with open(out_dir / f"{split}.src", "w", encoding="utf-8") as src, \
            open(out_dir / f"{split}.tgt", "w", encoding="utf-8") as tgt:
        for source, target in pairs:
            src.write(source + "\n")
            tgt.write(target + "\n")


def parallel(sentences):
    """(source, annotator 0's correction) of each sentence, and how many were dropped for an empty
    side (binarization refuses empty lines) and how many are copies."""
    pairs, dropped, copies = [], 0, 0
    for tokens, edits in sentences:
        target = corrected(tokens, edits)
        if not tokens or not target:
            dropped += 1
            continue
        copies += target == tokens
        pairs.append((" ".join(tokens), " ".join(target)))
    return pairs, dropped, copies


def convert(archives, out_dir, work_dir):
    out_dir.mkdir(parents=True, exist_ok=True)
    train = []
    for name, archive, member, required in TRAIN:
        try:
            path = locate(archives, archive, member, work_dir)
        except DataError:
            if required:
                raise
            print(f"train: {name}: not used ({archive} is not in {archives})")
            continue
        pairs, dropped, copies = parallel(read_m2(path))
        print(f"train: {name}: {len(pairs):,} pairs ({copies:,} unchanged; {dropped:,} dropped, an empty side)")
        train += pairs
    write_split(out_dir, "train", train)
    print(f"train: {len(train):,} pairs")

    name, archive, member = VALID
    pairs, dropped, copies = parallel(read_m2(locate(archives, archive, member, work_dir)))
    write_split(out_dir, "valid", pairs)
    print(f"valid: {name}: {len(pairs):,} pairs ({copies:,} unchanged; {dropped:,} dropped, an empty side)")

    name, archive, member = TEST
    m2 = locate(archives, archive, member, work_dir)
    sentences = read_m2(m2)
    references = {who: [corrected(tokens, edits, who) for tokens, edits in sentences]
                  for who in annotators(sentences)}
    for i, (tokens, _) in enumerate(sentences):
        empty = [who for who, corrections in references.items() if not corrections[i]]
        if not tokens or empty:
            raise DataError(f"{m2}: sentence {i + 1} is empty{' for annotator ' + str(empty[0]) if empty else ''}; "
                            "every test sentence is scored, so none may be dropped")
    for n, (who, corrections) in enumerate(references.items(), 1):
        suffix = "" if n == 1 else str(n)
        (out_dir / f"test.tgt{suffix}").write_text("".join(" ".join(c) + "\n" for c in corrections), encoding="utf-8")
    (out_dir / "test.src").write_text("".join(" ".join(tokens) + "\n" for tokens, _ in sentences), encoding="utf-8")
    shutil.copyfile(m2, out_dir / "test.m2")
    print(f"test: {name}: {len(sentences):,} sentences, annotators {', '.join(map(str, references))} "
          f"(references test.tgt{', test.tgt2 ...' if len(references) > 1 else ''})")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archives", required=True, help="folder of the archives as distributed")
    parser.add_argument("--out-dir", required=True, type=Path)
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the archives' files are extracted (default: OUT_DIR/../extracted)")
    args = parser.parse_args(argv)
    try:
        convert(args.archives, args.out_dir, args.work_dir or args.out_dir.parent / "extracted")
    except DataError as error:
        sys.exit(f"m2_to_parallel.py: {error}")


if __name__ == "__main__":
    main()
