"""Target-side text for the drafters that learn nothing but read a corpus (retrieval drafting,
the n-gram model of draft refinement): a binarized split as one token sequence; and the caches of
what drafters derive from a corpus (the retrieval index, the lexical shortlist), kept beside it."""
import logging
import os
from typing import Dict, Optional

import numpy as np
from fairseq.data import data_utils

logger = logging.getLogger(__name__)


def missing_corpus(prefix, option):
    return (f"found no binarized split of target-side text at {prefix} (.bin/.idx): binarize one with "
            f"fairseq-preprocess and the model's target dictionary, or pass {option} PREFIX")


def corpus_text(prefix, dictionary, option) -> np.ndarray:
    """The binarized split at ``prefix`` (``.bin``/``.idx``; ``option`` names the flag that chose it)
    as one int32 sequence: EOS, then each sentence with its EOS."""
    dataset = data_utils.load_indexed_dataset(prefix, dictionary)
    if dataset is None:
        raise FileNotFoundError(missing_corpus(prefix, option))
    eos = np.array([dictionary.eos()], dtype=np.int32)
    sentences = [dataset[i].numpy().astype(np.int32) for i in range(len(dataset))]
    text = np.concatenate([eos] + [s if s.size and s[-1] == eos[0] else np.append(s, eos) for s in sentences])
    if int(text.max()) >= len(dictionary):
        raise ValueError(f"the corpus {prefix} ({option}) has token ids up to {int(text.max())}, beyond the "
                         f"target dictionary's {len(dictionary)}: binarize it with the model's dictionary")
    return text


def split_stamp(prefix, option):
    """What tells a cached derivative of the binarized split ``prefix`` stale: its ``.bin``'s size and
    modification time (ns); a missing split is refused (``option`` names the flag that chose it)."""
    if not os.path.exists(f"{prefix}.bin"):
        raise FileNotFoundError(missing_corpus(prefix, option))
    status = os.stat(f"{prefix}.bin")
    return status.st_size, status.st_mtime_ns


def load_cached(path: str, stamp: np.ndarray) -> Optional[Dict[str, np.ndarray]]:
    """The arrays cached at ``path`` (``.npz``, loaded without pickle) if it was saved with ``stamp``, else
    ``None`` (no file, another stamp, or a file that does not read)."""
    if not os.path.exists(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as stored:
            if "stamp" in stored.files and np.array_equal(stored["stamp"], stamp):
                return {name: stored[name] for name in stored.files}
    except (OSError, ValueError) as error:  # a zip that does not read is a ValueError (BadZipFile)
        logger.warning(f"ignoring the unreadable cache {path} ({error}); rebuilding it")
    return None


def save_cached(path: str, stamp: np.ndarray, what: str, **arrays: np.ndarray):
    """Cache ``arrays`` with ``stamp`` at ``path`` (``.npz``), written aside and renamed over it, so that an
    interrupted run leaves no partial file; ``what`` names them in a warning where ``path`` is not writable."""
    aside = f"{path}.{os.getpid()}.partial.npz"
    try:
        np.savez(aside, stamp=stamp, **arrays)
        os.replace(aside, path)
    except OSError as error:
        logger.warning(f"could not cache {what} at {path} ({error}); it is rebuilt each run")
        if os.path.exists(aside):
            os.remove(aside)
