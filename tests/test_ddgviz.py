"""DDGviz draws the Jacobi iterates of chosen sentences of a trained tiny model."""
import re

import pytest

from pardec_fairseq.cli.ddgviz import main


@pytest.mark.parametrize("algorithm", ["jacobi", "hybrid-jacobi"])
def test_ddgviz_writes_a_heatmap_and_a_dependency_graph(toy_experiment, tmp_path, capsys, algorithm):
    main([str(toy_experiment["data"]), "--path", str(toy_experiment["checkpoint"]), "-s", "src", "-t", "tgt",
          "--ids", "0", "5", "--gen-algo", algorithm, "--jacobi-block-size", "3", "--out-dir", str(tmp_path)])
    printed = capsys.readouterr().out
    for sentence_id in (0, 5):
        assert (tmp_path / f"ddg_{sentence_id}.png").read_bytes()[:4] == b"\x89PNG"
        page = (tmp_path / f"ddg_{sentence_id}.html").read_text()
        iterations, tokens = map(int, re.search(rf"sentence {sentence_id}: (\d+) iterations for (\d+) tokens",
                                                printed).groups())
        assert 1 <= iterations <= tokens
        assert f"{iterations} verifier passes for {tokens} output tokens" in page
        assert len(re.findall(r"<tr><th>\d+</th>", page)) == iterations  # one row of iterates per pass
        assert page.count('class="final"') == tokens  # every output token becomes final exactly once
        assert "<svg" in page and page.count("<line") == tokens - 1


def test_ddgviz_names_a_sentence_id_out_of_range(toy_experiment, tmp_path):
    with pytest.raises(SystemExit, match="--ids 100: the test split has ids 0..99"):
        main([str(toy_experiment["data"]), "--path", str(toy_experiment["checkpoint"]), "-s", "src", "-t", "tgt",
              "--ids", "100", "--out-dir", str(tmp_path)])


def test_ddgviz_shows_where_each_lookahead_token_came_from(toy_experiment, tmp_path, capsys):
    main([str(toy_experiment["data"]), "--path", str(toy_experiment["checkpoint"]), "-s", "src", "-t", "tgt",
          "--ids", "0", "5", "--gen-algo", "lookahead", "--lookahead-window", "3", "--out-dir", str(tmp_path)])
    printed = capsys.readouterr().out
    for sentence_id in (0, 5):
        assert (tmp_path / f"ddg_{sentence_id}.png").read_bytes()[:4] == b"\x89PNG"
        page = (tmp_path / f"ddg_{sentence_id}.html").read_text()
        passes, tokens = map(int, re.search(rf"sentence {sentence_id}: (\d+) iterations for (\d+) tokens",
                                            printed).groups())
        window, pool, own = map(int, re.search(
            rf"{passes} verifier passes for {tokens} output tokens: (\d+) accepted from the lookahead\s+window "
            r"\(its trunk and columns\), (\d+) from pool n-grams, (\d+) the verifier's own", page).groups())
        # every pass ends on the verifier's own token, except a last one that ends on a drafted EOS
        assert window + pool + own == tokens and own in (passes, passes - 1)
        assert len(re.findall(r"<tr><th>\d+</th>", page)) == passes  # one row per pass
        assert "<svg" in page and page.count("<line") == tokens - 1
