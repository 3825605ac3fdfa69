import importlib.util
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the tiny-model helpers in tests/tiny.py

REPO = Path(__file__).resolve().parents[1]
USER_DIR = str(REPO / "pardec_fairseq")


SLOW_FIXTURES = {"toy_experiment"}  # a model trained through fairseq-train in a subprocess


def pytest_configure(config):
    """Under pytest-xdist (``scripts/test.sh`` runs a worker per core) each worker and the commands it
    runs compute on one thread: OpenMP threads that outnumber the cores spin against each other (on 2
    cores with 2 threads per worker the soak tests took 4-10x as long, and the suite longer than
    without workers). Before the workers start, the process that runs them compiles the decoders."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
    elif getattr(config.option, "numprocesses", None):
        _compile_the_decoders()


def _compile_the_decoders():
    """Decode a tiny batch with the drafters that need no trained model, so that numba compiles the
    fast path, the vector kernel, the acceptance and the tree pass into its cache once (about 35 s
    from a clean clone on a Zen 3 core, 1 s when cached) instead of in each worker and in each command
    they start before the cache is written. (Compiling BPD's heads and a draft head here too made the
    suite a minute slower: the workers compile those beside each other's work.)"""
    import argparse

    from tiny import build_transformer, make_batch, make_dictionary

    from pardec_fairseq.decoding import DecodingConfig, build_generator

    dictionary = make_dictionary(20)
    model = build_transformer(dictionary, layers=2).eval()
    batch = make_batch(dictionary, [[4, 5, 6, 7], [8, 9]])
    for algorithm in ("greedy", "iad", "gs-jacobi", "lookahead"):
        generator = build_generator(algorithm, [model], dictionary, argparse.Namespace(max_len_b=8),
                                    DecodingConfig())
        generator.generate([model], batch)


def pytest_collection_modifyitems(items):
    """Tests that train a model or run commands in subprocesses are ``slow`` (as are those marked so
    themselves): ``pytest -m "not slow"`` checks the engine, the drafters and the verifier in one to
    two minutes; ``scripts/test.sh`` runs everything. The slow ones run first, so that the workers do not
    end on a long test alone."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def load_example_module(recipe, name="extract_pairs"):
    """A recipe's Python script (examples/RECIPE/NAME.py) as a module, for its unit tests."""
    spec = importlib.util.spec_from_file_location(f"{recipe}_{name}", REPO / "examples" / recipe / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_fairseq(tool, *args, stdin=None):
    """Run a fairseq command-line tool in a fresh interpreter, as a user would."""
    result = subprocess.run([sys.executable, "-m", f"fairseq_cli.{tool}", *map(str, args)],
                            input=stdin, capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"fairseq-{tool} failed:\n{result.stderr[-3000:]}")
    return result.stdout


def write_toy_corpus(folder, seed=7):
    """A word-for-word 'translation' with reordering: enough for a model to learn something."""
    rng = random.Random(seed)
    sizes = {"train": 600, "valid": 100, "test": 100}
    for split, size in sizes.items():
        with open(folder / f"{split}.src", "w") as src, open(folder / f"{split}.tgt", "w") as tgt:
            for _ in range(size):
                words = [rng.randrange(30) for _ in range(rng.randint(1, 12))]
                src.write(" ".join(f"s{w}" for w in words) + "\n")
                tgt.write(" ".join(f"t{w}" for w in reversed(words)) + "\n")


TINY_TRANSFORMER = ["--arch", "transformer", "--encoder-layers", 1, "--decoder-layers", 1,
                    "--encoder-embed-dim", 32, "--decoder-embed-dim", 32,
                    "--encoder-ffn-embed-dim", 64, "--decoder-ffn-embed-dim", 64,
                    "--encoder-attention-heads", 2, "--decoder-attention-heads", 2, "--share-all-embeddings",
                    "--optimizer", "adam", "--lr", 0.005, "--max-tokens", 2000, "--no-epoch-checkpoints",
                    "--no-progress-bar", "--seed", 1, "--num-workers", 0]


@pytest.fixture(scope="session")
def toy_experiment(tmp_path_factory):
    """Binarized toy data and a stock ``transformer`` trained for a few updates without the plugin."""
    root = tmp_path_factory.mktemp("toy")
    write_toy_corpus(root)
    data_bin = root / "bin"
    run_fairseq("preprocess", "--source-lang", "src", "--target-lang", "tgt",
                "--trainpref", root / "train", "--validpref", root / "valid", "--testpref", root / "test",
                "--destdir", data_bin, "--joined-dictionary", "--workers", "1")
    checkpoints = root / "checkpoints"
    run_fairseq("train", data_bin, "--task", "translation", *TINY_TRANSFORMER, "--max-update", 30,
                "--save-dir", checkpoints)
    return {"root": root, "data": data_bin, "checkpoint": checkpoints / "checkpoint_last.pt"}


BLOCK_NAT = ["--task", "translation_block_nat", "--arch", "block_nat", *TINY_TRANSFORMER[2:],
             "--criterion", "glat_block_loss", "--glat-anneal-updates", 4, "--block-size", 3]


@pytest.fixture(scope="session")
def toy_drafter(toy_experiment, tmp_path_factory):
    """GAD's block drafter for the toy data, trained a few updates with a context window of 2 tokens
    and the soft copy of the source; ``log`` is fairseq-train's output."""
    checkpoints = tmp_path_factory.mktemp("toy_drafter")
    log = run_fairseq("train", toy_experiment["data"], "--user-dir", USER_DIR, *BLOCK_NAT, "--max-update", 4,
                      "--context-window", 2, "--soft-copy", "--save-dir", checkpoints, "--log-interval", 1,
                      "--log-format", "simple")
    return {"checkpoint": checkpoints / "checkpoint_last.pt", "log": log}

