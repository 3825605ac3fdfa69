"""The benchmark runs fairseq's baselines and the plugin's algorithms on the same data in one run."""
import argparse
import json
import time

import pytest
import torch

from pardec_fairseq.cli import ctranslate2_baseline
from pardec_fairseq.cli.bench import main, parse_args
from pardec_fairseq.cli.bench_metrics import edit_ratio
from pardec_fairseq.cli.bench_runs import algorithm_variant, build_runs
from pardec_fairseq.cli.bench_timing import ORDERS, timing_order
from pardec_fairseq.cli.loading import load_task_and_models
from pardec_fairseq.cli.module_profile import ModuleProfile
from pardec_fairseq.decoding import build_generator
from pardec_fairseq.decoding.acceptance import ExactAcceptance
from pardec_fairseq.decoding.drafters import NoDraft
from pardec_fairseq.decoding.observers import PARTS
from test_lossless_matches_fairseq import GENERATION_DEFAULTS
from tiny import build_transformer, make_batch, make_dictionary


def test_bench_reports_every_generator(toy_experiment, tmp_path, capsys):
    root = toy_experiment["root"]
    main([str(toy_experiment["data"]), "--path", str(toy_experiment["checkpoint"]), "-s", "src", "-t", "tgt",
          "--algorithms", "greedy", "retrieval", "lookahead", "--max-sentences", "30", "--batch-size", "4",
          "--repetitions", "2", "--references", str(root / "test.tgt"), "--sources", str(root / "test.src"),
          "--gec", "--detok", "space", "--order", "batches", "--out-dir", str(tmp_path), "--name", "toy"])
    report = json.loads((tmp_path / "toy.json").read_text())
    rows = {row["algorithm"]: row for row in report["results"]}
    assert set(rows) == {"fairseq-greedy", "fairseq-beam5", "greedy", "retrieval", "lookahead"}
    assert rows["retrieval"]["identical_to_greedy"] == rows["lookahead"]["identical_to_greedy"] == 1.0
    assert rows["greedy"]["drafting_share"] == 0.0 and rows["lookahead"]["drafting_share"] == 1.0
    assert 0.5 < rows["retrieval"]["drafting_share"] <= 1.0 and rows["fairseq-beam5"]["drafting_share"] is None
    assert report["meta"]["sentences"] == 30 and report["meta"]["order"] == "batches"
    assert rows["greedy"]["identical_to_greedy"] == 1.0 and rows["fairseq-greedy"]["identical_to_greedy"] == 1.0
    assert rows["greedy"]["bleu"] == rows["fairseq-greedy"]["bleu"]
    assert rows["greedy"]["iterations"] == rows["greedy"]["tokens"] == rows["fairseq-greedy"]["iterations"]
    assert rows["fairseq-beam5"]["iterations"] is None
    assert all(row["speedup_vs_greedy"] > 0 and "gleu" in row for row in rows.values())
    assert len(rows["greedy"]["per_batch_speedup_vs_greedy"]) == 8  # ceil(30 / 4) batches
    # the issues' targets are against the plugin's greedy search: the ratio over all repetitions and each one's
    assert rows["greedy"]["speedup_vs_plugin_greedy"] == 1.0
    assert rows["greedy"]["speedup_vs_plugin_greedy_by_repetition"] == [1.0, 1.0]
    for name, row in rows.items():
        assert row["speedup_vs_plugin_greedy"] == pytest.approx(rows["greedy"]["seconds"] / row["seconds"])
        low, high = sorted(row["speedup_vs_plugin_greedy_by_repetition"])
        assert low <= row["speedup_vs_plugin_greedy"] <= high  # the whole run's ratio lies between its repetitions'
    assert (tmp_path / "toy.png").stat().st_size > 0
    table = (tmp_path / "toy.md").read_text()
    assert "| greedy |" in table and "BLEU signature" in capsys.readouterr().out and "batch by batch" in table
    assert "speedup vs fairseq-beam5 | vs plugin greedy |" in table and "| 1.00x (1.00-1.00) |" in table
    ratios = rows["retrieval"]["speedup_vs_plugin_greedy_by_repetition"]
    assert f"x ({min(ratios):.2f}-{max(ratios):.2f}) |" in table.split("| retrieval |")[1].split("\n")[0]


