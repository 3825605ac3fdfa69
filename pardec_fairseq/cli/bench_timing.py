"""Timing the benchmark's generators: repetitions over the same batches, the generators' order rotated,
and the profile's untimed pass."""
import time

import torch

from pardec_fairseq.cli.module_profile import ModuleProfile
from pardec_fairseq.decoding.observers import PARTS


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def decode_all(runs, models, batches, repetitions, device, order, chunk_batches=1):
    """Time every generator on every batch, in ``order`` (``ORDERS``; ``chunks`` of ``chunk_batches``),
    rotating which generator goes first. Outputs and plugin statistics are kept from the first timed
    repetition."""
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
        for run, b in timing_order(len(runs), len(batches), repetition, order, chunk_batches):
            _decode(runs[run], models, batches[b], b, repetition, device)


# runs: each generator decodes every batch, then the next one, as fairseq-generate decodes a test set;
# batches: each batch by every generator in turn, so every sentence starts cold, after other generators
# ran (OpenMP's worker asleep, the caches holding their data): milliseconds more in its first passes (2-core
# Xeon VM, first 200 LibreOffice sentences: gad 1.46x the plugin's greedy by runs, 1.36x batch by batch);
# chunks (the default): each chunk of ``chunk_batches`` batches by every generator in turn, as runs within a
# chunk, so that a shared machine's load, which drifts over minutes, hits every generator alike while only a
# chunk's first batch starts cold (Zen 4 VM, 2026-12-02, all 1,120 LibreOffice sentences: by runs, plugin
# greedy 1.47 and 0.99 ms a token in two runs an hour apart, gad 0.89 and 0.85, so 1.66x and 1.16x; by chunks
# of 50, 1.47x and 1.40x, each run's two repetitions within 0.02x of each other)
ORDERS = ("runs", "batches", "chunks")


def timing_order(runs: int, batches: int, repetition: int, order: str, chunk_batches: int = 1):
    """The (run, batch) pairs of one repetition, in the order they are timed: the generators' order
    rotates with each repetition (``runs``), each batch (``batches``) or each chunk of ``chunk_batches``
    batches (``chunks``), so that machine noise hits all of them alike: ``runs`` is one chunk of every
    batch, ``batches`` chunks of one."""
    chunk_batches = {"runs": max(batches, 1), "batches": 1}.get(order, chunk_batches)
    starts = range(0, batches, chunk_batches)
    return [((chunk + repetition + run) % runs, b) for chunk, start in enumerate(starts) for run in range(runs)
            for b in range(start, min(start + chunk_batches, batches))]


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
