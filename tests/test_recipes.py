"""The recipes built from official archives (examples/wmt14_en_de, examples/wmt16_en_ro,
examples/bea19_gec): their prepare.sh on small stand-ins written in the official formats (archives
with their real internal paths, .sgm files with headers, M2 files with noop edits and several
annotators), the M2 -> parallel conversion and the M2 scorer (hand-computed scores, the examples of
the official m2scorer's README). No model is trained here."""
import importlib.util
import io
import re
import subprocess
import tarfile
import zipfile

import pytest

from conftest import REPO, load_example_module


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def write_tar(path, members):
    """A .tgz (or .tar.bz2) archive with MEMBERS {path inside: text or bytes}."""
    with tarfile.open(path, "w:bz2" if path.name.endswith(".bz2") else "w:gz") as tar:
        for name, content in members.items():
            data = content.encode("utf-8") if isinstance(content, str) else content
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def sgm(setid, lang, kind, docs):
    """A WMT .sgm file: KIND 'src' or 'ref', DOCS {docid: [segment markup, ...]} (a segment may hold
    line breaks and extra spaces, as the real files sometimes do)."""
    top = (f'<srcset setid="{setid}" srclang="any">' if kind == "src"
           else f'<refset setid="{setid}" srclang="any" trglang="{lang}">')
    out = [top]
    for docid, segments in docs.items():
        out.append(f'<doc sysid="{"ref" if kind == "ref" else "src"}" docid="{docid}" genre="news" origlang="en">')
        out.append("<p>")
        out += [f'<seg id="{i}">{segment}</seg>' for i, segment in enumerate(segments, 1)]
        out += ["</p>", "</doc>"]
    out.append("</srcset>" if kind == "src" else "</refset>")
    return "\n".join(out) + "\n"


def run_prepare(recipe, *args):
    return subprocess.run(["bash", str(REPO / "examples" / recipe / "prepare.sh"), *map(str, args)],
                          capture_output=True, text=True)


def binarized_counts(stdout):
    """{(split, lang): sentences} from binarize.sh's report (fairseq-preprocess's counts)."""
    return {(split, lang): int(n) for lang, split, n in re.findall(r"\[(\w+)\] \S*/bpe/(\w+)\.\w+: (\d+) sents", stdout)}


# ---------------------------------------------------------------------------------------------
# WMT14 En-De

LONG = " ".join(["word"] * 251)
EUROPARL = [("Wiederaufnahme der Sitzungsperiode", "Resumption of the session"),
            ("Ich erkläre die Sitzung für „eröffnet“.", "I declare the session “open”."),
            ("", "An empty German side."),
            ("Ja.", "Yes, that is what we really wanted to say here today."),
            ("Das ist ein\x07Test.", "This is a\x07test.")]
COMMONCRAWL = [("Wagen\rRücklauf im Satz.", "Carriage\rreturn in the sentence."),
               (LONG, LONG),
               ("Hallo Welt!", "Hello world!"),
               ("Guten Morgen.", "Good morning.")]
NEWS_COMMENTARY = [("Ein weithin bekanntes Problem.", "A well-known problem."),
                   ("Die Zinsen steigen.", "Interest rates rise.")]
KEPT = 3 + 3 + 2  # an empty side, a length ratio over 1.5 and a 251-word pair are cleaned away


def corpus_members(prefix, pairs, src="de", tgt="en"):
    return {f"{prefix}.{src}": "".join(s + "\n" for s, _ in pairs),
            f"{prefix}.{tgt}": "".join(t + "\n" for _, t in pairs)}


