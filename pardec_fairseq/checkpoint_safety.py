"""Let ``torch.load(weights_only=True)`` read fairseq checkpoints, and nothing more.

Since torch 2.6 ``torch.load`` unpickles only allow-listed globals. fairseq 0.12 checkpoints
pickle an ``argparse.Namespace`` (old-style args) and, when ``--eval-bleu`` metrics are saved,
numpy arrays and scalars. We allow exactly those classes, so a checkpoint that carries any
other pickled object is still refused instead of running arbitrary code.
"""
import argparse

import numpy
import torch

_NUMPY_DTYPES = (
    numpy.bool_, numpy.int8, numpy.int16, numpy.int32, numpy.int64,
    numpy.uint8, numpy.uint16, numpy.uint32, numpy.uint64,
    numpy.float16, numpy.float32, numpy.float64,
)


def fairseq_checkpoint_globals():
    """The globals a fairseq checkpoint may reference, with the numpy 1.x names as aliases."""
    multiarray = numpy._core.multiarray
    allowed = [
        argparse.Namespace,
        numpy.ndarray,
        numpy.dtype,
        multiarray._reconstruct,
        multiarray.scalar,
        # checkpoints written under numpy 1.x name the same functions under numpy.core
        (multiarray._reconstruct, "numpy.core.multiarray._reconstruct"),
        (multiarray.scalar, "numpy.core.multiarray.scalar"),
    ]
    allowed.extend(type(numpy.dtype(t)) for t in _NUMPY_DTYPES)
    return allowed


def allow_fairseq_checkpoints():
    torch.serialization.add_safe_globals(fairseq_checkpoint_globals())
