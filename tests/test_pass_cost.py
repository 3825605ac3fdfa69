"""The pass-cost probe times verifier passes of growing width on a trained tiny model."""
import re
from argparse import Namespace

import pytest
import torch

from pardec_fairseq.cli.loading import load_task_and_models
from pardec_fairseq.cli.pass_cost import kernel_decoder, main, pass_floor
from pardec_fairseq.decoding.options import DecodingOptions
from pardec_fairseq.decoding.registry import build_verifier


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


def test_a_pass_floor_is_its_bytes_at_the_bandwidth_or_its_multiply_adds_at_the_peak():
    assert pass_floor(weight_bytes=1000, multiply_adds=10, tokens=1, bandwidth=100.0, peak=50.0) == 10.0
    assert pass_floor(weight_bytes=1000, multiply_adds=10, tokens=600, bandwidth=100.0, peak=50.0) == 120.0


def test_pass_cost_limits_report_the_machine_and_each_width_floor(toy_experiment, capsys):
    main([str(toy_experiment["data"]), "--path", str(toy_experiment["checkpoint"]), "-s", "src", "-t", "tgt",
          "--sentences", "2", "--tokens", "2", "8", "--prefix", "4", "--repeats", "2", "--verifiers", "fast",
          "--limits"])
    output = capsys.readouterr().out
    limits = re.search(r"peak ([\d.]+) G multiply-adds/s .*: ([\d.]+) MB of weights, ([\d.]+) M multiply-adds a token; "
                       r"one row through them ([\d.]+) ms in cache \(([\d.]+) GB/s\), ([\d.]+) ms from memory", output)
    assert limits, output
    peak, megabytes, multiply_adds, cache_ms, bandwidth, memory_ms = (float(value) for value in limits.groups())
    assert peak > 0 and megabytes > 0 and multiply_adds > 0 and memory_ms > 0
    assert bandwidth == pytest.approx(megabytes * 2 ** 20 / (cache_ms / 1000) / 1e9, rel=0.02)
    rows = re.findall(r"^\| (\d+) \| ([\d.]+) \| ([\d.]+)x \| ([\d.]+) \| ([\d.]+)x \| ([\d.]+) \| ([\d.]+)x \|$",
                      output, re.M)
    assert [int(row[0]) for row in rows] == [1, 2, 8]
    # one token: its products' cost in cache is the floor in cache, by the bandwidth's definition
    assert rows[0][2:] == ("1.00", rows[0][1], "1.00", rows[0][5], "1.00")
    assert float(rows[0][1]) == pytest.approx(cache_ms, abs=0.0015, rel=0.01)
    assert float(rows[0][5]) == pytest.approx(memory_ms, abs=0.0015, rel=0.01)
    for tokens, _, _, floor, _, _, _ in rows:  # the floor in cache: the weights' bytes or the multiply-adds
        expected = max(cache_ms, int(tokens) * multiply_adds * 1e6 / (peak * 1e9) * 1000)
        assert float(floor) == pytest.approx(expected, abs=0.0015, rel=0.02)
    assert [float(row[3]) for row in rows] == sorted(float(row[3]) for row in rows)


@pytest.mark.parametrize("option, compiled, timed", [("--limits", False, "products"),
                                                     ("--verifiers arithmetic", True, "compiled calls")])
@pytest.mark.parametrize("off_the_kernel", ["float64", "fairseq path"])
def test_pass_cost_refuses_a_decoder_off_the_vector_kernel(toy_experiment, off_the_kernel, option, compiled, timed):
    args = Namespace(data=str(toy_experiment["data"]), path=str(toy_experiment["checkpoint"]), source_lang="src",
                     target_lang="tgt")
    task, models = load_task_and_models(args, torch.device("cpu"))
    if off_the_kernel == "float64":
        models = [model.double() for model in models]
    else:  # an option the fast path does not reproduce: --verifier fast falls back to the fairseq path
        models[0].decoder.layers[0].self_attn.add_zero_attn = True
    options = DecodingOptions.from_generation_args(Namespace(), "pass-cost")
    verifier = build_verifier("fast", models, task.target_dictionary, options)
    with pytest.raises(SystemExit, match=f"{option} times the fast path's {timed}"):
        kernel_decoder(verifier, option, compiled)