def write_wmt14(folder):
    write_tar(folder / "training-parallel-europarl-v7.tgz", {
        **corpus_members("training/europarl-v7.de-en", EUROPARL),
        "training/europarl-v7.fr-en.fr": "Une autre langue.\n"})
    write_tar(folder / "training-parallel-commoncrawl.tgz", {
        **corpus_members("commoncrawl.de-en", COMMONCRAWL), "commoncrawl.fr-en.en": "Other pair.\n"})
    write_tar(folder / "training-parallel-nc-v9.tgz", corpus_members("training/news-commentary-v9.de-en",
                                                                     NEWS_COMMENTARY))
    dev_en = ["One dev sentence.", "Two dev sentences.", "Three.", "Four dev sentences."]
    dev_de = ["Ein Satz.", "Zwei Sätze.", "Drei.", "Vier Sätze."]
    write_tar(folder / "dev.tgz", {
        "dev/newstest2013-src.en.sgm": sgm("newstest2013", "en", "src", {"d1": dev_en}),
        "dev/newstest2013-ref.de.sgm": sgm("newstest2013", "de", "ref", {"d1": dev_de}),
        "dev/newstest2013.en": "".join(s + "\n" for s in dev_en)})
    test_en = {"1012-bbc": ["India and Japan prime ministers meet in Tokyo", "A well-known fact."],
               "1013-cnn": ["  Two   lines\n of text &amp; more ", "Four.", "Five."]}
    test_de = {"1012-bbc": ["Premierminister Indiens und Japans trafen sich in Tokio", "Eine bekannte Tatsache."],
               "1013-cnn": ["Zwei Zeilen Text &amp; mehr", "Vier.", "Fünf."]}
    write_tar(folder / "test-full.tgz", {
        "test-full/newstest2014-deen-src.en.sgm": sgm("newstest2014", "en", "src", test_en),
        "test-full/newstest2014-deen-ref.de.sgm": sgm("newstest2014", "de", "ref", test_de),
        "test-full/newstest2014-deen-src.de.sgm": sgm("newstest2014", "de", "src", test_de)})


@pytest.mark.slow
def test_wmt14_prepare_from_the_official_archives(tmp_path):
    archives, data = tmp_path / "archives", tmp_path / "data"
    archives.mkdir()
    write_wmt14(archives)
    result = run_prepare("wmt14_en_de", "--raw-dir", archives, "--bpe-merges", 40, data)
    assert result.returncode == 0, result.stderr[-3000:]
    raw = data / "raw"
    # train: the three corpora in order, cleaned, normalized, the stray \r not splitting a line
    assert len(lines(raw / "train.en")) == len(lines(raw / "train.de")) == KEPT
    assert lines(raw / "train.en")[0] == "Resumption of the session"
    assert "This is a test." in lines(raw / "train.en") and "Das ist ein Test." in lines(raw / "train.de")
    assert not any("“" in line or "„" in line for line in lines(raw / "train.en") + lines(raw / "train.de"))
    # (normalize-punctuation.perl deletes a \r; it is the line break that must not move)
    assert lines(raw / "train.en")[3:5] == ["Carriagereturn in the sentence.", "Hello world!"]
    assert lines(raw / "train.de")[3] == "WagenRücklauf im Satz."
    assert "An empty German side." not in lines(raw / "train.en") and LONG not in lines(raw / "train.en")
    # valid and test: every segment, white space collapsed, nothing unescaped, the en-de direction
    assert lines(raw / "valid.en") == ["One dev sentence.", "Two dev sentences.", "Three.", "Four dev sentences."]
    assert len(lines(raw / "test.en")) == len(lines(raw / "test.de")) == 5
    assert lines(raw / "test.en")[2] == "Two lines of text &amp; more"
    assert lines(raw / "test.de")[0] == "Premierminister Indiens und Japans trafen sich in Tokio"
    # Moses tokenization with aggressive dash splits, joint BPE, joined dictionary
    assert "A well @-@ known fact ." in lines(data / "tok" / "test.en")
    assert (data / "bpe" / "codes").exists()
    assert (data / "bin" / "dict.en.txt").read_text() == (data / "bin" / "dict.de.txt").read_text()
    counts = binarized_counts(result.stdout)
    assert counts == {(split, lang): n for split, n in (("train", KEPT), ("valid", 4), ("test", 5))
                      for lang in ("en", "de")}
    assert (data / ".prepared").read_text() == "bpe_merges=40\n"
    # idempotent; other merges into the same folder are refused with the way out
    again = run_prepare("wmt14_en_de", "--raw-dir", archives, "--bpe-merges", 40, data)
    assert again.returncode == 0 and "wmt14_en_de test: 5 sentence pairs" in again.stdout
    assert "sents," not in again.stdout  # nothing binarized again
    other = run_prepare("wmt14_en_de", "--raw-dir", archives, "--bpe-merges", 50, data)
    assert other.returncode == 1 and "prepared with 40 BPE merges, not 50" in other.stderr


