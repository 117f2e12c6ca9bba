"""How long a stage's runs would take on the device it got, measured before they start.

A stage hands :func:`check_budget` its planned runs (``functools.partial`` objects of
:func:`twirls.train.loop.seed_run`). One run of each distinct model and training config is probed
for a single epoch (model build, one training step and one evaluation: a slight over-estimate of
an epoch), twice, and the faster probe counts: the first run of a process pays one-time costs
(lazy imports, kernel selection) that no later epoch pays, ~2 s on a CPU, which over the 5,000
epochs of a Geom-GCN run would read as hours. The estimate is those seconds times the epochs
every run may train (``epochs``, the upper bound when ``patience`` stops runs earlier), divided
over the stage's worker processes.
Above ``budget_hours`` (``params.yaml``) the stage skips its runs: the user reads the estimate and
how to run it on a GPU, and the stage's cells say why they are missing. A probe run is seeded like
every run, so it does not change what the runs that follow compute.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import torch

#: what a skipped stage tells the user (and its cells' notes)
SKIPPED = ("skipped: {stage} would take ~{hours:.3g} h on {device} ({runs} runs of up to {epochs} "
           "epochs, {per_epoch} per epoch measured here), over budget_hours = {budget:g} in "
           "params.yaml. Run it where a CUDA GPU is (`device: auto` uses it; docs/gpu.md), or "
           "allow it here with `dvc exp run -S budget_hours={allow}`; a workspace that skipped "
           "it reruns it with `dvc repro -f -s {stage}`")


#: what a stage that fits its budget but takes a while says before it starts
LONG = ("{stage}: ~{hours:.3g} h estimated on {device} ({runs} runs of up to {epochs} epochs, "
        "{per_epoch} per epoch; budget_hours = {budget:g})")
LONG_HOURS = 0.25  # estimates above this are announced


class OverBudget(Exception):
    """A stage's estimate exceeds its budget; ``str(exc)`` is the message for the user."""


@dataclass(frozen=True)
class Estimate:
    """Seconds per epoch of each probed configuration and the stage's total, in hours."""

    hours: float
    runs: int
    max_epochs: int
    seconds_per_epoch: tuple[float, ...]

    def per_epoch_text(self) -> str:
        lo, hi = min(self.seconds_per_epoch), max(self.seconds_per_epoch)
        return f"{lo:.3g} s" if hi - lo < 0.05 * hi else f"{lo:.3g}-{hi:.3g} s"


def probe_seconds(run: partial, tries: int = 2) -> float:
    """Wall seconds of ``run`` (a ``seed_run`` partial) cut to one epoch, without patience or
    progress bar: the fastest of ``tries`` (the first may pay the process's one-time costs)."""
    args = list(run.args)
    cfg = args[5]
    args[5] = replace(cfg, epochs=1, patience=None, progress=False)
    seconds = []
    for _ in range(tries):
        start = time.perf_counter()
        run.func(*args, **run.keywords)  # its scores are read back to the host: no sync needed
        seconds.append(time.perf_counter() - start)
    return min(seconds)


def estimate(runs: Sequence[partial], jobs: int,
             probe: Callable[[partial], float] = probe_seconds) -> Estimate:
    """The stage's hours: one probe per distinct (model builder, training config) among
    ``runs``, times each run's epochs, shared by ``min(jobs, len(runs))`` workers."""
    seconds: dict[tuple[Any, ...], float] = {}
    total = 0.0
    for run in runs:
        key = _config_key(run)
        if key not in seconds:
            seconds[key] = probe(run)
        total += seconds[key] * run.args[5].epochs
    workers = max(1, min(jobs, len(runs)))
    return Estimate(hours=total / workers / 3600, runs=len(runs),
                    max_epochs=max((r.args[5].epochs for r in runs), default=0),
                    seconds_per_epoch=tuple(seconds.values()) or (0.0,))


def check_budget(stage: str, runs: Sequence[partial], jobs: int, device: torch.device,
                 budget_hours: float,
                 probe: Callable[[partial], float] = probe_seconds) -> Estimate:
    """:func:`estimate` of ``runs``; raise :class:`OverBudget` (the user's message) when it is
    over ``budget_hours``, and say the estimate on stderr when it is over :data:`LONG_HOURS`."""
    est = estimate(runs, jobs, probe)
    words = {"stage": stage, "hours": est.hours, "runs": est.runs, "epochs": est.max_epochs,
             "device": "this CPU" if device.type == "cpu" else f"this {device.type} device",
             "per_epoch": est.per_epoch_text(), "budget": budget_hours}
    if est.hours > budget_hours:
        raise OverBudget(SKIPPED.format(**words, allow=math.ceil(1.2 * est.hours)))
    if est.hours > LONG_HOURS:
        print(LONG.format(**words), file=sys.stderr)
    return est


def _config_key(run: partial) -> tuple[Any, ...]:
    """Runs that share a model builder and a training config cost the same per epoch (seeds and
    splits differ only in their numbers)."""
    build, cfg = run.args[0], run.args[5]
    build_key = ((build.func, build.args, repr(sorted(build.keywords.items())))
                 if isinstance(build, partial) else build)
    return (repr(build_key), replace(cfg, progress=False, epochs=0, patience=None))

