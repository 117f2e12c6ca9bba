"""The ``energy`` stage's files: ``results/energy/<dataset>.json`` (every trace and check of
:func:`twirls.reports.energy_measure.measure`, and the measured model), ``metrics/energy/
<dataset>.json`` (its scalars for ``dvc metrics``, flags as 0/1, and the timings) and
``reports/figures/energy-per-step-<dataset>.png`` (:mod:`twirls.reports.energy_figure`).

The report depends on ``results/``, so the results file holds no timing: a rerun that computes
the same traces writes the same bytes, and nothing downstream reruns. Seconds go to the metrics.

JSON policy: strict JSON, so non-finite floats are written as strings (``"inf"``, ``"nan"``);
without data all three files say why (``status: no-data`` and the reason).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twirls.reports.energy_figure import plot_energy, title_for
from twirls.train.outputs import write_json_without_nan, write_metrics

#: trace name -> prefix of its entries in the metrics file
METRIC_PREFIX = {"twirls-base": "base", "irls-every": "every", "twirls-middle": "middle"}


def output_paths(out: Path, dataset: str) -> dict[str, Path]:
    """The three files under ``out`` (the repository root in the pipeline)."""
    return {"results": out / "results" / "energy" / f"{dataset}.json",
            "metrics": out / "metrics" / "energy" / f"{dataset}.json",
            "figure": out / "reports" / "figures" / f"energy-per-step-{dataset}.png"}


def jsonable(obj: Any) -> Any:
    """``obj`` with non-finite floats as strings (``"inf"``, ``"nan"``): strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, Mapping):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    return obj


def energy_metrics(result: Mapping[str, Any]) -> dict[str, Any]:
    """The scalars for ``dvc metrics`` (flags as 0/1)."""
    curves = result["curves"]
    out: dict[str, Any] = {"status": "ok",
                           "closed_form_energy": result["closed_form"]["energy"],
                           "base_final_relative_gap": result["closed_form"]["final_relative_gap"],
                           "lemma33_bound_unweighted": result["lemma33"]["bound_unweighted"],
                           "lemma33_bound_gamma_max": result["lemma33"]["bound_gamma_max"],
                           "test_accuracy_last": result["model"]["test_last"]}
    for name, c in curves.items():
        prefix = METRIC_PREFIX[name]
        out[f"{prefix}_final_energy"] = c["final"]
        out[f"{prefix}_max_relative_increase"] = c["max_relative_increase"]
        out[f"{prefix}_monotone"] = int(c["monotone"])
    middle = curves["twirls-middle"]
    if "monotone_after_attention" in middle:
        out["middle_max_relative_increase_after_attention"] = middle[
            "max_relative_increase_after_attention"]
        out["middle_monotone_after_attention"] = int(middle["monotone_after_attention"])
    return jsonable(out)


def write_energy(out: Path, result: Mapping[str, Any], device: str = "cpu") -> dict[str, Path]:
    """Write the three files for ``result`` (``status`` ``ok``, or ``no-data`` with a
    ``reason``) under ``out``; ``device``: where the measured model was trained (metrics)."""
    paths = output_paths(out, result["dataset"])
    title = title_for(result["dataset"])
    if result["status"] != "ok":
        write_json_without_nan(paths["results"], dict(result))
        write_metrics(paths["metrics"], {"status": result["status"], "reason": result["reason"]})
        plot_energy(result, paths["figure"], title, reason=result["reason"])
        return paths
    measured, seconds = split_timings(result)
    write_json_without_nan(paths["results"], jsonable(measured))
    write_metrics(paths["metrics"], {**energy_metrics(result), "device": device, **seconds})
    plot_energy(result, paths["figure"], title)
    return paths


def split_timings(result: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``result`` without its wall times, and those times (``seconds_measure``: every trace and
    check together)."""
    measured = {k: v for k, v in result.items() if k != "seconds"}
    measure = sum((result.get("seconds") or {}).values())
    return measured, {"seconds_measure": round(measure, 3)}


def summary_line(result: Mapping[str, Any]) -> str:
    """One line for the stage's log."""
    if result["status"] != "ok":
        return f"energy: no data ({result['reason']})"
    parts = [f"{n}: final {c['final']:.6g}, max rel. increase {c['max_relative_increase']:.2e}"
             for n, c in result["curves"].items()]
    gap = result["closed_form"]["final_relative_gap"]
    return "energy: " + "; ".join(parts) + f"; eq. 1 vs closed form: relative gap {gap:.2e}"
