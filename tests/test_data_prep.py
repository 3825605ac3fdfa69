"""The LibreOffice help aligner and the refusal of empty lines before binarization."""
import subprocess

from conftest import REPO, load_example_module


def load_extractor():
    return load_example_module("libreoffice_en_de")


EN_PAGE = """<html><body>
<h1 id="hd_id1">Find Bar</h1>
<p id="par_id2" class="paragraph">Use <span class="switchinline"><span hidden="true" class="MAC">
<span class="keycode">Command</span></span><span hidden="true"><span class="keycode">Ctrl</span></span></span>
+ F to open it.</p>
<p id="par_id3">Same id twice, first.</p><p id="par_id3">Same id twice, second.</p>
<p id="par_id9">Only in English.</p>
<p id="other">Not a help paragraph.</p>
</body></html>"""
DE_PAGE = """<html><body>
<h1 id="hd_id1">Suchleiste</h1>
<p id="par_id2">Verwenden Sie <span class="MAC">Befehl</span><span>Strg</span>+F zum Öffnen.</p>
<p id="par_id3">Gleiche ID, erstens.</p><p id="par_id3">Gleiche ID, zweitens.</p>
<p id="par_id4"><img src="icon.svg" alt="Symbol"></p>
</body></html>"""


def test_pages_align_on_id_and_occurrence_without_mac_variants(tmp_path):
    extractor = load_extractor()
    (tmp_path / "en.html").write_text(EN_PAGE)
    (tmp_path / "de.html").write_text(DE_PAGE)
    pairs = list(extractor.page_pairs(tmp_path / "en.html", tmp_path / "de.html"))
    assert pairs == [
        ("Find Bar", "Suchleiste"),
        ("Use Ctrl + F to open it.", "Verwenden Sie Strg+F zum Öffnen."),
        ("Same id twice, first.", "Gleiche ID, erstens."),
        ("Same id twice, second.", "Gleiche ID, zweitens."),
    ]


def test_whole_pages_are_held_out_and_test_sources_never_reach_train():
    extractor = load_extractor()
    pages = {f"page{n}": [(f"en {n} {i}", f"de {n} {i}") for i in range(3)] for n in range(10)}
    pages["page9"].append(("en 0 0", "a different German"))  # a test source repeated in another page
    splits = extractor.deduplicate(extractor.split_pages(pages, test_pairs=4, valid_pairs=3, seed=1))
    page_of = {pair: page for page, pairs in pages.items() for pair in pairs}
    for name in ("test", "valid"):
        held_out_pages = {page_of[pair] for pair in splits[name]}
        assert not held_out_pages & {page_of[pair] for pair in splits["train"]}
    test_sources = {en for en, _ in splits["test"]}
    assert not test_sources & {en for en, _ in splits["train"]}
    assert len(splits["test"]) >= 4 and len(splits["valid"]) >= 3


def test_binarize_refuses_empty_lines(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            (raw / f"{split}.{lang}").write_text("a line\n\nanother line\n" if (split, lang) == ("valid", "de")
                                                  else "a line\nanother\nthird\n")
    result = subprocess.run(["bash", str(REPO / "scripts" / "binarize.sh"), str(raw), str(tmp_path / "out"),
                             "en", "de", "10"], capture_output=True, text=True)
    assert result.returncode != 0
    assert "valid.de has an empty line (line 2)" in result.stderr