def test_the_bench_times_by_chunks_of_batches_by_runs_or_batch_by_batch():
    # by runs: one generator's batches in a row, as fairseq-generate decodes; the first generator changes
    # with each repetition
    assert timing_order(3, 2, 1, "runs") == [(1, 0), (1, 1), (2, 0), (2, 1), (0, 0), (0, 1)]
    # batch by batch: every generator decodes a batch before the next batch; the first changes each batch
    assert timing_order(3, 2, 0, "batches") == [(0, 0), (1, 0), (2, 0), (1, 1), (2, 1), (0, 1)]
    # by chunks (the default): each generator over a chunk's batches, every generator in turn; the first
    # changes each chunk and each repetition; the last chunk takes what is left
    assert timing_order(2, 5, 0, "chunks", 2) == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (1, 3), (0, 2), (0, 3),
                                                  (0, 4), (1, 4)]
    assert timing_order(2, 3, 1, "chunks", 2) == [(1, 0), (1, 1), (0, 0), (0, 1), (0, 2), (1, 2)]
    assert timing_order(3, 2, 0, "chunks", 1) == timing_order(3, 2, 0, "batches")
    for order in ORDERS:
        for runs, batches, repetition, chunk in [(1, 1, 0, 1), (4, 3, 2, 2), (2, 5, 7, 3), (3, 4, 1, 9)]:
            pairs = timing_order(runs, batches, repetition, order, chunk)
            assert sorted(pairs) == [(run, b) for run in range(runs) for b in range(batches)]


def test_bench_runs_every_generator_at_each_thread_count_beside_ctranslate2(toy_experiment, tmp_path):
    root = toy_experiment["root"]
    main([str(toy_experiment["data"]), "--path", str(toy_experiment["checkpoint"]), "-s", "src", "-t", "tgt",
          "--algorithms", "greedy", "greedy:verifier=fairseq", "--max-sentences", "12", "--batch-size", "4",
          "--repetitions", "1", "--threads", "2", "1", "--ctranslate2", "--references", str(root / "test.tgt"),
          "--detok", "space", "--out-dir", str(tmp_path), "--name", "t"])
    report = json.loads((tmp_path / "t.json").read_text())
    rows = {row["algorithm"]: row for row in report["results"]}
    generators = ["fairseq-greedy", "fairseq-beam5", "greedy", "greedy:verifier=fairseq", "ct2-float32", "ct2-int8"]
    assert set(rows) == {f"{name} @{threads}t" for name in generators for threads in (2, 1)}
    assert report["meta"]["ctranslate2_note"] is None
    # CTranslate2's float32 greedy search is fairseq's, token for token, under the same length rules
    assert rows["ct2-float32 @1t"]["identical_to_greedy"] == rows["ct2-float32 @2t"]["identical_to_greedy"] == 1.0
    assert rows["greedy @1t"]["identical_to_greedy"] == rows["greedy:verifier=fairseq @2t"]["identical_to_greedy"] == 1
    for row in rows.values():
        assert row["ms_per_token"] == pytest.approx(1000 * row["seconds"] / row["tokens"])
    # the baselines at their fastest thread count
    fastest_greedy = min(rows["fairseq-greedy @1t"]["seconds"], rows["fairseq-greedy @2t"]["seconds"])
    assert max(rows["fairseq-greedy @1t"]["speedup_vs_greedy"], rows["fairseq-greedy @2t"]["speedup_vs_greedy"]) == 1.0
    assert rows["greedy @1t"]["speedup_vs_greedy"] == pytest.approx(fastest_greedy / rows["greedy @1t"]["seconds"])
    # the plugin's greedy search at its fastest thread count; another greedy variant is not it
    fastest_plugin_greedy = min(rows["greedy @1t"]["seconds"], rows["greedy @2t"]["seconds"])
    assert rows["ct2-int8 @1t"]["speedup_vs_plugin_greedy"] == \
        pytest.approx(fastest_plugin_greedy / rows["ct2-int8 @1t"]["seconds"])
    assert max(rows["greedy @1t"]["speedup_vs_plugin_greedy"], rows["greedy @2t"]["speedup_vs_plugin_greedy"]) == 1.0
    assert rows["greedy:verifier=fairseq @1t"]["speedup_vs_plugin_greedy_by_repetition"] == \
        [pytest.approx(rows["greedy:verifier=fairseq @1t"]["speedup_vs_plugin_greedy"])]  # one repetition
    assert "@Nt`: the row ran with N CPU threads" in (tmp_path / "t.md").read_text()


def test_a_checkpoint_ctranslate2_cannot_convert_gets_a_one_line_note(toy_experiment, tmp_path):
    broken = tmp_path / "not_a_checkpoint.pt"
    broken.write_bytes(b"")
    note = ctranslate2_baseline.convert(broken, toy_experiment["data"], "src", "tgt", tmp_path / "ct2")
    assert note.startswith("CTranslate2 ") and "could not convert" in note and "\n" not in note


