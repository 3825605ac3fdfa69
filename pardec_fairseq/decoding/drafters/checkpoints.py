"""Loading a trained drafter's checkpoint (``--drafter-path``) and refusing one that does not fit
the verifier's dictionaries."""
import os

from fairseq import checkpoint_utils


def load_drafter_checkpoint(path):
    """The state of ``--drafter-path`` and the architecture it names."""
    if not path:
        raise ValueError("--gen-algo gad and gad++ draft with a trained drafter: pass its checkpoint with "
                         "--drafter-path (a block_nat model from --task translation_block_nat, or a draft_head "
                         "from --task translation_draft_head)")
    if not os.path.isfile(path):
        raise ValueError(f"--drafter-path {path}: no such checkpoint file")
    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    arch = getattr(state["cfg"].model, "arch", None) if state.get("cfg") is not None else None
    return state, arch


def check_dictionaries(path, saved, src_dict, tgt_dict):
    """Refuse a drafter trained with other dictionaries than the verifier's."""
    for name, dictionary in (("source", src_dict), ("target", tgt_dict)):
        symbols = saved[f"{name}_symbols"]
        if symbols != dictionary.symbols:
            first = next((i for i, (a, b) in enumerate(zip(symbols, dictionary.symbols)) if a != b),
                         min(len(symbols), len(dictionary.symbols)))
            raise ValueError(
                f"--drafter-path {path} was trained with another {name} dictionary than the verifier's "
                f"({len(symbols)} vs {len(dictionary.symbols)} symbols, first difference at index {first}); "
                "train the drafter on data binarized with the verifier's dictionaries (fairseq-preprocess "
                "--srcdict/--tgtdict)")
