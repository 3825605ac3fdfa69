"""fairseq's own command-line tools with --user-dir pardec_fairseq on a stock transformer checkpoint."""
import json
import re
import shutil
import subprocess
import sys

import pytest
from pardec_fairseq.tasks.translation_pardec import TranslationPardecConfig, TranslationPardecTask

from conftest import TINY_TRANSFORMER, USER_DIR, run_fairseq


def hypotheses(generate_output):
    """{sentence id: hypothesis} from fairseq-generate's H- lines."""
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^H-(\d+)\t\S+\t(.*)$", generate_output, re.M)}


def generate(experiment, *args):
    # --user-dir also for fairseq's own task: only the plugin's allow-list lets torch >= 2.6 load
    # fairseq checkpoints without weights_only=False
    return run_fairseq("generate", experiment["data"], "--path", experiment["checkpoint"],
                       "--source-lang", "src", "--target-lang", "tgt", "--user-dir", USER_DIR, *args)


@pytest.fixture(scope="module")
def fairseq_beam_one(toy_experiment):
    output = generate(toy_experiment, "--beam", 1, "--batch-size", 100, "--required-batch-size-multiple", 1)
    result = hypotheses(output)
    assert len(result) == 100
    return result


@pytest.mark.parametrize("algorithm, batch_size, options", [
    ("greedy", 50, ()), ("greedy", 1, ()), ("iad", 1, ()), ("iad", 50, ("--iad-pass-tokens", 0)),
    ("jacobi", 16, ()), ("gs-jacobi", 50, ()), ("hybrid-jacobi", 7, ()), ("greedy", 16, ("--verifier", "fairseq")),
    ("iad", 1, ("--verifier", "fairseq")), ("gs-jacobi", 16, ("--verifier", "fairseq")),
    ("retrieval", 1, ("--retrieval-depth", 3)), ("retrieval", 16, ("--retrieval-branches", 3)), ("lookahead", 16, ()),
    ("lookahead", 1, ("--lookahead-window", 2, "--lookahead-ngram", 4, "--lookahead-guesses", 7))])
def test_generate_equals_beam_one_on_every_sentence(toy_experiment, fairseq_beam_one, algorithm, batch_size,
                                                    options, tmp_path):
    stats_path = tmp_path / "stats.json"
    output = generate(toy_experiment, "--task", "translation_pardec", "--gen-algo", algorithm,
                      "--batch-size", batch_size, "--pardec-stats", stats_path, "--jacobi-block-size", 3, *options)
    assert hypotheses(output) == fairseq_beam_one

    stats = json.loads(stats_path.read_text())
    assert stats["algo"] == algorithm and stats["sentences"] == 100
    assert sorted(s["id"] for s in stats["per_sentence"]) == list(range(100))
    # each pass adds the verifier's own token, except a last pass that ends on a drafted EOS
    assert all(s["hyp_len"] - s["accepted_drafts"] in (s["iterations"], s["iterations"] - 1) and s["seconds"] > 0
               for s in stats["per_sentence"])
    assert stats["mean_accepted"] == stats["tokens"] / stats["iterations"] >= 1.0
    assert all(s["drafted"] >= s["drafting_passes"] and s["iterations"] >= s["drafting_passes"]
               and (s["drafting_passes"] > 0) == (s["drafted"] > 0) for s in stats["per_sentence"])
    if algorithm == "greedy":
        assert stats["tokens"] == stats["iterations"] and stats["draft_acceptance"] == 0.0
        assert stats["drafting_share"] == 0.0
    if algorithm == "retrieval":  # drafted from the data folder's train split, indexed beside it
        assert (toy_experiment["data"] / "train.src-tgt.tgt.suffix-index.npz").exists()
        assert stats["drafting_share"] > 0.5
    assert stats["wall_seconds"] >= max(s["seconds"] for s in stats["per_sentence"])


def test_default_gen_algo_is_fairseq_search(toy_experiment, fairseq_beam_one):
    output = generate(toy_experiment, "--task", "translation_pardec", "--beam", 1, "--batch-size", 50)
    assert hypotheses(output) == fairseq_beam_one


