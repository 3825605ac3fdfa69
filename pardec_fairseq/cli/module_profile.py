"""Where a plugin generator's time goes, part by part (Xia et al. 2022, Table 7).

An observer of the decoding loop (``decoding.observers``): for one untimed pass the benchmark adds it
to a generator's loop, which then times its parts (drafter, verifier layers, the lazy projection onto
the vocabulary, acceptance, the engine's bookkeeping) and reports each pass's seconds to it.
"""
from collections import defaultdict
from contextlib import contextmanager

from pardec_fairseq.decoding.observers import LoopObserver


class ModuleProfile(LoopObserver):
    """Seconds per part (``PARTS``), summed over every pass it watched."""

    times_parts = True

    def __init__(self):
        self.seconds = defaultdict(float)

    def parts_timed(self, seconds):
        for part, elapsed in seconds.items():
            self.seconds[part] += elapsed

    @contextmanager
    def installed(self, generator):
        """Watch a ``ParallelDecodingGenerator``'s loop while the block runs."""
        observers = generator.decoder.observers
        observers.append(self)
        try:
            yield self
        finally:
            observers.remove(self)
