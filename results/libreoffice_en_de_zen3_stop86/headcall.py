"""Stop 86 probe (not product code): in the decoding loop, the draft head's compiled drafting call and the Python
around it by head steps, and self-draft's call, the generators decoding sentence by sentence in turn.
Run from the repository root: .venv/bin/python results/libreoffice_en_de_zen3_stop86/headcall.py 100"""
import collections
import statistics
import sys
import time

import torch

from pardec_fairseq.cli.bench import parse_args
from pardec_fairseq.cli.bench_runs import build_runs
from pardec_fairseq.cli.loading import load_task_and_models, make_batches
from pardec_fairseq.decoding.drafters import compiled_head, self_draft
from pardec_fairseq.decoding.drafters.compiled_head import CompiledHead

HEAD = "runs/libreoffice_en_de/zen3s86/head_k1_l1_in1_v4096_u3000/checkpoint_last.pt"
GAD = f"gad:drafter-path={HEAD},draft-vocab=512,draft-shortlist=40"
ALGORITHMS = ["greedy", f"{GAD},draft-head-steps=1", f"{GAD},draft-head-steps=2", GAD, f"{GAD},draft-head-steps=4",
              "self-draft:self-draft-steps=3"]


def setup(sentences, algorithms):
    """The plugin generators of ``algorithms`` on the stop's verifier, the models and the first batches."""
    args = parse_args(["data/libreoffice_en_de/bin", "--path", "runs/libreoffice_en_de/zen3s86/checkpoint_best.pt",
                       "-s", "en", "-t", "de", "--references", "data/libreoffice_en_de/raw/test.de",
                       "--max-len-a", "1.2", "--max-len-b", "10", "--max-sentences", str(sentences),
                       "--algorithms", *algorithms])
    torch.set_num_threads(2)
    task, models = load_task_and_models(args, torch.device("cpu"))
    batches = make_batches(task, models, args, torch.device("cpu"))
    return [run for run in build_runs(task, models, args) if run.plugin], models, batches


def warm_up(runs, models, batches):
    """Each generator over the first 5 batches, untimed (numba's compiled calls loaded, caches filled)."""
    for batch in batches[:5]:
        for run in runs:
            run.generator.generate(models, batch)


def turns(runs, batches):
    """``(run, batch)`` for two rounds over the batches, every generator decoding each batch in turn, in
    reverse order in the second round, so that no generator always follows the same one."""
    for round_ in range(2):
        for batch in batches:
            for run in (runs if round_ % 2 == 0 else runs[::-1]):
                yield run, batch

def main(sentences):
    runs, models, batches = setup(sentences, ALGORITHMS)
    current, times, wall = [None], collections.defaultdict(list), collections.defaultdict(float)

    def timed(owner, name, part):
        function = getattr(owner, name)

        def wrapper(*args, **kwargs):
            began = time.perf_counter()
            out = function(*args, **kwargs)
            times[current[0], part].append(time.perf_counter() - began)
            return out
        setattr(owner, name, wrapper)
    timed(compiled_head, "_remember_and_draft", "compiled call")
    timed(self_draft, "_draft_chain", "compiled call")
    timed(CompiledHead, "draft", "with its Python")
    with torch.no_grad():
        warm_up(runs, models, batches)
        for run, batch in turns(runs, batches):
            current[0], began = run.name, time.perf_counter()
            run.generator.generate(models, batch)
            wall[run.name] += time.perf_counter() - began
    for run in runs:
        line = f"{run.name[:60]:60s} vs greedy {wall[runs[0].name] / wall[run.name]:.2f}x"
        for part in ("compiled call", "with its Python"):
            seconds = times.get((run.name, part))
            if seconds:
                line += f" | {part}: median {statistics.median(seconds) * 1e6:.0f} us (n={len(seconds)})"
        print(line)


if __name__ == "__main__":
    main(int(sys.argv[1]))
