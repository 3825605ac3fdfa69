"""The helper scripts: training from a checkpoint's weights, distributed training with two local
processes, sequence-level distillation, the blockwise results table."""
import filecmp
import json
import re
import socket
import subprocess
import sys

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.data import Dictionary, data_utils
from omegaconf import OmegaConf

from conftest import REPO, TINY_TRANSFORMER, USER_DIR, run_fairseq
from pardec_fairseq.checkpoint_safety import allow_fairseq_checkpoints

pytestmark = pytest.mark.slow  # every test here runs a script in a subprocess


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_script(script, *args):
    result = subprocess.run(["bash", str(REPO / "scripts" / script), *map(str, args)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


def test_train_transformer_from_a_checkpoint_counts_only_its_own_minutes(toy_experiment, tmp_path):
    # a start checkpoint that says it trained an hour: fairseq's --stop-time-hours alone would stop at once
    allow_fairseq_checkpoints()
    state = checkpoint_utils.load_checkpoint_to_cpu(str(toy_experiment["checkpoint"]))
    state["extra_state"]["previous_training_time"] = 3600.0
    state["cfg"] = OmegaConf.to_container(state["cfg"])  # as fairseq saves it
    torch.save(state, tmp_path / "hour.pt")
    save = tmp_path / "fine_tuned"
    run_script("train_transformer.sh", toy_experiment["data"], save, "-s", "src", "-t", "tgt", "--preset", "base",
               "--minutes", 1, "--init-from", tmp_path / "hour.pt", "--warmup-updates", 7,
               "--dropout", 0.05, "--", *TINY_TRANSFORMER[2:], "--max-update", 25)
    log = (save / "train.log").read_text()
    assert f"Loaded checkpoint {tmp_path / 'hour.pt'}" in log
    assert "'warmup_updates': 7" in log  # instead of the preset's
    assert "dropout=0.05," in log  # instead of the preset's 0.1
    assert "num_updates 25" in log  # stopped by --max-update, not by the hour it started with
    assert (save / ".trained").exists()


def test_training_reports_its_progress_while_it_runs(tmp_path):
    """A line per interval from the log's latest training line ("starting" before there is one),
    until the training process ends."""
    log = tmp_path / "train.log"
    log.write_text("")
    report = f"source {REPO}/scripts/run_training.sh; sleep 2.5 & report_progress toy {log} $! 1"
    before = subprocess.run(["bash", "-c", report], capture_output=True, text=True, timeout=60).stdout.splitlines()
    assert len(before) >= 2 and all(line.endswith("s, starting") for line in before)
    log.write_text("2026-11-24 03:56:10 | INFO | train_inner | epoch 008:    176 / 182 loss=2.251, nll_loss=0.595, "
                   "ppl=1.51, wps=2512.9, ups=0.67, num_updates=1450, lr=0.000682288, gnorm=0.455\n")
    during = subprocess.run(["bash", "-c", report], capture_output=True, text=True, timeout=60).stdout.splitlines()
    # the seconds are the wall clock's: a loaded machine reports a second later
    assert re.fullmatch(r"toy: 0 min [12] s, 1450 updates, loss 2\.251", during[0]), during[0]
    assert len(during) <= 3  # none after the process ended


def test_demo_refuses_an_unknown_option_before_it_sets_anything_up():
    result = subprocess.run(["bash", str(REPO / "scripts" / "demo.sh"), "--translate"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr == "demo.sh: unknown option --translate (--cuda, --translation)\n"
    assert result.stdout == ""  # neither the environment nor the data were touched


def test_train_distributed_with_two_local_processes(toy_experiment, tmp_path):
    save_dir = tmp_path / "checkpoints"
    output = run_script("train_distributed.sh", "--nproc", 2, "--backend", "gloo",
                        "--master", f"127.0.0.1:{free_port()}", "--log-dir", tmp_path / "logs", "--",
                        toy_experiment["data"], "--user-dir", USER_DIR, "--task", "translation_pardec",
                        *TINY_TRANSFORMER, "--max-update", 4, "--save-dir", save_dir)
    assert "distributed init (rank 0)" in output
    assert "distributed init (rank 1)" in (tmp_path / "logs" / "rank1.log").read_text()
    assert "done training" in output
    assert (save_dir / "checkpoint_last.pt").exists()


def test_distill_replaces_train_targets_and_keeps_the_rest(toy_experiment, tmp_path):
    data, out = toy_experiment["data"], tmp_path / "distilled"
    output = run_script("distill.sh", data, toy_experiment["checkpoint"], out, "-s", "src", "-t", "tgt",
                        "--beam", 2, "--batch-size", 50)
    assert "600 distilled train pairs" in output and "valid pairs" not in output
    for name in ("dict.src.txt", "dict.tgt.txt", "valid.src-tgt.src.bin", "test.src-tgt.tgt.idx"):
        assert filecmp.cmp(data / name, out / name, shallow=False)
    dictionary = Dictionary.load(str(out / "dict.tgt.txt"))
    distilled = data_utils.load_indexed_dataset(str(out / "train.src-tgt.tgt"), dictionary)
    original_sources = data_utils.load_indexed_dataset(str(data / "train.src-tgt.src"), dictionary)
    distilled_sources = data_utils.load_indexed_dataset(str(out / "train.src-tgt.src"), dictionary)
    assert len(distilled) == 600
    assert all(distilled_sources[i].tolist() == original_sources[i].tolist() for i in range(600))


def test_self_distillation_is_fairseqs_greedy_output(toy_experiment, tmp_path):
    """``--beam 1`` decodes with the plugin's greedy search: the targets are fairseq's beam-1 outputs, of
    the valid split too with ``--valid`` (the test split stays as it was)."""
    data, out = toy_experiment["data"], tmp_path / "self_distilled"
    output = run_script("distill.sh", data, toy_experiment["checkpoint"], out, "-s", "src", "-t", "tgt", "--beam", 1,
                        "--valid")
    assert "600 distilled train pairs" in output and "100 distilled valid pairs" in output
    dictionary = Dictionary.load(str(out / "dict.tgt.txt"))
    for split, size in (("train", 600), ("valid", 100)):
        fairseq_greedy = run_fairseq("generate", data, "--user-dir", USER_DIR, "--path", toy_experiment["checkpoint"],
                                     "--gen-subset", split, "--beam", 1, "--batch-size", 64, "--max-len-a", 1.2,
                                     "--max-len-b", 10)
        expected = {int(i): text for i, text in re.findall(r"^H-(\d+)\t\S+\t(.*)$", fairseq_greedy, flags=re.M)}
        distilled = data_utils.load_indexed_dataset(str(out / f"{split}.src-tgt.tgt"), dictionary)
        # fairseq 0.12's own task drops a last batch of fewer than 8 sentences; the plugin's keeps every one
        assert len(distilled) == size and len(expected) == size - size % 8
        assert all(dictionary.string(distilled[i]) == text for i, text in expected.items())
    assert filecmp.cmp(data / "test.src-tgt.tgt.bin", out / "test.src-tgt.tgt.bin", shallow=False)


def test_check_lossless_compares_every_sentence_through_fairseq_generate(toy_experiment, toy_drafter):
    # --drafter-path is an option of the plugin's task, which fairseq's --task translation would refuse
    output = run_script("check_lossless.sh", toy_experiment["data"], toy_experiment["checkpoint"],
                        "-s", "src", "-t", "tgt", "--gen-algo", "hybrid-jacobi", "--gen-algo", "gad",
                        "--plugin-args", f"--drafter-path {toy_drafter['checkpoint']}", "--batch-sizes", "1 50")
    assert output.splitlines() == [f"{algo} batch {b}: 100 of 100 hypotheses identical to fairseq --beam 1"
                                   for b in (1, 50) for algo in ("hybrid-jacobi", "gad")]


def test_check_lossless_reports_an_algorithm_that_differs_and_fails(toy_experiment):
    # "fairseq" without --beam 1 is fairseq's beam search (beam 5): a search that may differ from greedy
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "check_lossless.sh"), str(toy_experiment["data"]),
         str(toy_experiment["checkpoint"]), "-s", "src", "-t", "tgt", "--gen-algo", "fairseq",
         "--gen-algo", "greedy", "--batch-sizes", "50"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 1
    assert result.stdout.splitlines() == ["greedy batch 50: 100 of 100 hypotheses identical to fairseq --beam 1"]
    assert "fairseq batch 50: differs from fairseq --beam 1:" in result.stderr


def test_blockwise_table_collects_every_model_of_the_recipe(tmp_path):
    def bench(folder, greedy_bleu, rules, hardware="cpu"):
        folder.mkdir()
        results = [{"algorithm": "fairseq-greedy", "bleu": greedy_bleu}]
        results += [{"algorithm": name, "bleu": bleu, "mean_accepted": block, "speedup_vs_greedy": speedup}
                    for name, (bleu, block, speedup) in rules.items()]
        meta = {"sentences": 300, "subset": "test", "batch_size": 1, "hardware": hardware, "date": "2026-11-22"}
        (folder / "bench_b1.json").write_text(json.dumps({"meta": meta, "results": results}))

    bench(tmp_path / "distilled_frozen_k4", 20.0, {"bpd": (20.0, 2.5, 1.8),
                                                   "bpd:acceptance=top-k,acceptance-top-k=2": (19.5, 3.1, 2.2)})
    bench(tmp_path / "distilled_frozen_k10", 20.0, {"bpd": (20.0, 2.9, 1.9)})
    bench(tmp_path / "distilled_fine-tuned_lr2e-4_k4", 19.0, {"bpd": (19.0, 3.0, 2.1)})
    (tmp_path / "notes").mkdir()  # not a model folder
    table = subprocess.run([sys.executable, str(REPO / "scripts" / "blockwise_table.py"), str(tmp_path)],
                           capture_output=True, text=True, check=True).stdout
    rows = [line for line in table.splitlines() if line.startswith("| distilled")]
    assert rows == ["| distilled | fine-tuned, lr 2e-4 | 4 | 19.00 | 19.00 | 3.00 | 2.10x | – | – | – | – | – | – |",
                    "| distilled | frozen | 4 | 20.00 | 20.00 | 2.50 | 1.80x | 19.50 | 3.10 | 2.20x | – | – | – |",
                    "| distilled | frozen | 10 | 20.00 | 20.00 | 2.90 | 1.90x | – | – | – | – | – | – |"]
    assert "300 sentences of `test`, batch size 1, cpu, 2026-11-22." in table
    # a model measured elsewhere: every row says where
    bench(tmp_path / "raw_frozen_k2", 18.0, {"bpd": (18.0, 1.2, 0.8)}, hardware="cpu, 1 thread")
    table = subprocess.run([sys.executable, str(REPO / "scripts" / "blockwise_table.py"), str(tmp_path)],
                           capture_output=True, text=True, check=True).stdout
    assert "300 sentences of `test`, batch size 1. BLEU" in table
    assert "| raw | frozen | 2 | 18.00 | 18.00 | 1.20 | 0.80x | – | – | – | – | – | – | cpu, 1 thread, 2026-11-22 |" in table
    assert "| distilled | frozen | 4 | 20.00 | 20.00 | 2.50 | 1.80x | 19.50 | 3.10 | 2.20x | – | – | – | cpu, 2026-11-22 |" in table
    empty = subprocess.run([sys.executable, str(REPO / "scripts" / "blockwise_table.py"), str(tmp_path / "notes")],
                           capture_output=True, text=True)
    assert empty.returncode != 0 and "no <targets>_<mode>_k<k>/bench_b1.json" in empty.stderr


def test_the_translation_recipes_share_their_draft_head_options():
    """scripts/draft_head_options.sh: the recipe's defaults first, the options given after them (so later
    ones win), every other option left to the recipe, a missing value refused, and what it collected handed
    to scripts/draft_head_recipe.sh (whose own check of --head-distill-beam answers here)."""
    snippet = """
    set -euo pipefail
    source scripts/draft_head_options.sh --head-algorithms gad
    preset=cpu nproc=1 bench=0 bench_options=()
    for words in "--head-minutes 10" "--draft-head" "--head-compare" "--gad" "--head-distill-beam 0"; do
      read -ra args <<< "$words"; take_draft_head_option "${args[@]}"; echo "$words: $head_words"
    done
    echo "draft_head=$draft_head options=${head_options[*]}"
    run_draft_head_recipe data save en de
    """
    result = subprocess.run(["bash", "-c", snippet], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.stdout.splitlines() == [
        "--head-minutes 10: 2", "--draft-head: 1", "--head-compare: 1", "--gad: 0", "--head-distill-beam 0: 2",
        "draft_head=1 options=--head-algorithms gad --head-minutes 10 --head-compare --head-distill-beam 0"]
    assert result.returncode == 2 and "--head-distill-beam takes a beam size" in result.stderr
    for recipe in ("examples/libreoffice_en_de/run.sh", "scripts/translation_recipe.sh"):
        assert "take_draft_head_option" in (REPO / recipe).read_text()
    missing = subprocess.run(["bash", "-c", "source scripts/draft_head_options.sh; take_draft_head_option --head-layers"],
                             cwd=REPO, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "--head-layers needs a value" in missing.stderr
