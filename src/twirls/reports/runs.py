"""Reading the runs files (:mod:`twirls.cells`: one row per run and reported score): the rows
behind each cell, and their summary.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from twirls.cells import csv_value


def read_runs(path: Path) -> list[dict[str, Any]]:
    """The rows of a runs file, each value as written (text; empty for none)."""
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


#: metrics whose cell is the median of its rows (Table 11's timings, one parameter count)
MEDIAN_METRICS = {"train_seconds", "test_seconds", "parameters"}


def rows_of_cell(cell: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]
                 ) -> list[Mapping[str, Any]]:
    """The rows behind ``cell``: its table, dataset and metric, and the column values of its
    ``extra.rows`` (the model, graph, variant and grid point of its runs)."""
    want = {"table": cell["table"], "dataset": cell["dataset"], "metric": cell["metric"],
            **((cell.get("extra") or {}).get("rows") or {})}
    return [row for row in rows if all(_same(row.get(k), v) for k, v in want.items())]


def _same(value: Any, wanted: Any) -> bool:
    """A column value (as written, or read back from the CSV as text) equals ``wanted``."""
    if value == wanted:
        return True
    if value is None or wanted is None:
        return False
    return str(value) == csv_value(wanted)


def summary_of(cell: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]
               ) -> tuple[float, float, int]:
    """``(mean, std, runs)`` of ``cell`` from its rows: mean (Table 11's timings: median) and
    population standard deviation of their values."""
    values = [float(row["value"]) for row in rows_of_cell(cell, rows)]
    if not values:
        return math.nan, math.nan, 0
    centre = statistics.median if cell["metric"] in MEDIAN_METRICS else statistics.fmean
    return centre(values), statistics.pstdev(values), len(values)


def unmatched_cells(cells: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]
                    ) -> list[str]:
    """The cells (with runs) of a stage whose rows (:func:`rows_of_cell`) are not exactly its
    runs: another count, or another mean. Empty when the rows hold every cell's runs."""
    missing = []
    for cell in cells:
        if not cell.get("runs") or cell.get("mean") is None:
            continue
        mean, _, runs = summary_of(cell, rows)
        if runs != cell["runs"] or not math.isclose(mean, cell["mean"], rel_tol=1e-9,
                                                      abs_tol=1e-9):
            missing.append(f"{cell['table']} / {cell['dataset']} / {cell['model']} / "
                           f"{cell['metric']}")
    return missing
