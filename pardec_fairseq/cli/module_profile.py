"""Where a plugin generator's time goes, part by part (Xia et al. 2022, Table 7).

For one untimed pass the benchmark routes the calls of a generator's drafter, verifier, the
verifier's lazy projection onto the vocabulary and its acceptance rule through timers that keep each
part's exclusive time (a part's nested parts are not counted twice); what is left of the
generator's time is the engine's bookkeeping. The timers sit on the instances only while profiling.
"""
import time
from collections import defaultdict
from contextlib import contextmanager

import torch

PARTS = ("drafter", "verifier layers", "vocabulary projection", "acceptance", "engine")


class ModuleProfile:
    def __init__(self, device):
        self.device = device
        self.seconds = defaultdict(float)
        self._nested = []  # per open timed call: seconds spent in timed calls inside it
        self._wrapped = []

    def _synchronize(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def wrap(self, obj, method, part, on_result=None, restore=True):
        """Time ``obj.method`` as ``part`` (until ``restore`` unless told not to: objects made per
        call are left to go away); ``on_result`` sees what it returns."""
        original = getattr(obj, method)

        def timed(*args, **kwargs):
            self._synchronize()
            start = time.perf_counter()
            self._nested.append(0.0)
            try:
                result = original(*args, **kwargs)
                self._synchronize()
            finally:
                elapsed = time.perf_counter() - start
                self.seconds[part] += elapsed - self._nested.pop()
                if self._nested:
                    self._nested[-1] += elapsed
            if on_result is not None:
                on_result(result)
            return result

        setattr(obj, method, timed)
        if restore:
            self._wrapped.append((obj, method))

    def restore(self):
        for obj, method in self._wrapped:
            delattr(obj, method)  # the class's method shows through again
        self._wrapped = []

    @contextmanager
    def installed(self, generator):
        """Time the parts of a ``ParallelDecodingGenerator``; ``generate`` itself is the total."""
        decoder = generator.decoder

        def time_projection(scores):
            for method in ("span", "all"):
                self.wrap(scores, method, "vocabulary projection", restore=False)
            # the layers a pass runs on demand, as its scores are read
            self.wrap(scores, "features_through", "verifier layers", restore=False)

        for method in ("begin", "propose", "update", "keep_rows"):
            self.wrap(decoder.drafter, method, "drafter")
        for method in ("start", "rollback", "keep_rows"):
            self.wrap(generator.verifier, method, "verifier layers")
        self.wrap(generator.verifier, "score", "verifier layers", on_result=time_projection)
        self.wrap(decoder.acceptance, "accept", "acceptance")
        self.wrap(generator, "generate", "engine")
        try:
            yield self
        finally:
            self.restore()