@pytest.mark.slow
def test_prepare_names_every_missing_archive(tmp_path):
    for recipe, names in (("wmt14_en_de", ["training-parallel-europarl-v7.tgz", "training-parallel-commoncrawl.tgz",
                                           "training-parallel-nc-v9.tgz", "dev.tgz", "test-full.tgz"]),
                          ("wmt16_en_ro", ["training-parallel-ep-v8.tgz", "en-ro.txt.zip",
                                           "dev-romanian-updated.tgz", "test.tgz"]),
                          ("bea19_gec", ["wi+locness_v2.1.bea19.tar.gz", "conll14st-test-data.tar.gz"])):
        empty = tmp_path / recipe
        empty.mkdir()
        result = run_prepare(recipe, "--raw-dir", empty, tmp_path / f"data_{recipe}")
        assert result.returncode == 1
        for name in names:
            assert f"  {name}   (from http" in result.stderr, (name, result.stderr)
        assert "fce_v2.1" not in result.stderr  # optional: never required
        assert f"examples/{recipe}/prepare.sh --raw-dir THAT_FOLDER" in result.stderr
    bad = run_prepare("wmt14_en_de", "--bpe-merges", "many", tmp_path / "d")
    assert bad.returncode == 2 and "--bpe-merges takes a positive number" in bad.stderr


# ---------------------------------------------------------------------------------------------
# WMT16 En-Ro

def write_wmt16(folder):
    europarl = [("Reluarea sesiunii de lucru", "Resumption of the session"),
                ("Declar deschisă sesiunea de azi.", "I declare the session open."),
                ("Mulțumesc foarte mult.", "Thank you very much.")]
    write_tar(folder / "training-parallel-ep-v8.tgz", {
        **corpus_members("training-parallel-ep-v8/europarl-v8.ro-en", europarl, "ro", "en"),
        "training-parallel-ep-v8/europarl-v8.fi-en.fi": "Kiitos.\n"})
    setimes = [("Știri din Balcani.", "News from the Balkans."), ("Bună ziua.", "Good day."),
               ("Țara își alege președintele.", "The country elects its president.")]
    with zipfile.ZipFile(folder / "en-ro.txt.zip", "w") as zf:
        for name, text in corpus_members("SETIMES.en-ro", setimes, "ro", "en").items():
            zf.writestr(name, text)
        zf.writestr("LICENSE", "GNU GPL\n")
        zf.writestr("README", "SETIMES2\n")
    dev_en, dev_ro = ["First dev.", "Second dev.", "Third dev."], ["Primul.", "Al doilea.", "Al treilea."]
    write_tar(folder / "dev.tgz", {  # WMT16's dev.tgz instead of dev-romanian-updated.tgz
        "dev/newsdev2016-enro-src.en.sgm": sgm("newsdev2016", "en", "src", {"d": dev_en}),
        "dev/newsdev2016-enro-ref.ro.sgm": sgm("newsdev2016", "ro", "ref", {"d": dev_ro}),
        "dev/newsdev2016-roen-src.ro.sgm": sgm("newsdev2016", "ro", "src", {"d": ["Altceva."] * 3})})
    test_en = ["The president spoke.", "It rained.", "A well-known song.", "Bye."]
    test_ro = ["Președintele a vorbit.", "A plouat.", "O melodie cunoscută.", "La revedere."]
    write_tar(folder / "test.tgz", {
        "test/newstest2016-enro-src.en.sgm": sgm("newstest2016", "en", "src", {"a": test_en[:2], "b": test_en[2:]}),
        "test/newstest2016-enro-ref.ro.sgm": sgm("newstest2016", "ro", "ref", {"a": test_ro[:2], "b": test_ro[2:]})})


