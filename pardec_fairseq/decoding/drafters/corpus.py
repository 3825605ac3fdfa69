"""Target-side text for the drafters that learn nothing but read a corpus (retrieval drafting,
the n-gram model of draft refinement): a binarized split as one token sequence."""
import numpy as np
from fairseq.data import data_utils


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
