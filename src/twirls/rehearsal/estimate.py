"""From a stage's runs at two epoch budgets to seconds per epoch and the cost of its real run.

A stage run with budget ``E`` takes ``wall(E) = overhead + E x runs x t_epoch`` (``runs``: seeds
x grid points, 1 in the rehearsal except for sweeps, and one per model for ``table12``), so two
budgets give ``t_epoch`` and the fixed overhead (start-up, params, loading and building the
full-size graph, writing outputs). Where the stage times its own epochs (``<group>@<name>`` of a
train-kind group such as ``table2``: the training loop's seconds per run in its metrics;
``table11``: every model's epoch; ``table12``: every model's seconds per run), those in-process
times replace the wall-clock difference, which on a shared machine picks up noise from the
loading. The real run then costs ``overhead + t_epoch x epochs x runs`` with the real
``params.yaml``'s epochs, seeds and grid: an upper bound where ``patience`` may stop runs early.
The same is done with the CPU seconds of the stage's process, which other jobs on a shared
machine do not inflate.
"""

from __future__ import annotations

import statistics
from typing import Any

from twirls.rehearsal.plan import StagePlan

GB = 1e9


def significant(seconds: float, digits: int = 4) -> float:
    """``seconds`` to ``digits`` significant figures (an epoch of a tiny graph takes 1e-5 s: a
    fixed number of decimals would round it to 0)."""
    return float(f"{seconds:.{digits}g}")


def cws_seconds(metrics: dict[str, Any]) -> float | None:
    """Stage ``table12``'s training seconds of one seed of every model (the sum of the models'
    ``seconds_mean`` in ``metrics/table12.json``), or None if it reports none."""
    seconds = [m.get("seconds_mean") for m in (metrics.get("models") or {}).values()]
    if not seconds or not all(isinstance(s, (int, float)) for s in seconds):
        return None
    return float(sum(seconds))


def per_run_epoch_from_cws(plan: StagePlan, metrics: dict[int, dict[str, Any]]
                           ) -> tuple[float | None, str]:
    """Seconds of one model's epoch (``cws``: one budget epoch = an epoch of each of the
    ``runs_per_epoch`` models), from the models' own training seconds."""
    budgets = sorted(metrics)
    lo, hi = budgets[0], budgets[-1]
    seconds = {b: cws_seconds(metrics[b]) for b in (lo, hi)}
    if any(s is None for s in seconds.values()):
        return None, ""
    runs = max(plan.runs_per_epoch, 1)
    source = (f"training seconds per run of the {runs} models (metrics/{plan.group}.json), "
              "summed and divided by the models")
    if hi > lo and seconds[hi] > seconds[lo]:
        return ((seconds[hi] - seconds[lo]) / ((hi - lo) * runs),
                f"{source}, difference between the {lo}- and {hi}-epoch runs")
    return seconds[hi] / (hi * runs), (f"{source}: the {hi}-epoch run alone, first epoch and "
                                       "evaluation included (a slight upper bound)")


def per_epoch_from_metrics(plan: StagePlan, metrics: dict[int, dict[str, Any]]
                           ) -> tuple[float | None, str]:
    """Seconds per budget epoch and run from the stage's own timers, and how it was obtained."""
    budgets = sorted(metrics)
    if plan.kind == "cws" and budgets:
        return per_run_epoch_from_cws(plan, metrics)
    if plan.kind == "train" and budgets:
        lo, hi = budgets[0], budgets[-1]
        seconds = {b: metrics[b].get("seconds_mean") for b in (lo, hi)}
        if all(isinstance(s, (int, float)) for s in seconds.values()):
            source = f"training-loop seconds per run from metrics/{plan.group}/{plan.name}.json"
            if hi == lo:
                return seconds[hi] / hi, (f"{source}: the {hi}-epoch run alone, first epoch "
                                          "included (a slight upper bound)")
            value = (seconds[hi] - seconds[lo]) / (hi - lo)
            if value > 0:
                return value, f"{source}, difference between the {lo}- and {hi}-epoch runs"
            return seconds[hi] / hi, (f"{source}: the {hi}-epoch run's mean, first epoch "
                                      f"included (the {lo}/{hi} difference was <= 0, noise)")
    if plan.kind == "timing" and budgets:
        models = metrics[budgets[-1]].get("models") or []
        samples = [m["train_seconds_all"] for m in models if m.get("train_seconds_all")]
        if samples:
            warm = [statistics.median(s[1:] if len(s) > 1 else s) for s in samples]
            return sum(warm), ("sum over the models of the stage's own median training-epoch "
                               f"seconds (metrics/{plan.group}.json), first round left out when "
                               "there are more")
    return None, ""