@pytest.mark.slow
def test_wmt16_prepare_from_the_official_archives(tmp_path):
    archives, data = tmp_path / "archives", tmp_path / "data"
    archives.mkdir()
    write_wmt16(archives)
    result = run_prepare("wmt16_en_ro", "--raw-dir", archives, "--bpe-merges", 30, data)
    assert result.returncode == 0, result.stderr[-3000:]
    raw = data / "raw"
    assert lines(raw / "train.en") == ["Resumption of the session", "I declare the session open.",
                                       "Thank you very much.", "News from the Balkans.", "Good day.",
                                       "The country elects its president."]
    assert lines(raw / "train.ro")[5] == "Țara își alege președintele."
    assert lines(raw / "valid.ro") == ["Primul.", "Al doilea.", "Al treilea."]
    assert lines(raw / "test.ro") == ["Președintele a vorbit.", "A plouat.", "O melodie cunoscută.", "La revedere."]
    assert lines(raw / "test.en")[2] == "A well-known song."
    counts = binarized_counts(result.stdout)
    assert counts == {(split, lang): n for split, n in (("train", 6), ("valid", 3), ("test", 4))
                      for lang in ("en", "ro")}


# ---------------------------------------------------------------------------------------------
# BEA-2019 / CoNLL-2014 GEC

WI_TRAIN = """\
S This are a sentence .
A 1 2|||R:VERB:SVA|||is|||REQUIRED|||-NONE-|||0

S I like & enjoy it .
A -1 -1|||noop|||-NONE-|||REQUIRED|||-NONE-|||0

S He go to the school yesterday .
A 1 2|||R:VERB:TENSE|||went|||REQUIRED|||-NONE-|||0
A 3 4|||U:DET||||||REQUIRED|||-NONE-|||0

S She do n't know what happen .
A 1 2|||R:VERB:SVA|||does|||REQUIRED|||-NONE-|||0
A 3 3|||M:ADV|||really|||REQUIRED|||-NONE-|||0
A 5 6|||R:VERB:TENSE|||happened|||REQUIRED|||-NONE-|||0

S The weather are nice .
A 2 3|||UNK|||are|||REQUIRED|||-NONE-|||0

S Thanks for reading .

"""
WI_TRAIN_TARGETS = ["This is a sentence .", "I like & enjoy it .", "He went to school yesterday .",
                    "She does n't really know what happened .", "The weather are nice .", "Thanks for reading ."]
WI_DEV = """\
S We was happy .
A 1 2|||R:VERB:SVA|||were|||REQUIRED|||-NONE-|||0

S Good morning .
A -1 -1|||noop|||-NONE-|||REQUIRED|||-NONE-|||0
"""
FCE_TRAIN = """\
S Dear Sir .

S I am writting to you .
A 2 3|||R:SPELL|||writing|||REQUIRED|||-NONE-|||0
"""
LANG8 = """\
S I goed home .
A 1 2|||R:VERB:INFL|||went|||REQUIRED|||-NONE-|||0
A 1 2|||R:VERB|||walked|||REQUIRED|||-NONE-|||1

S It is very delicious food .
A 2 3|||U:ADV||||||REQUIRED|||-NONE-|||1

S Hmm .
A 0 2|||U:OTHER||||||REQUIRED|||-NONE-|||0
"""
# the example of the official m2scorer's README: two annotators, a noop, alternative corrections
CONLL14 = """\
S The cat sat at mat .
A 3 4|||Prep|||on|||REQUIRED|||-NONE-|||0
A 4 4|||ArtOrDet|||the||a|||REQUIRED|||-NONE-|||0
A 3 4|||Prep|||on|||REQUIRED|||-NONE-|||1

S The dog .
A 1 2|||NN|||dogs|||REQUIRED|||-NONE-|||0
A -1 -1|||noop|||-NONE-|||-NONE-|||-NONE-|||1

S Giant otters is an apex predator .
A 2 3|||SVA|||are|||REQUIRED|||-NONE-|||0
A 3 4|||ArtOrDet|||-NONE-|||REQUIRED|||-NONE-|||0
A 5 6|||NN|||predators|||REQUIRED|||-NONE-|||0
A 1 2|||NN|||otter|||REQUIRED|||-NONE-|||1

"""
README_GOLD = CONLL14.replace("A 3 4|||Prep|||on|||REQUIRED|||-NONE-|||1\n", "")  # exactly the README's file


