"""Soak: decoding 10,000 sentences in one process keeps the resident memory flat, for every
algorithm (a leak of a few kilobytes per batch, e.g. a cache or a tensor kept per pass, adds up
to tens of megabytes over 313 batches). The random model never ends early, so every sentence runs
to the length limit (13 tokens) through the whole loop."""
import argparse
import os
import random

import numpy as np
import pytest
import torch

from pardec_fairseq.decoding import DecodingConfig, build_generator
from pardec_fairseq.decoding.acceptance import build_gad_plus_plus_acceptance
from pardec_fairseq.decoding.drafters.block_nat import NATBlockDrafter
from pardec_fairseq.decoding.drafters.retrieval import RetrievalDrafter, SuffixIndex
from test_block_nat import build_block_nat
from test_lossless_matches_fairseq import GENERATION_DEFAULTS, model_for
from test_retrieval import corpus
from tiny import make_batch, make_dictionary

SENTENCES, WARM_UP, BATCH = 10_000, 2_000, 32
ALLOWED_GROWTH_MB = 4  # measured: at most +0.1 MB for every algorithm


def resident_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def drafter_and_acceptance(algorithm, dictionary):
    """What the algorithms that need a trained model or a corpus draft with here: an untrained
    ``block_nat`` drafter (gad, gad++) and a corpus of random sentences (retrieval)."""
    if algorithm in ("gad", "gad++"):
        drafter = NATBlockDrafter(build_block_nat(dictionary, seed=1).eval(), 5, dictionary, 0)
        acceptance = build_gad_plus_plus_acceptance(DecodingConfig()) if algorithm == "gad++" else None
        return drafter, acceptance
    if algorithm == "retrieval":
        generator = np.random.default_rng(0)
        text = corpus(*(generator.integers(4, 24, size=8).tolist() for _ in range(200)))
        return RetrievalDrafter(SuffixIndex.build(text, 8), dictionary.eos(), dictionary.pad(), 8, 8, 256), None
    return None, None


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident memory from /proc")
@pytest.mark.parametrize("algorithm", ["greedy", "iad", "jacobi", "gs-jacobi", "hybrid-jacobi", "bpd", "gad", "gad++",
                                       "lookahead", "retrieval"])
def test_decoding_ten_thousand_sentences_keeps_memory_flat(algorithm):
    dictionary = make_dictionary(20)
    model = model_for(algorithm, dictionary, seed=3, layers=1, embed_dim=16).eval()
    generation = argparse.Namespace(**dict(GENERATION_DEFAULTS, max_len_b=12))
    drafter, acceptance = drafter_and_acceptance(algorithm, dictionary)
    generator = build_generator("greedy" if algorithm in ("gad", "gad++", "retrieval") else algorithm, [model],
                                dictionary, generation, DecodingConfig(), drafter=drafter, acceptance=acceptance)
    rng = random.Random(0)
    batches = [make_batch(dictionary, [[rng.randrange(4, 24) for _ in range(rng.randint(1, 12))]
                                       for _ in range(BATCH)]) for _ in range(8)]
    decoded, after_warm_up = 0, None
    with torch.no_grad():
        while decoded < SENTENCES:
            if after_warm_up is None and decoded >= WARM_UP:
                after_warm_up = resident_mb()
            # through the engine, as fairseq-generate's calls do, without the generator's per-sentence
            # statistics (records kept on purpose, about 100 bytes a sentence)
            outputs = generator.decoder.decode(batches[(decoded // BATCH) % len(batches)])
            assert len(outputs) == BATCH and all(o is not None for o in outputs)
            decoded += BATCH
    growth = resident_mb() - after_warm_up
    print(f"{algorithm}: resident memory {after_warm_up:.0f} MB after {WARM_UP:,} sentences, {growth:+.1f} MB after "
          f"{decoded:,}")
    assert growth < ALLOWED_GROWTH_MB, f"{algorithm}: resident memory grew {growth:.1f} MB over 8,000 sentences"
