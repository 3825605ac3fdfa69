"""Stop 88 probe (not product code): the median time of each call of the decoding loop per pass, plugin greedy and
`gad` with the head taking turns sentence by sentence (functions wrapped with timers). Run from the repository root:
.venv/bin/python results/libreoffice_en_de_zen3_stop88/parts.py 100"""
import collections
import statistics
import sys
import time

sys.path[:0] = ["results/libreoffice_en_de_zen3_stop86", "results/libreoffice_en_de_zen3_stop88"]
from headcall import GAD, setup
from twice import decode_in_turns
from pardec_fairseq.decoding import acceptance, compiled_layers, engine, fast_verifier, verifier
from pardec_fairseq.decoding.drafters import compiled_head, draft_head
from pardec_fairseq.decoding.proposals import DraftTree

# (owner, attribute, what the table calls it)
TIMED = [
    (compiled_head, "_remember_and_draft", "compiled call"), (compiled_head.CompiledHead, "draft", "CompiledHead.draft"),
    (draft_head.DraftHeadDrafter, "propose", "propose"), (draft_head.DraftHeadDrafter, "update", "update"),
    (draft_head.DraftHeadDrafter, "begin", "drafter begin"), (engine.DraftVerifyDecoder, "_pass_tokens", "_pass_tokens"),
    (engine.DraftVerifyDecoder, "_decode", "whole sentence"), (engine.DecodingState, "advance", "advance"),
    (engine.DecodingState, "last_cumulative", "last_cumulative"), (engine.DecodingState, "begin", "state begin"),
    (DraftTree, "of", "DraftTree.of"), (fast_verifier.FastVerifier, "score", "score"),
    (fast_verifier.FastVerifier, "rollback", "rollback"), (fast_verifier.FastVerifier, "start", "verifier start"),
    (fast_verifier.FastDecoder, "logits", "projection"), (compiled_layers, "pass_layers", "pass_layers (compiled)"),
    (compiled_layers.CompiledPass, "__call__", "CompiledPass"), (acceptance, "_rank_tree_path", "_rank_tree_path"),
    (acceptance, "_rank_chain", "_rank_chain"), (verifier.VerifierScores, "span", "span"),
    (verifier.VerifierScores, "logits", "scores.logits"),
]


def timed(owner, name, record):
    """Wrap ``owner.name`` (a function, method or static method) so that each call passes its seconds to ``record``."""
    function = getattr(owner, name)

    def wrapper(*args, **kwargs):
        began = time.perf_counter()
        out = function(*args, **kwargs)
        record(time.perf_counter() - began)
        return out
    setattr(owner, name, staticmethod(wrapper) if isinstance(owner.__dict__.get(name), staticmethod) else wrapper)


def main(sentences):
    runs, models, batches = setup(sentences, ["greedy", GAD])
    current, times = [None], collections.defaultdict(list)
    rules = {type(run.generator.decoder.acceptance) for run in runs}  # both runs may share one class
    for owner, name, part in TIMED + [(rule, "accept", f"accept {rule.__name__}") for rule in rules]:
        timed(owner, name, lambda seconds, part=part: times[current[0], part].append(seconds))
    decode_in_turns(runs, models, batches, times, current)
    for (run, part), seconds in sorted(times.items()):
        print(f"{run:6s} {part:26s} n={len(seconds):5d} median {statistics.median(seconds) * 1e6:7.1f} us "
              f"mean {statistics.mean(seconds) * 1e6:7.1f} us")


if __name__ == "__main__":
    main(int(sys.argv[1]))