def write_bea19(folder):
    write_tar(folder / "wi+locness_v2.1.bea19.tar.gz", {
        "wi+locness/m2/ABC.train.gold.bea19.m2": WI_TRAIN,
        "wi+locness/m2/A.train.gold.bea19.m2": "S Only part A .\n",
        "wi+locness/m2/ABCN.dev.gold.bea19.m2": WI_DEV,
        "wi+locness/json/A.train.json": '{"text": "This are a sentence."}\n',
        "wi+locness/test/ABCN.test.bea19.orig": "A test sentence without annotation .\n"})
    write_tar(folder / "fce_v2.1.bea19.tar.gz", {"fce/m2/fce.train.gold.bea19.m2": FCE_TRAIN,
                                                 "fce/m2/fce.dev.gold.bea19.m2": "S Not in train .\n"})
    (folder / "lang8.train.auto.bea19.m2").write_text(LANG8)  # Lang-8's M2 file, put there unpacked
    write_tar(folder / "conll14st-test-data.tar.gz", {
        "conll14st-test-data/noalt/official-2014.combined.m2": CONLL14,
        "conll14st-test-data/alt/official-2014.combined-withalt.m2": "S Another file .\n"})


@pytest.mark.slow
def test_bea19_prepare_from_the_official_archives(tmp_path):
    archives, data = tmp_path / "archives", tmp_path / "data"
    archives.mkdir()
    write_bea19(archives)
    result = run_prepare("bea19_gec", "--raw-dir", archives, "--bpe-merges", 30, data)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "NUCLE: not used" in result.stdout
    raw = data / "raw"
    sources = [line[2:] for line in (WI_TRAIN + FCE_TRAIN + LANG8).splitlines() if line.startswith("S ")]
    del sources[-1]  # Lang-8's "Hmm ." loses every token: dropped, and counted
    assert lines(raw / "train.src") == sources
    assert lines(raw / "train.tgt") == WI_TRAIN_TARGETS + ["Dear Sir .", "I am writing to you .",
                                                           "I went home .", "It is very delicious food ."]
    assert lines(raw / "valid.src") == ["We was happy .", "Good morning ."]
    assert lines(raw / "valid.tgt") == ["We were happy .", "Good morning ."]
    assert lines(raw / "test.src") == ["The cat sat at mat .", "The dog .", "Giant otters is an apex predator ."]
    assert lines(raw / "test.tgt") == ["The cat sat on the mat .", "The dogs .", "Giant otters are apex predators ."]
    assert lines(raw / "test.tgt2") == ["The cat sat on mat .", "The dog .", "Giant otter is an apex predator ."]
    assert (raw / "test.m2").read_text() == CONLL14
    # already tokenized: no Moses pass ('&' stays, no escaping), then BPE and a joined dictionary
    assert lines(data / "tok" / "train.src") == lines(raw / "train.src")
    counts = binarized_counts(result.stdout)
    assert counts == {(split, lang): n for split, n in (("train", 10), ("valid", 2), ("test", 3))
                      for lang in ("src", "tgt")}
    assert (data / "bin" / "dict.src.txt").read_text() == (data / "bin" / "dict.tgt.txt").read_text()
    # the prepared M2 file scores as the official scorer's README says
    scorer = load_example_module("bea19_gec", "m2scorer")
    sources, golds = scorer.load_annotation(raw / "test.m2")
    system = ["A cat sat on the mat .", "The dog .", "Giant otters are apex predator ."]
    assert scorer.score(system, sources, golds)[3:] == (4, 5, 5)


def test_m2_to_parallel_applies_one_annotators_edits_in_order():
    convert = load_example_module("bea19_gec", "m2_to_parallel")
    tokens = "She do n't know what happen .".split()
    edits = [(1, 2, "R:VERB:SVA", ["does"], 0), (3, 3, "M:ADV", ["really"], 0), (5, 6, "R:VERB", ["happened"], 0),
             (4, 5, "U:PRON", [], 1), (-1, -1, "noop", [], 2), (0, 1, "UNK", ["She"], 0)]
    assert " ".join(convert.corrected(tokens, edits, 0)) == "She does n't really know what happened ."
    assert " ".join(convert.corrected(tokens, edits, 1)) == "She do n't know happen ."
    assert convert.corrected(tokens, edits, 2) == tokens


