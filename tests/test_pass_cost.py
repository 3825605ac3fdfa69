"""The pass-cost probe times verifier passes of growing width on a trained tiny model."""
import re

import pytest

from pardec_fairseq.cli.pass_cost import main


PATH_COLUMNS = r" [\d.]+ \| ([\d.]+)x \| [\d.]+ \| ([\d.]+)x \|"


@pytest.mark.parametrize("verifiers", [[], ["fairseq"], ["fast", "arithmetic"]])
def test_pass_cost_reports_every_width_of_each_path_relative_to_one_token(toy_experiment, capsys, verifiers):
    main([str(toy_experiment["data"]), "--path", str(toy_experiment["checkpoint"]), "-s", "src", "-t", "tgt",
          "--sentences", "3", "--tokens", "2", "8", "--prefix", "4", "--repeats", "2",
          *(["--verifiers", *verifiers] if verifiers else [])])
    output = capsys.readouterr().out
    paths = verifiers or ["fast", "fairseq"]  # the default: the fast path beside the fairseq path
    assert "3 sentences of `test`, 4 tokens cached; encoder ms per sentence: " in output
    header = next(line for line in output.splitlines() if line.startswith("| new tokens"))
    assert re.findall(r"\| (\w+): layers ms", header) == paths
    rows = re.findall(r"^\| (\d+) \|" + PATH_COLUMNS * len(paths) + "$", output, re.M)
    assert [int(row[0]) for row in rows] == [1, 2, 8]
    assert rows[0][1:] == ("1.00",) * 2 * len(paths)


def test_pass_cost_refuses_widths_beyond_the_model_positions(toy_experiment):
    with pytest.raises(SystemExit, match="exceed the model's"):
        main([str(toy_experiment["data"]), "--path", str(toy_experiment["checkpoint"]), "-s", "src", "-t", "tgt",
              "--tokens", "2000"])
