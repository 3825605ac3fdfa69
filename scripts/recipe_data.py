#!/usr/bin/env python3
"""Data helpers of the recipes that start from official archives (examples/wmt14_en_de,
examples/wmt16_en_ro, examples/bea19_gec): files inside .tgz/.tar.gz/.tar.bz2/.zip archives as
distributed, the segments of WMT's .sgm files, and the WMT corpora as raw parallel text.

    python scripts/recipe_data.py --archives DIR --out-dir RAW -s en -t de \\
        --train ARCHIVE PREFIX [--train ARCHIVE PREFIX ...] \\
        --valid ARCHIVE SRC.sgm REF.sgm --test ARCHIVE SRC.sgm REF.sgm

writes RAW/{train,valid,test}.{SRC,TGT}. A training corpus is the pair of files PREFIX.SRC and
PREFIX.TGT of ARCHIVE (paths inside the archive). As in fairseq's prepare-wmt14en2de.sh, the training
text gets Moses' punctuation normalization and non-printing characters removed, and pairs are
cleaned as Moses' clean-corpus-n.perl (-ratio 1.5, 1 to 250 words) does, here on the words of the raw
text (fairseq cleans after BPE). Valid and test are the <seg> texts of the .sgm files (as Moses'
input-from-sgm.perl extracts them: white space collapsed, nothing unescaped), every segment kept.
"""
import argparse
import os
import shutil
import sys
import tarfile
import zipfile
from itertools import zip_longest
from pathlib import Path

import regex

NON_PRINTING = regex.compile(r"[\p{C}\u2028\u2029]")  # remove-non-printing-char.perl, and line separators
SEGMENT = regex.compile(r"<seg\b[^>]*>(.*?)</seg\s*>", regex.IGNORECASE | regex.DOTALL)


class DataError(Exception):
    """A file that is missing or not what the recipe expects; the message says which and why."""