def test_m2_to_parallel_reads_blocks_alternatives_and_refuses_broken_files(tmp_path):
    convert = load_example_module("bea19_gec", "m2_to_parallel")
    m2 = tmp_path / "a.m2"
    m2.write_text(CONLL14 + "\n\n\nS Last one\n")
    sentences = convert.read_m2(m2)
    assert [" ".join(tokens) for tokens, _ in sentences][-1] == "Last one"
    assert sentences[0][1][1] == (4, 4, "ArtOrDet", ["the"], 0)  # the first of the alternatives
    assert sentences[2][1][1] == (3, 4, "ArtOrDet", [], 0)  # -NONE-: a deletion
    assert convert.annotators(sentences) == [0, 1]
    pairs, dropped, copies = convert.parallel(sentences)
    assert (len(pairs), dropped, copies) == (4, 0, 1)
    m2.write_text("S One .\nX 0 1|||R|||Two|||REQUIRED|||-NONE-|||0\n")
    with pytest.raises(convert.DataError, match="line 2"):
        convert.read_m2(m2)


# ---------------------------------------------------------------------------------------------
# the M2 scorer

@pytest.fixture(scope="module")
def scorer():
    return load_example_module("bea19_gec", "m2scorer")


def m2_score(scorer, tmp_path, gold_text, system):
    gold = tmp_path / "gold.m2"
    gold.write_text(gold_text)
    sources, golds = scorer.load_annotation(gold)
    return scorer.score(system, sources, golds)


def test_m2_scorer_readme_examples(scorer, tmp_path, capsys):
    """The official README's example and its second system (example/system2), computed by hand:
    system: 4 correct of 5 proposed, 5 gold -> P = R = F0.5 = 0.8. system2 misses the article: sentence 1
    1 of 2 (The -> A wrong); sentence 2 annotator 1 (nothing to do); sentence 3 annotator 0, 2 of 2 with 3
    gold -> P = 3/4, R = 3/5, F0.5 = 1.25 * 0.75 * 0.6 / (0.25 * 0.75 + 0.6) = 0.7143."""
    gold = tmp_path / "gold.m2"
    gold.write_text(README_GOLD)
    system = tmp_path / "system"
    system.write_text("A cat sat on the mat .\nThe dog .\nGiant otters are apex predator .\n")
    scorer.main([str(system), str(gold)])
    assert capsys.readouterr().out == "Precision   : 0.8000\nRecall      : 0.8000\nF_0.5       : 0.8000\n"
    system.write_text("A cat sat on mat .\nThe dog .\nGiant otters are apex predator .\n")
    scorer.main([str(system), str(gold)])
    assert capsys.readouterr().out == "Precision   : 0.7500\nRecall      : 0.6000\nF_0.5       : 0.7143\n"


def test_m2_scorer_hand_computed_cases(scorer, tmp_path):
    gold = """\
S He go to school at monday .
A 1 2|||R:VERB|||goes|||REQUIRED|||-NONE-|||0
A 4 5|||R:PREP|||on|||REQUIRED|||-NONE-|||0
A 5 6|||R:ORTH|||Monday|||REQUIRED|||-NONE-|||0
"""
    # exact: all 3 gold edits
    assert m2_score(scorer, tmp_path, gold, ["He goes to school on Monday ."]) == (1.0, 1.0, 1.0, 3, 3, 3)
    # partial: 1 right, 1 wrong (go -> went), 2 missed: P = 1/2, R = 1/3, F0.5 = 1.25 * c / (0.25 g + p)
    p, r, f, *counts = m2_score(scorer, tmp_path, gold, ["He went to school on monday ."])
    assert counts == [1, 2, 3] and (p, r) == (0.5, 1 / 3) and f == pytest.approx(1.25 / (0.75 + 2))
    # no edits: nothing proposed (P = 1 by convention), nothing found (R = 0), F0.5 = 0
    assert m2_score(scorer, tmp_path, gold, ["He go to school at monday ."]) == (1.0, 0.0, 0.0, 0, 0, 3)
    # no edits where none are needed (a noop annotator): a perfect score
    assert m2_score(scorer, tmp_path, "S Fine .\nA -1 -1|||noop|||-NONE-|||REQUIRED|||-NONE-|||0\n",
                    ["Fine ."]) == (1.0, 1.0, 1.0, 0, 0, 0)
    # a needless edit where none are needed: P = 0, R = 1 (nothing to find), F0.5 = 0
    assert m2_score(scorer, tmp_path, "S Fine .\n", ["Good ."]) == (0.0, 1.0, 0.0, 0, 1, 0)
    # an insertion before the first token and a deletion at the end
    assert m2_score(scorer, tmp_path, "S dog barks . .\nA 0 0|||M:DET|||The|||REQUIRED|||-NONE-|||0\n"
                    "A 3 4|||U:PUNCT||||||REQUIRED|||-NONE-|||0\n", ["The dog barks ."])[3:] == (2, 2, 2)


