"""Timing the benchmark's generators: repetitions over the same batches, the generators' order rotated,
and the profile's untimed pass."""
import time

import torch

from pardec_fairseq.cli.module_profile import ModuleProfile
from pardec_fairseq.decoding.observers import PARTS


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def decode_all(runs, models, batches, repetitions, device, order):
    """Time every generator on every batch, in ``order`` (``ORDERS``), rotating which generator goes
    first. Outputs and plugin statistics are kept from the first timed repetition."""
    for run in runs:  # warm-up: first calls allocate caches and select kernels
        if run.threads is not None:
            torch.set_num_threads(run.threads)
        run.generator.generate(models, batches[0])
    for run in runs:
        run.batch_seconds = [[] for _ in batches]
    for repetition in range(repetitions):
        for run in runs:
            if run.plugin:
                stats = run.generator.restart_stats()
                if repetition == 0:
                    run.stats = stats
        for run, b in timing_order(len(runs), len(batches), repetition, order):
            _decode(runs[run], models, batches[b], b, repetition, device)


# runs: each generator decodes every batch, then the next one, as fairseq-generate decodes a test set;
# batches: each batch by every generator in turn, so every sentence starts cold, after other generators
# ran (OpenMP's worker asleep, the caches holding their data): milliseconds more in its first passes (2-core
# Xeon VM, first 200 LibreOffice sentences: gad 1.46x the plugin's greedy by runs, 1.36x batch by batch)
ORDERS = ("runs", "batches")


def timing_order(runs: int, batches: int, repetition: int, order: str):
    """The (run, batch) pairs of one repetition, in the order they are timed: the generators' order
    rotates with each repetition (``runs``) or each batch (``batches``), so that machine noise hits all
    of them alike."""
    if order == "runs":
        shift = repetition % runs
        return [(run % runs, b) for run in range(shift, shift + runs) for b in range(batches)]
    return [((b + repetition + run) % runs, b) for b in range(batches) for run in range(runs)]


def _decode(run, models, batch, b, repetition, device):
    """One generator's time on batch ``b``; its outputs are kept from the first repetition."""
    if run.threads is not None:
        torch.set_num_threads(run.threads)
    synchronize(device)
    start = time.perf_counter()
    hypos = run.generator.generate(models, batch)
    synchronize(device)
    run.batch_seconds[b].append(time.perf_counter() - start)
    if repetition == 0:
        for sentence_id, sentence_hypos in zip(batch["id"].tolist(), hypos):
            run.tokens[sentence_id] = sentence_hypos[0]["tokens"].tolist()


def profile_modules(runs, models, batches):
    """One untimed pass per plugin run through ``ModuleProfile``: seconds per part, by run name. The
    pass counts into fresh statistics, so the reported ones stay the first timed repetition's."""
    profiles = {}
    for run in runs:
        if run.plugin:
            if run.threads is not None:
                torch.set_num_threads(run.threads)
            run.generator.restart_stats()
            profile = ModuleProfile()
            with profile.installed(run.generator):
                for batch in batches:
                    run.generator.generate(models, batch)
            profiles[run.name] = {part: profile.seconds[part] for part in PARTS}
    return profiles