def test_interactive_greedy_equals_beam_one(toy_experiment):
    lines = "s1 s2 s3\ns4\ns5 s5 s5 s5 s5 s5\n"
    common = [toy_experiment["data"], "--path", toy_experiment["checkpoint"], "--source-lang", "src",
              "--target-lang", "tgt", "--buffer-size", 2, "--batch-size", 2, "--user-dir", USER_DIR]
    stock = run_fairseq("interactive", *common, "--beam", 1, stdin=lines)
    plugin = run_fairseq("interactive", *common, "--task", "translation_pardec", "--gen-algo", "greedy",
                         stdin=lines)
    assert hypotheses(plugin) == hypotheses(stock) and len(hypotheses(plugin)) == 3


@pytest.mark.parametrize("split", ["valid", "test"])
def test_every_sentence_is_batched_at_any_batch_size(toy_experiment, split):
    task = TranslationPardecTask.setup_task(TranslationPardecConfig(
        data=str(toy_experiment["data"]), source_lang="src", target_lang="tgt", dataset_impl="mmap",
        required_seq_len_multiple=1, train_subset="train"))
    task.load_dataset(split)
    for batch_size in (50, 8, 7, 3):
        iterator = task.get_batch_iterator(task.dataset(split), max_sentences=batch_size,
                                           required_batch_size_multiple=8).next_epoch_itr(shuffle=False)
        ids = sorted(i for batch in iterator for i in batch["id"].tolist())
        assert ids == list(range(100))


def test_a_train_split_in_shards_loads_whole(toy_experiment, tmp_path):
    """fairseq reads train, train1, ... as one split; with its default --upsample-primary -1 its
    ConcatDataset fails ("negative dimensions are not allowed"), the plugin's tasks default to 1."""
    for shard in ("train", "train1"):
        for suffix in ("src.bin", "src.idx", "tgt.bin", "tgt.idx"):
            shutil.copy(toy_experiment["data"] / f"train.src-tgt.{suffix}", tmp_path / f"{shard}.src-tgt.{suffix}")
    for name in ("dict.src.txt", "dict.tgt.txt"):
        shutil.copy(toy_experiment["data"] / name, tmp_path / name)
    task = TranslationPardecTask.setup_task(TranslationPardecConfig(
        data=str(tmp_path), source_lang="src", target_lang="tgt", dataset_impl="mmap"))
    task.load_dataset("train", combine=True)
    dataset = task.dataset("train")
    assert len(dataset) == 2 * 600 and len(dataset.sizes) == 2 * 600


def test_fairseq_itself_drops_the_remainder_batch(toy_experiment):
    """The upstream behaviour the task fixes; if fairseq ever fixes it, this test says so."""
    output = generate(toy_experiment, "--beam", 1, "--batch-size", 50)
    assert len(hypotheses(output)) == 96


def test_eval_bleu_uses_the_plugin_generator_and_its_checkpoint_resumes(toy_experiment, tmp_path):
    """--eval-bleu stores numpy metric state in the checkpoint: resuming must load it safely."""
    common = [toy_experiment["data"], "--user-dir", USER_DIR, "--task", "translation_pardec",
              "--gen-algo", "greedy", "--eval-bleu", "--eval-bleu-args", '{"max_len_b": 10}',
              "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric",
              "--save-dir", tmp_path, *TINY_TRANSFORMER, "--validate-interval-updates", 2]
    first = run_fairseq("train", *common, "--max-update", 2)
    assert "| valid on 'valid' subset" in first and "| bleu " in first
    resumed = run_fairseq("train", *common, "--max-update", 4,
                          "--restore-file", tmp_path / "checkpoint_best.pt")
    assert "Loaded checkpoint" in resumed and "(epoch 1 @ 2 updates)" in resumed