def test_m2_scorer_takes_the_best_annotator_per_sentence(scorer, tmp_path):
    gold = """\
S I has a apple .
A 1 2|||R:VERB:SVA|||have|||REQUIRED|||-NONE-|||0
A 2 3|||R:DET|||an|||REQUIRED|||-NONE-|||0
A 1 2|||R:VERB|||had|||REQUIRED|||-NONE-|||1
"""
    # the edit matches annotator 1's only edit: 1 of 1 proposed, 1 gold (annotator 0: 0 of 1, 2 gold)
    assert m2_score(scorer, tmp_path, gold, ["I had a apple ."]) == (1.0, 1.0, 1.0, 1, 1, 1)
    # matches one of annotator 0's two edits: F0.5 = 1.25 / (0.25 * 2 + 1) = 0.833 beats annotator 1's 0
    p, r, f, *counts = m2_score(scorer, tmp_path, gold, ["I have a apple ."])
    assert counts == [1, 1, 2] and (p, r) == (1.0, 0.5) and f == pytest.approx(1.25 / 1.5)
    # one system edit over two tokens ("has a" -> "have an") is split into the two gold edits
    assert m2_score(scorer, tmp_path, gold, ["I have an apple ."]) == (1.0, 1.0, 1.0, 2, 2, 2)


def test_m2_scores_of_fairseq_generate_logs(tmp_path):
    table = load_example_module("bea19_gec", "m2_table")
    gold = tmp_path / "gold.m2"
    gold.write_text(README_GOLD)
    header = "S-0\tThe cat sat at mat .\nT-0\tx\n"
    (tmp_path / "greedy.log").write_text(  # ids out of order, as fairseq-generate prints them
        header + "H-2\t-0.3\tGiant otters are apex predator .\nH-0\t-0.1\tA cat sat on the mat .\n"
        "D-0\t-0.1\tA cat sat on the mat .\nH-1\t-0.2\tThe dog .\n")
    (tmp_path / "iad.log").write_text(
        "H-0\t-0.1\tA cat sat on mat .\nH-1\t-0.2\tThe dog .\nH-2\t-0.3\tGiant otters are apex predator .\n")
    text = table.table(gold, [("fairseq-greedy", tmp_path / "greedy.log"), ("iad", tmp_path / "iad.log")])
    assert "| fairseq-greedy | 3 | 80.00 | 80.00 | 80.00 | 4 / 5 / 5 | 3 / 3 |" in text
    assert "| iad | 3 | 75.00 | 60.00 | 71.43 | 3 / 4 / 5 | 2 / 3 |" in text
    (tmp_path / "short.log").write_text("H-0\t-0.1\tA cat .\nH-2\t-0.3\tx\n")
    with pytest.raises(ValueError, match="ids"):
        table.table(gold, [("short", tmp_path / "short.log")])


def test_sgm_segments_and_clean_reason(tmp_path):
    data = load_script("recipe_data")
    path = tmp_path / "a.sgm"
    path.write_text(sgm("newstest2014", "en", "src", {"d": ["a  b", "\n c\n d ", "&quot;e&quot;"]}))
    assert data.sgm_segments(path) == ["a b", "c d", "&quot;e&quot;"]
    assert data.clean_reason("a b", "c d e") is None
    assert data.clean_reason("a", "b c") == "with a length ratio over 1.5"
    assert data.clean_reason(" ", "b") == "with an empty side"
    assert data.clean_reason(LONG, LONG) == "over 250 words"