def test_bench_reports_speedup_by_edit_ratio_at_batch_size_one(toy_experiment, tmp_path):
    root = toy_experiment["root"]
    main([str(toy_experiment["data"]), "--path", str(toy_experiment["checkpoint"]), "-s", "src", "-t", "tgt",
          "--algorithms", "iad", "gs-jacobi", "--max-sentences", "12", "--repetitions", "1", "--edit-ratio",
          "--references", str(root / "test.tgt"), "--detok", "space", "--out-dir", str(tmp_path), "--name", "er"])
    report = json.loads((tmp_path / "er.json").read_text())
    rows = {row["algorithm"]: row for row in report["results"]}
    assert rows["iad"]["identical_to_greedy"] == rows["gs-jacobi"]["identical_to_greedy"] == 1.0
    bins = report["speedup_by_edit_ratio"]
    assert sum(entry["sentences"] for entry in bins) == 12
    assert all(entry["iad"] > 0 and entry["gs-jacobi"] > 0 for entry in bins)
    assert "| edit ratio | sentences | fairseq-beam5 | iad | gs-jacobi |" in (tmp_path / "er.md").read_text()
    # without the plugin's greedy search among the rows there is nothing to compare with
    assert "vs plugin greedy" not in (tmp_path / "er.md").read_text()
    assert not any("speedup_vs_plugin_greedy" in row for row in rows.values())
    assert (tmp_path / "er_edit_ratio.png").stat().st_size > 0


def test_edit_ratio_is_token_levenshtein_over_the_source_length():
    assert edit_ratio([1, 2, 3, 4], [1, 2, 3, 4]) == 0.0
    assert edit_ratio([1, 2, 3, 4], [1, 9, 3]) == 0.5  # one substitution, one deletion
    assert edit_ratio([5], [5, 6, 7]) == 2.0


def test_bench_runs_one_algorithm_with_several_option_sets(toy_experiment, tmp_path):
    root = toy_experiment["root"]
    variants = ["iad", "iad:iad-pass-tokens=8", "gs-jacobi:jacobi-block-size=2",
                "iad:acceptance=top-k,acceptance-top-k=3"]
    main([str(toy_experiment["data"]), "--path", str(toy_experiment["checkpoint"]), "-s", "src", "-t", "tgt",
          "--algorithms", *variants, "--max-sentences", "12", "--batch-size", "4", "--repetitions", "1",
          "--references", str(root / "test.tgt"), "--detok", "space", "--order", "chunks", "--chunk-batches", "2",
          "--out-dir", str(tmp_path), "--name", "v"])
    report = json.loads((tmp_path / "v.json").read_text())
    assert report["meta"]["order"] == "chunks" and report["meta"]["chunk_batches"] == 2
    assert "in chunks of 2 batches, each generator over a chunk in turn" in (tmp_path / "v.md").read_text()
    rows = {row["algorithm"]: row for row in report["results"]}
    assert all(rows[v]["identical_to_greedy"] == 1.0 for v in variants[:3])
    assert rows["iad:acceptance=top-k,acceptance-top-k=3"]["tokens"] > 0
    args = parse_args([str(toy_experiment["data"]), "--path", str(toy_experiment["checkpoint"]), "-s", "src",
                       "-t", "tgt", "--algorithms", *variants, "--references", str(root / "test.tgt")])
    with pytest.raises(SystemExit):  # parser.error: "--chunk-batches: give 1 or more batches per chunk"
        parse_args([str(toy_experiment["data"]), "--path", str(toy_experiment["checkpoint"]), "-s", "src", "-t", "tgt",
                    "--references", str(root / "test.tgt"), "--order", "chunks", "--chunk-batches", "0"])
    task, models = load_task_and_models(args, torch.device("cpu"))
    decoders = {run.name: run.generator.decoder for run in build_runs(task, models, args) if run.plugin}
    assert decoders["iad"].drafter.pass_tokens == 128 and decoders["iad:iad-pass-tokens=8"].drafter.pass_tokens == 8
    assert decoders["gs-jacobi:jacobi-block-size=2"].drafter.block_size == 2
    assert decoders["iad:acceptance=top-k,acceptance-top-k=3"].acceptance.passes is not None


