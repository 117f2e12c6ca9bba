"""Sweep points as data: ours from ``results/<sweep>.csv`` (the sweep's rows), the paper's from
``paper_numbers.csv`` (Table 8's grid) and ``paper_figures.yaml`` (values the paper states in
its text for a figure, e.g. Chains: 100% at every length).

A point is ``{"curve": str, "point": {grid key: value}, "mean": float}``; a paper value with an
empty ``point`` is a level the paper states for every x (drawn as a horizontal line).
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from twirls.cells import IDENTITY, MEASURED, PER_RUN
from twirls.reports.runs import read_runs

PAPER_FIGURES = Path(__file__).with_name("paper_figures.yaml")


def read_sweep_points(runs: Path) -> list[dict[str, Any]]:
    """Our points of a sweep, from its rows (``results/<sweep>.csv``,
    :mod:`twirls.cells`): the mean of each curve's runs at each grid point, in the
    sweep's first metric; a point is the curve's grid values, with ``split`` when the sweep's
    runs span several splits (a data grid over label ratios). [] when the sweep has no rows
    (not run, or no data)."""
    rows = read_runs(runs) if runs.exists() else []
    if not rows:
        return []
    metric = rows[0]["metric"]
    several_splits = len({row["split"] for row in rows}) > 1
    fixed = set(IDENTITY) | set(PER_RUN) | set(MEASURED)
    groups: dict[tuple, list[float]] = {}
    for row in rows:
        if row["metric"] != metric:
            continue
        point = {k: _value(v) for k, v in row.items() if k not in fixed and v != ""}
        if several_splits:
            point["split"] = _value(row["split"])
        key = (row["model"], tuple(point.items()))
        groups.setdefault(key, []).append(float(row["value"]))
    return [{"curve": curve, "point": dict(point), "mean": statistics.fmean(values)}
            for (curve, point), values in groups.items()]


def _value(text: str) -> Any:
    """A grid value as written in a rows file: an int, a float, or the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _label_pattern(template: str, curve: str) -> re.Pattern:
    """``"TWIRLS-base[S={steps},alpha={alpha}]"`` -> a regex with one group per grid key."""
    parts = re.split(r"\{(\w+)\}", template)
    regex = ""
    for i, part in enumerate(parts):
        if i % 2 == 0:
            regex += re.escape(part)
        else:
            regex += re.escape(curve) if part == "curve" else rf"(?P<{part}>[^,\]]+)"
    return re.compile(f"^{regex}$")


def _number(text: str) -> Any:
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and "." not in text else value


def paper_points(name: str, sweep: dict[str, Any], paper: pd.DataFrame,
                 figures: Path = PAPER_FIGURES) -> list[dict[str, Any]]:
    """The paper's values for sweep ``name``: its table's cells (labels parsed with the sweep's
    ``label`` template, one curve at a time), then the levels ``paper_figures.yaml`` states."""
    out: list[dict[str, Any]] = []
    if "table" in sweep:
        rows = paper[(paper["table"] == sweep["table"])
                     & (paper["dataset"] == sweep.get("dataset", ""))]
        for curve, spec in (sweep.get("curves") or {}).items():
            if (spec or {}).get("table", sweep["table"]) != sweep["table"]:
                continue  # a curve reported in a table of its own: the paper has no values
            pattern = _label_pattern(sweep.get("label", "{curve}"), curve)
            for model, mean in zip(rows["model"], rows["mean"], strict=True):
                m = pattern.match(str(model))
                if m:
                    point = {k: _number(v) for k, v in m.groupdict().items()}
                    out.append({"curve": curve, "point": point, "mean": float(mean)})
    stated = (yaml.safe_load(figures.read_text()) or {}) if figures.exists() else {}
    for entry in stated.get(name) or []:
        out.append({"curve": str(entry["curve"]), "point": dict(entry.get("point") or {}),
                    "mean": float(entry["value"]), "source": str(entry.get("source", ""))})
    return out