def copy_member(archive, wanted, target):
    """Copy the first regular file of a tar or zip ARCHIVE whose name (without a leading './') is
    WANTED to TARGET; returns whether there was one, and the names of the members that have WANTED's
    file name."""
    same_name = []

    def copy(source):
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".part")
        with source, open(partial, "wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)
        partial.replace(target)

    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                for info in zf.infolist():
                    if not info.is_dir() and os.path.basename(info.filename) == os.path.basename(wanted):
                        same_name.append(info.filename)
                        if info.filename == wanted:
                            copy(zf.open(info))
                            return True, same_name
            return False, same_name
        with tarfile.open(archive) as tar:  # compression detected from the content
            for info in tar:
                name = info.name[2:] if info.name.startswith("./") else info.name
                if info.isfile() and os.path.basename(name) == os.path.basename(wanted):
                    same_name.append(name)
                    if name == wanted:
                        copy(tar.extractfile(info))
                        return True, same_name
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as error:
        raise DataError(f"{archive} cannot be read as an archive ({error}); download it again") from None
    return False, same_name


def extract_member(archive, member, work_dir):
    """The file MEMBER of ARCHIVE, extracted under WORK_DIR (reused while newer than the archive).
    Found by its path, or else by its file name if exactly one member has that name (an archive
    re-packed with another top folder)."""
    archive = Path(archive)
    target = Path(work_dir) / archive.name / member
    if target.exists() and target.stat().st_mtime >= archive.stat().st_mtime:
        return target
    found, same_name = copy_member(archive, member, target)
    if found:
        return target
    if len(same_name) != 1:
        listed = f": {', '.join(same_name)}" if same_name else ""
        raise DataError(f"{archive} has no file {member} ({len(same_name)} files of that name{listed}); "
                        "is it the archive as distributed?")
    copy_member(archive, same_name[0], target)
    print(f"note: {archive.name}: using {same_name[0]} for {member}")
    return target


def locate(archives, archive_name, member, work_dir):
    """MEMBER of the archive ARCHIVE_NAME in the folder ARCHIVES, or, without that archive, the file
    of MEMBER's name put there unpacked; DataError names both when neither is there."""
    archive = Path(archives) / archive_name
    if archive.exists():
        return extract_member(archive, member, work_dir)
    unpacked = Path(archives) / os.path.basename(member)
    if unpacked.exists():
        return unpacked
    raise DataError(f"{archive} is missing (or put its file {member} unpacked into {archives})")


def read_lines(path):
    """The lines of a UTF-8 text file, split on '\\n' only (a stray '\\r' or U+2028 inside a line
    must not shift a parallel corpus), without their line ends."""
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        for line in f:
            yield line.rstrip("\n").rstrip("\r")


def sgm_segments(path):
    """The text of each <seg ...>...</seg> of a WMT .sgm file, in order, as Moses' input-from-sgm.perl
    gives it: runs of white space (line breaks included) made one space, ends stripped."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    return [" ".join(segment.split()) for segment in SEGMENT.findall(text)]


def clean_reason(source, target, max_words=250, ratio=1.5):
    """Why clean-corpus-n.perl (-ratio RATIO, MIN 1, MAX MAX_WORDS) drops a pair, or None to keep it."""
    s, t = len(source.split()), len(target.split())
    if s == 0 or t == 0:
        return "with an empty side"
    if s > max_words or t > max_words:
        return f"over {max_words} words"
    if s / t > ratio or t / s > ratio:
        return f"with a length ratio over {ratio}"
    return None


class TrainNormalizer:
    """fairseq's WMT training text: normalize-punctuation.perl, then remove-non-printing-char.perl."""

    def __init__(self, lang):
        from sacremoses import MosesPunctNormalizer
        self.punct = MosesPunctNormalizer(lang=lang)

    def __call__(self, line):
        return " ".join(NON_PRINTING.sub(" ", self.punct.normalize(line)).split())


def write_train(corpora, out_dir, src, tgt):
    """Concatenate the training corpora [(name, source file, target file)], normalized and cleaned,
    into OUT_DIR/train.{SRC,TGT}; returns (pairs read, pairs kept, {reason: pairs dropped})."""
    norm_src, norm_tgt = TrainNormalizer(src), TrainNormalizer(tgt)
    read = kept = 0
    dropped = {}
    with open(out_dir / f"train.{src}", "w", encoding="utf-8") as out_s, \
            open(out_dir / f"train.{tgt}", "w", encoding="utf-8") as out_t:
        for name, source_file, target_file in corpora:
            count = 0
            for count, (s, t) in enumerate(zip_longest(read_lines(source_file), read_lines(target_file)), 1):
                if s is None or t is None:
                    raise DataError(f"{name}: {source_file} and {target_file} have different numbers of lines")
                s, t = norm_src(s), norm_tgt(t)
                reason = clean_reason(s, t)
                if reason:
                    dropped[reason] = dropped.get(reason, 0) + 1
                    continue
                out_s.write(s + "\n")
                out_t.write(t + "\n")
                kept += 1
            print(f"train: {name}: {count:,} pairs")
            read += count
    return read, kept, dropped


def write_sgm_split(split, source_sgm, reference_sgm, out_dir, src, tgt):
    """OUT_DIR/SPLIT.{SRC,TGT} from a source and a reference .sgm file, every segment kept."""
    sources, references = sgm_segments(source_sgm), sgm_segments(reference_sgm)
    if len(sources) != len(references) or not sources:
        raise DataError(f"{source_sgm} has {len(sources)} segments and {reference_sgm} {len(references)}; "
                        "expected the same number, at least one")
    for path, segments in ((source_sgm, sources), (reference_sgm, references)):
        if "" in segments:
            raise DataError(f"{path}: segment {segments.index('') + 1} is empty; binarization refuses empty lines")
    for lang, segments in ((src, sources), (tgt, references)):
        (out_dir / f"{split}.{lang}").write_text("".join(s + "\n" for s in segments), encoding="utf-8")
    return len(sources)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archives", required=True, help="folder of the archives as distributed")
    parser.add_argument("--out-dir", required=True, type=Path, help="gets {train,valid,test}.{SRC,TGT}")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the archives' files are extracted (default: OUT_DIR/../extracted)")
    parser.add_argument("-s", "--source-lang", required=True)
    parser.add_argument("-t", "--target-lang", required=True)
    parser.add_argument("--train", nargs=2, action="append", required=True, metavar=("ARCHIVE", "PREFIX"))
    parser.add_argument("--valid", nargs=3, required=True, metavar=("ARCHIVE", "SRC_SGM", "REF_SGM"))
    parser.add_argument("--test", nargs=3, required=True, metavar=("ARCHIVE", "SRC_SGM", "REF_SGM"))
    args = parser.parse_args(argv)
    src, tgt = args.source_lang, args.target_lang
    work = args.work_dir or args.out_dir.parent / "extracted"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    try:
        held_out = {}
        for split, (archive, source_sgm, reference_sgm) in (("valid", args.valid), ("test", args.test)):
            files = [locate(args.archives, archive, member, work) for member in (source_sgm, reference_sgm)]
            held_out[split] = write_sgm_split(split, *files, args.out_dir, src, tgt)
        corpora = [(os.path.basename(prefix), *(locate(args.archives, archive, f"{prefix}.{lang}", work)
                                                for lang in (src, tgt)))
                   for archive, prefix in args.train]
        read, kept, dropped = write_train(corpora, args.out_dir, src, tgt)
    except DataError as error:
        sys.exit(f"recipe_data.py: {error}")
    reasons = ", ".join(f"{n:,} {reason}" for reason, n in sorted(dropped.items())) or "none"
    print(f"train: {kept:,} of {read:,} pairs kept (dropped: {reasons})")
    for split, n in held_out.items():
        print(f"{split}: {n:,} pairs")


if __name__ == "__main__":
    main()