def test_eval_bleu_of_the_fast_path_follows_the_weights_training_changes(toy_experiment, tmp_path):
    """--eval-bleu builds its generator once: the fast path must re-lay the weights at each validation,
    so both verifier paths report the same BLEU after every update."""
    bleu = {}
    for verifier in ("fast", "fairseq"):
        log = run_fairseq("train", toy_experiment["data"], "--user-dir", USER_DIR, "--task", "translation_pardec",
                          "--gen-algo", "greedy", "--verifier", verifier, "--eval-bleu",
                          "--eval-bleu-args", '{"max_len_b": 10}', "--save-dir", tmp_path / verifier,
                          *TINY_TRANSFORMER, "--validate-interval-updates", 1, "--max-update", 6,
                          "--no-save", "--lr", 0.02)
        bleu[verifier] = re.findall(r"\| bleu ([\d.]+)", log)
    assert len(bleu["fast"]) >= 6 and len(set(bleu["fast"])) > 1  # the weights changed what it decodes
    assert bleu["fast"] == bleu["fairseq"]


def test_relaxed_acceptance_flags_reach_the_generator(toy_experiment, tmp_path):
    """--acceptance and its parameters are fairseq-generate flags; a relaxed rule keeps more drafted tokens."""
    acceptance_rates = {}
    for rule in ("exact", "top-k"):
        stats_path = tmp_path / f"{rule}.json"
        output = generate(toy_experiment, "--task", "translation_pardec", "--gen-algo", "gs-jacobi",
                          "--jacobi-block-size", 4, "--acceptance", rule, "--acceptance-top-k", 20,
                          "--batch-size", 16, "--pardec-stats", stats_path)
        assert len(hypotheses(output)) == 100
        acceptance_rates[rule] = json.loads(stats_path.read_text())["draft_acceptance"]
    assert acceptance_rates["top-k"] > acceptance_rates["exact"]
    with pytest.raises(AssertionError, match="--acceptance-top-k must be at least 1"):
        generate(toy_experiment, "--task", "translation_pardec", "--gen-algo", "iad", "--acceptance", "top-k",
                 "--acceptance-top-k", 0)


def test_the_hub_interface_decodes_with_the_checkpoints_gen_algo_and_an_override(toy_experiment, tmp_path):
    """``from_pretrained(..., user_dir=...)`` on a checkpoint trained with the plugin's task builds the
    plugin's generator (its ``--gen-algo``, or one passed as an override), with fairseq greedy's output."""
    from fairseq.models.transformer import TransformerModel

    from pardec_fairseq.decoding.generator import ParallelDecodingGenerator

    run_fairseq("train", toy_experiment["data"], "--user-dir", USER_DIR, "--task", "translation_pardec",
                "--gen-algo", "iad", "--save-dir", tmp_path, *TINY_TRANSFORMER, "--max-update", 3)
    sources = ["s1 s2 s3", "s4", "s5 s6 s7 s8 s9"]
    outputs = {}
    for gen_algo in (None, "lookahead", "fairseq"):
        overrides = {} if gen_algo is None else {"gen_algo": gen_algo}
        hub = TransformerModel.from_pretrained(str(tmp_path), "checkpoint_last.pt", str(toy_experiment["data"]),
                                               user_dir=USER_DIR, **overrides)
        generator = hub.task.build_generator(hub.models, hub.cfg.generation)
        assert isinstance(generator, ParallelDecodingGenerator) == (gen_algo != "fairseq")
        assert gen_algo == "fairseq" or generator.algorithm == (gen_algo or "iad")
        outputs[gen_algo] = hub.translate(sources, beam=1, max_len_b=10)
    assert outputs[None] == outputs["lookahead"] == outputs["fairseq"]
    assert all(outputs[None])


@pytest.mark.slow
def test_importing_the_plugin_keeps_numbas_compiler_logs_out_of_the_terminal():
    """fairseq's import sets the root logger to DEBUG, under which numba logs every pass of its
    compiler (37,000 lines on a first fairseq-generate): the plugin sets numba's logger to WARNING,
    unless it has a level already."""
    probe = ("import logging; {} import pardec_fairseq; "
             "print(logging.getLogger('numba').getEffectiveLevel())")
    levels = [subprocess.run([sys.executable, "-c", probe.format(before)], capture_output=True, text=True,
                             check=True, timeout=120).stdout.split()[-1]
              for before in ("", "logging.getLogger('numba').setLevel(logging.INFO);")]
    assert levels == ["30", "20"]  # WARNING; the INFO given before
