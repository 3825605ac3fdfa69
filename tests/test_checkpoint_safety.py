"""Importing the plugin lets fairseq checkpoints load with weights_only=True, and nothing else."""
import argparse
import pickle

import numpy
import pytest
import torch

import pardec_fairseq  # noqa: F401  (registers the allow-list)


class NotAFairseqObject:
    def __reduce__(self):  # what a malicious checkpoint would do
        return (print, ("arbitrary code ran",))


def test_fairseq_checkpoint_contents_load(tmp_path):
    state = {
        "args": argparse.Namespace(arch="transformer", lr=[0.0005]),
        "model": {"w": torch.ones(2)},
        "extra_state": {"metrics": {"bleu_counts": numpy.arange(4), "best": numpy.float64(1.5)}},
    }
    path = tmp_path / "checkpoint.pt"
    torch.save(state, path)
    loaded = torch.load(path)
    assert loaded["args"].arch == "transformer"
    assert loaded["extra_state"]["metrics"]["bleu_counts"].tolist() == [0, 1, 2, 3]


def test_other_pickled_objects_are_refused(tmp_path, capsys):
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "payload": NotAFairseqObject()}, path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path)
    assert "arbitrary code ran" not in capsys.readouterr().out