def test_bench_gives_gad_its_drafter_and_each_variant_its_acceptance(toy_experiment, toy_drafter, tmp_path):
    root = toy_experiment["root"]
    variants = ["greedy", "gad", "gad++", "gad++:gad-top-beta=5,gad-tau=3.0"]
    main([str(toy_experiment["data"]), "--path", str(toy_experiment["checkpoint"]), "-s", "src", "-t", "tgt",
          "--drafter-path", str(toy_drafter["checkpoint"]), "--algorithms", *variants, "--max-sentences", "12",
          "--batch-size", "4", "--repetitions", "1", "--references", str(root / "test.tgt"), "--detok", "space",
          "--out-dir", str(tmp_path), "--name", "gad", "--profile"])
    report = json.loads((tmp_path / "gad.json").read_text())
    rows = {row["algorithm"]: row for row in report["results"]}
    assert rows["gad"]["identical_to_greedy"] == 1.0
    # one pass per token: the profiling pass is not counted in the statistics of the timed one
    assert rows["greedy"]["iterations"] == rows["greedy"]["tokens"]
    profile = report["profile_seconds"]["gad"]
    assert set(profile) == set(PARTS) and all(profile[part] > 0 for part in PARTS)
    assert "| gad++ | " in (tmp_path / "gad.md").read_text().split("Where the time goes")[1]
    assert all(rows[v]["tokens"] > 0 for v in variants)
    args = parse_args([str(toy_experiment["data"]), "--path", str(toy_experiment["checkpoint"]), "-s", "src",
                       "-t", "tgt", "--drafter-path", str(toy_drafter["checkpoint"]), "--algorithms", *variants,
                       "--references", str(root / "test.tgt")])
    task, models = load_task_and_models(args, torch.device("cpu"))
    decoders = {run.name: run.generator.decoder for run in build_runs(task, models, args) if run.plugin}
    assert decoders["gad"].drafter.context_window == 2
    assert decoders["gad"].acceptance.__class__.__name__ == "ExactAcceptance"
    lprobs = torch.full((1, 1, 8), -9.0)
    lprobs[0, 0, 4], lprobs[0, 0, 5] = -1.0, -3.0  # token 5: second, 2.0 below the top
    assert not decoders["gad++"].acceptance.passes(torch.tensor([[5]]), lprobs).item()
    assert decoders["gad++:gad-top-beta=5,gad-tau=3.0"].acceptance.passes(torch.tensor([[5]]), lprobs).item()


def test_the_profile_times_each_part_of_the_loop_as_an_observer():
    """A drafter and an acceptance rule that take known time: each counts as its own part, the layers
    and the projection the acceptance runs on demand count as theirs, the parts add up to the decoding
    time, and the loop decodes as it does unwatched."""
    pause = 0.01

    class SlowDrafter(NoDraft):
        def propose(self, state):
            time.sleep(pause)
            return super().propose(state)

    class SlowAcceptance(ExactAcceptance):
        def accept(self, proposal, scores, cumulative_before):
            time.sleep(pause)
            return super().accept(proposal, scores, cumulative_before)

    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, seed=2, layers=2).eval()
    batch = make_batch(dictionary, [[4, 5, 6, 7, 8], [9, 10]])
    generation = argparse.Namespace(**dict(GENERATION_DEFAULTS, max_len_b=10))
    generator = build_generator("greedy", [model], dictionary, generation, None, drafter=SlowDrafter(),
                                acceptance=SlowAcceptance())
    unwatched = generator.generate([model], batch)
    profile = ModuleProfile()
    with profile.installed(generator):
        start = time.perf_counter()
        watched = generator.generate([model], batch)
        wall = time.perf_counter() - start
    assert generator.decoder.observers == [generator.counter]  # the profile left; the statistics stay
    assert [h[0]["tokens"].tolist() for h in watched] == [h[0]["tokens"].tolist() for h in unwatched]
    passes = max(len(h[0]["tokens"]) for h in watched)  # greedy: one pass per token of the longest output
    seconds = profile.seconds
    assert set(seconds) == set(PARTS) and all(seconds[part] > 0 for part in PARTS)
    for part in ("drafter", "acceptance"):
        assert passes * pause <= seconds[part] < passes * (pause + 0.005) + 0.05, part
    assert 0.8 * wall < sum(seconds.values()) <= wall


def test_algorithm_variants_name_their_options_or_fail_clearly():
    assert algorithm_variant("iad") == ("iad", {})
    assert algorithm_variant("hybrid-jacobi:jacobi-parallel-length=none,--jacobi-block-size=3") == (
        "hybrid-jacobi", {"jacobi_parallel_length": None, "jacobi_block_size": 3})
    assert algorithm_variant("iad:acceptance=top-beta,acceptance-tau=2.5") == (
        "iad", {"acceptance": "top-beta", "acceptance_tau": 2.5})
    with pytest.raises(argparse.ArgumentTypeError, match="unknown algorithm 'nope'"):
        algorithm_variant("nope")
    with pytest.raises(argparse.ArgumentTypeError, match="'block-size' is not option=value.*iad-pass-tokens"):
        algorithm_variant("iad:block-size=3")
    with pytest.raises(argparse.ArgumentTypeError, match="iad-pass-tokens takes a value, not none"):
        algorithm_variant("iad:iad-pass-tokens=none")
