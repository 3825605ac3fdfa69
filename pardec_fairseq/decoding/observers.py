"""How tools watch the draft -> verify -> accept loop without changing it.

A tool (the statistics, ``--profile``, DDGviz, a test) appends a ``LoopObserver`` to
``DraftVerifyDecoder.observers``; the loop calls it when a batch starts, after each pass's acceptance,
when rows end and leave, and, for observers that time the loop, hands over each part's time once the
pass is done. Nothing is replaced or wrapped, so what a tool watches is what a
user runs.
"""
import time
from collections import defaultdict
from typing import Dict, List

import torch

# the loop's parts, as the profile reports them (Xia et al. 2022, Table 7)
PARTS = ("drafter", "verifier layers", "vocabulary projection", "acceptance", "engine")


class LoopObserver:
    """What the loop calls; every method is optional (the defaults do nothing)."""

    # True: the loop times its parts for this observer (on a GPU it then waits for each part to finish)
    times_parts = False

    def batch_started(self, rows: int, device: torch.device):
        """A batch of ``rows`` sentences starts, before its encoder runs."""

    def after_pass(self, state, proposal, scores, verdict):
        """After the acceptance, before the cache rolls back and the output advances."""

    def rows_ended(self, state, ended: torch.Tensor):
        """The state's rows ``ended`` (``state.rows[ended]`` in the batch) just finished their output."""

    def keep_rows(self, keep: torch.Tensor):
        """The rows that ended left the state: its rows are now ``keep`` of the ones before."""

    def parts_timed(self, seconds: Dict[str, float]):
        """Seconds per part (``PARTS``) since the last call: the encoder and the drafter's start before
        the first pass, then each pass with its bookkeeping."""


class PartClock:
    """Splits the loop's time into its parts for the observers that ask (``LoopObserver.times_parts``);
    the layers and the projection a pass's scores run on demand (``VerifierScores.lazy_seconds``)
    count as theirs, whichever part asked for them."""

    def __init__(self, observers: List[LoopObserver], device: torch.device):
        self.observers = [observer for observer in observers if observer.times_parts]
        self.device, self.synchronize = device, device.type == "cuda"
        self.seconds: Dict[str, float] = defaultdict(float)
        self.scores = None
        self.last = self._now() if self.observers else 0.0
        self.lazy_before = (0.0, 0.0)

    def _now(self) -> float:
        if self.synchronize:
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def watch(self, scores):
        """The pass's scores, whose on-demand layers and projection are timed apart from the part asking."""
        if self.observers:
            scores.time_with(self._now)
            self.scores, self.lazy_before = scores, scores.lazy_seconds()

    def lap(self, part: str):
        """The time since the last lap was ``part``'s."""
        if not self.observers:
            return
        now = self._now()
        elapsed, self.last = now - self.last, now
        if self.scores is not None:
            layers, projection = self.scores.lazy_seconds()
            ran_layers, ran_projection = layers - self.lazy_before[0], projection - self.lazy_before[1]
            self.lazy_before = (layers, projection)
            self.seconds["verifier layers"] += ran_layers
            self.seconds["vocabulary projection"] += ran_projection
            elapsed -= ran_layers + ran_projection
        self.seconds[part] += elapsed

    def report(self):
        """Hand the parts' time since the last report to the observers."""
        if not self.observers:
            return
        seconds, self.seconds = dict(self.seconds), defaultdict(float)
        for observer in self.observers:
            observer.parts_timed(seconds)
