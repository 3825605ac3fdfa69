"""Stop 92 probe: real (not cProfile) time of gad's Python pieces a pass, each less the compiled calls inside it.
Wraps methods by attribute (a probe, not product code). Run: .venv/bin/python results/.../pytime.py N [ALGORITHM]"""
import collections, sys, time
import torch
sys.path.insert(0, "results/libreoffice_en_de_zen3_stop86")
from headcall import setup, GAD
from pardec_fairseq.decoding import fast_verifier, stats, acceptance, engine, fast_layers, compiled_layers, verifier, fast_ops
from pardec_fairseq.decoding.drafters import compiled_head, draft_head, shortlist

spent, calls, stack = collections.defaultdict(float), collections.Counter(), []

def wrap(owner, name, label):
    function = getattr(owner, name)
    static = isinstance(owner.__dict__.get(name), staticmethod) if isinstance(owner, type) else False
    def wrapper(*args, **kwargs):
        began = time.perf_counter()
        stack.append(0.0)
        try:
            return function(*args, **kwargs)
        finally:
            inner = stack.pop()
            total = time.perf_counter() - began
            spent[label] += total - inner
            calls[label] += 1
            if stack:
                stack[-1] += total
    setattr(owner, name, staticmethod(wrapper) if static else wrapper)

for owner, name in [(compiled_head, "_remember_and_draft"), (acceptance, "_rank_tree_path"),
                    (compiled_layers, "pass_layers"), (verifier, "_fairseq_log_probs"), (acceptance, "_rank_chain"),
                    (fast_ops.vector_kernels, "product"), (engine, "_tree_pass_tokens"), (engine, "_chain_pass_tokens"),
                    (engine, "_advance"), (shortlist, "_copy_columns"), (compiled_layers, "write_keys_values")]:
    wrap(owner, name, "compiled")
for owner, name in [(compiled_head.CompiledHead, "draft"), (draft_head.DraftHeadDrafter, "propose"),
                    (draft_head.DraftHeadDrafter, "update"), (draft_head.DraftHeadDrafter, "begin"),
                    (acceptance.ExactAcceptance, "accept"), (engine.DraftVerifyDecoder, "_pass_tokens"),
                    (fast_layers.FastCache, "keep_path"), (engine.DecodingState, "advance"),
                    (verifier.VerifierScores, "logits"), (verifier.VerifierScores, "span"),
                    (engine.DraftVerifyDecoder, "_decode"), (engine.DraftVerifyDecoder, "_rows_leave"),
                    (fast_verifier.FastVerifier, "score"), (fast_verifier.FastVerifier, "start"),
                    (compiled_layers.CompiledPass, "__call__"), (verifier.Verifier, "log_probs"),
                    (fast_ops.Product, "__call__"), (stats.SentenceCounter, "after_pass"),
                    (fast_verifier.FastVerifier, "rollback")]:
    wrap(owner, name, f"{owner.__name__}.{name}")
ALGORITHM = {"gad": GAD, "greedy": "greedy"}
runs, models, batches = setup(int(sys.argv[1]), [ALGORITHM[a] for a in sys.argv[2:]])
with torch.no_grad():
    for run in runs:
        for batch in batches[:5]:
            run.generator.generate(models, batch)
    for run in runs:
        spent.clear(); calls.clear()
        for batch in batches:
            run.generator.generate(models, batch)
        passes = calls["ExactAcceptance.accept"]
        print(f"{run.name[:12]}: {passes} passes, {len(batches)} sentences; us a pass, own time less compiled calls:")
        for label, seconds in sorted(spent.items(), key=lambda item: -item[1]):
            print(f"  {label:40s} {seconds / passes * 1e6:7.1f}  ({calls[label]} calls)")