#: below this wall-clock difference between budgets, start-up noise (imports, params) swamps
#: the CPU-time difference of the extra epochs
NOISE_SECONDS = 2.0


def cpu_estimate(plan: StagePlan, walls: dict[int, float], cpus: dict[int, float],
                 rate: float) -> dict[str, Any]:
    """The same extrapolation in CPU seconds (user + system of the stage's process), which
    other jobs on a shared machine do not inflate: for a one-thread stage, the wall time it
    would take on an idle core (with ``t`` threads, up to ``t`` times less). Where the extra
    epochs cost less than :data:`NOISE_SECONDS` (or there is one budget), the stage's seconds
    per epoch ``rate`` scaled by the run's CPU share instead."""
    budgets = sorted(cpus)
    lo, hi = budgets[0], budgets[-1]
    runs = max(plan.runs_per_epoch, 1)
    if hi > lo and walls[hi] - walls[lo] >= NOISE_SECONDS and cpus[hi] > cpus[lo]:
        cpu_rate = (cpus[hi] - cpus[lo]) / ((hi - lo) * runs)
        method = f"CPU-time difference between the {lo}- and {hi}-epoch runs"
    else:
        cpu_rate = rate * cpus[hi] / walls[hi] if walls[hi] > 0 else 0.0
        method = (f"seconds per epoch x the {hi}-epoch run's CPU share "
                  f"({cpus[hi]:.1f} CPU s / {walls[hi]:.1f} s)")
    overhead = max(cpus[hi] - cpu_rate * hi * runs, 0.0)
    total = overhead + cpu_rate * plan.full["epochs"] * plan.full["runs"]
    return {"cpu_seconds_per_epoch": significant(cpu_rate),
            "cpu_overhead_seconds": round(overhead, 2), "cpu_method": method,
            "estimated_cpu_seconds": round(total, 1),
            "estimated_cpu_hours": round(total / 3600, 2)}


def stage_record(plan: StagePlan, walls: dict[int, float], metrics: dict[int, dict[str, Any]],
                 cpus: dict[int, float] | None = None) -> dict[str, Any]:
    """Seconds per epoch, overhead and the real run's estimated cost of one stage; with
    ``cpus`` (CPU seconds per budget) also the CPU-time version (:func:`cpu_estimate`)."""
    if not plan.has_epochs or not walls:
        wall = round(max(walls.values()), 2) if walls else None
        return {"seconds_per_epoch": None, "seconds_per_epoch_wall": None,
                "overhead_seconds": wall, "per_epoch_method": "no epochs (loading only)",
                "full_run": {**plan.full, "estimated_seconds": wall,
                             "note": "one pass over the files; the measured run is the real one"}}
    budgets = sorted(walls)
    lo, hi = budgets[0], budgets[-1]
    runs = max(plan.runs_per_epoch, 1)
    wall_rate = (walls[hi] - walls[lo]) / ((hi - lo) * runs) if hi > lo else None
    rate, method = per_epoch_from_metrics(plan, metrics)
    if rate is None:
        rate = max(wall_rate or 0.0, 0.0)
        method = (f"wall-clock difference between the {lo}- and {hi}-epoch runs, divided by "
                  f"{runs} run(s) per epoch")
        if rate == 0.0:
            method += " (<= 0: epochs too cheap to measure against the noise; counted as 0)"
    overhead = max(walls[hi] - rate * hi * runs, 0.0)
    full = dict(plan.full)
    estimate = overhead + rate * full["epochs"] * full["runs"]
    full["estimated_seconds"] = round(estimate, 1)
    full["estimated_hours"] = round(estimate / 3600, 2)
    if full.get("patience"):
        full["note"] = (f"upper bound: patience {full['patience']} may stop runs before "
                        f"{full['epochs']} epochs")
    record = {"seconds_per_epoch": significant(rate),
              "seconds_per_epoch_wall": None if wall_rate is None else significant(wall_rate),
              "overhead_seconds": round(overhead, 2), "per_epoch_method": method}
    if cpus and set(cpus) == set(walls):
        cpu = cpu_estimate(plan, walls, cpus, rate)
        full["estimated_cpu_seconds"] = cpu.pop("estimated_cpu_seconds")
        full["estimated_cpu_hours"] = cpu.pop("estimated_cpu_hours")
        record.update(cpu)
    record["full_run"] = full
    return record
