"""Sweep points as data: ours from ``metrics/<sweep>.json``, the paper's from
``paper_numbers.csv`` (Table 8's grid) and ``paper_figures.yaml`` (values the paper states in
its text for a figure, e.g. Chains: 100% at every length).

A point is ``{"curve": str, "point": {grid key: value}, "mean": float}``; a paper value with an
empty ``point`` is a level the paper states for every x (drawn as a horizontal line).
"""

from __future__ import annotations

import ast
import json
import re
import statistics
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from twirls.reports.runs import IDENTITY, MEASURED, PER_RUN, read_runs

PAPER_FIGURES = Path(__file__).with_name("paper_figures.yaml")
POINT_KEY = re.compile(r"^(?P<curve>.*) (?P<point>\{.*\})$")


def read_sweep_points(runs: Path, metrics: Path | None = None) -> list[dict[str, Any]]:
    """Our points of a sweep: from its rows (``results/<sweep>.csv``, :mod:`twirls.reports.runs`)
    the mean of each curve's runs at each grid point, in the sweep's first metric; a point is
    the curve's grid values, with ``split`` when the sweep's runs span several splits (a data
    grid over label ratios). Outputs from before the rows existed: the means of the metrics file
    (keys ``"<curve> {'steps': 16}"``). [] when neither exists or the sweep had no data."""
    if runs.exists():
        rows = read_runs(runs)
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
    if metrics is None or not metrics.exists():
        return []
    points = json.loads(metrics.read_text()).get("points") or {}
    out = []
    for key, mean in points.items():
        m = POINT_KEY.match(key)
        if not m:
            raise ValueError(f"{metrics}: point {key!r} is not '<curve> {{grid values}}'")
        out.append({"curve": m["curve"], "point": ast.literal_eval(m["point"]),
                    "mean": float(mean)})
    return out


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
