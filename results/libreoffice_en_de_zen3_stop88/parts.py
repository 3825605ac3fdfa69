"""Stop 88 probe (not product code): the median time of each call of the decoding loop per pass, plugin greedy and
`gad` with the head taking turns sentence by sentence (functions wrapped with timers). Run from the repository root:
.venv/bin/python results/libreoffice_en_de_zen3_stop88/parts.py 100"""
import collections, statistics, sys, time
import torch
sys.path.insert(0, "results/libreoffice_en_de_zen3_stop86")
from headcall import GAD, setup
from pardec_fairseq.decoding import engine
from pardec_fairseq.decoding.drafters import compiled_head, draft_head
from pardec_fairseq.decoding.drafters.compiled_head import CompiledHead
from pardec_fairseq.decoding.proposals import DraftTree

def main(sentences):
    runs, models, batches = setup(sentences, ["greedy", GAD])
    current, times, wall = [None], collections.defaultdict(list), collections.defaultdict(float)
    def timed(owner, name, part):
        function = getattr(owner, name)
        def wrapper(*args, **kwargs):
            began = time.perf_counter()
            out = function(*args, **kwargs)
            times[current[0], part].append(time.perf_counter() - began)
            return out
        setattr(owner, name, staticmethod(wrapper) if isinstance(owner.__dict__.get(name), staticmethod) else wrapper)
    timed(compiled_head, "_remember_and_draft", "compiled call")
    timed(CompiledHead, "draft", "CompiledHead.draft")
    timed(draft_head.DraftHeadDrafter, "propose", "propose")
    timed(draft_head.DraftHeadDrafter, "update", "update")
    timed(engine.DraftVerifyDecoder, "_pass_tokens", "_pass_tokens")
    timed(DraftTree, "of", "DraftTree.of")
    from pardec_fairseq.decoding.fast_verifier import FastVerifier
    timed(FastVerifier, "score", "score")
    timed(FastVerifier, "rollback", "rollback")
    timed(engine.DecodingState, "advance", "advance")
    timed(engine.DecodingState, "last_cumulative", "last_cumulative")
    for run in runs:
        cls = type(run.generator.decoder.acceptance)
        if "accept" in cls.__dict__ and not hasattr(cls.accept, "__wrapped_by_probe__"):
            timed(cls, "accept", "accept " + cls.__name__)
            cls.accept.__wrapped_by_probe__ = True
        d = type(run.generator.decoder.drafter)
        print(run.name[:8], cls.__name__, d.__name__)
    timed(engine.DraftVerifyDecoder, "_decode", "whole sentence")
    from pardec_fairseq.decoding import compiled_layers, acceptance, fast_verifier, verifier as verifier_module
    timed(compiled_layers, "pass_layers", "pass_layers (compiled)")
    timed(compiled_layers.CompiledPass, "__call__", "CompiledPass")
    timed(fast_verifier.FastDecoder, "logits", "projection")
    timed(acceptance, "_rank_tree_path", "_rank_tree_path")
    timed(acceptance, "_rank_chain", "_rank_chain")
    timed(verifier_module.VerifierScores, "span", "span")
    timed(verifier_module.VerifierScores, "logits", "scores.logits")
    timed(engine.DecodingState, "begin", "state begin")
    timed(draft_head.DraftHeadDrafter, "begin", "drafter begin")
    timed(FastVerifier, "start", "verifier start")
    with torch.no_grad():
        for batch in batches[:5]:
            for run in runs:
                run.generator.generate(models, batch)
        for round_ in range(2):
            for batch in batches:
                for run in (runs if round_ % 2 == 0 else runs[::-1]):
                    current[0], began = run.name[:8], time.perf_counter()
                    run.generator.generate(models, batch)
                    wall[run.name[:8]] += time.perf_counter() - began
    for key in sorted(times, key=str):
        s = times[key]
        print(f"{key[0]:8s} {key[1]:22s} n={len(s):5d} median {statistics.median(s)*1e6:7.1f} us mean {statistics.mean(s)*1e6:7.1f} us")
    print({k: round(v, 3) for k, v in wall.items()})

main(int(sys.argv[1]))
