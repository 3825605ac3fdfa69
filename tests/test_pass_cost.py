"""The pass-cost probe times verifier passes of growing width on a trained tiny model."""
import re

import pytest

from pardec_fairseq.cli.pass_cost import main


def test_pass_cost_reports_every_width_relative_to_one_token(toy_experiment, capsys):
    main([str(toy_experiment["data"]), "--path", str(toy_experiment["checkpoint"]), "-s", "src", "-t", "tgt",
          "--sentences", "3", "--tokens", "2", "8", "--prefix", "4", "--repeats", "2"])
    output = capsys.readouterr().out
    assert "3 sentences of `test`, 4 tokens cached; encoder:" in output
    rows = re.findall(r"^\| (\d+) \| [\d.]+ \| ([\d.]+)x \| [\d.]+ \| ([\d.]+)x \|$", output, re.M)
    assert [int(n) for n, _, _ in rows] == [1, 2, 8]
    assert rows[0][1:] == ("1.00", "1.00")


def test_pass_cost_refuses_widths_beyond_the_model_positions(toy_experiment):
    with pytest.raises(SystemExit, match="exceed the model's"):
        main([str(toy_experiment["data"]), "--path", str(toy_experiment["checkpoint"]), "-s", "src", "-t", "tgt",
              "--tokens", "2000"])
