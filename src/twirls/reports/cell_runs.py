"""Each cell's runs by ``(split, seed)``, for the claims' comparisons split by split
(:mod:`twirls.reports.claims`): read from the stage's runs file when first asked for."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twirls.reports.claims import RunScores
from twirls.reports.runs import read_runs, rows_of_cell


class CellRuns:
    """Each cell's runs by ``(split, seed)``, read from its stage's runs file when first asked
    for (the claims' paired comparisons, :mod:`twirls.reports.claims`, need only a few)."""

    def __init__(self) -> None:
        self._where: dict[tuple[str, str, str, str], tuple[Path, Mapping[str, Any]]] = {}
        self._rows: dict[Path, list[dict[str, Any]]] = {}

    def add(self, key: tuple[str, str, str, str], runs_file: Path,
            cell: Mapping[str, Any]) -> None:
        """``key`` (table, dataset, model, metric as the report names the cell) has the runs of
        ``cell`` (as its stage wrote it) in ``runs_file``."""
        self._where[key] = (runs_file, cell)

    def __call__(self, table: str, dataset: str, model: str,
                 metric: str) -> RunScores | None:
        """``{(split, seed): score}`` of one cell; None when unknown or when two of its runs
        share a split and seed."""
        found = self._where.get((table, dataset, model, metric))
        if found is None:
            return None
        path, cell = found
        if path not in self._rows:
            self._rows[path] = read_runs(path) if path.exists() else []
        rows = rows_of_cell(cell, self._rows[path])
        scores = {(str(r.get("split") or ""), str(r.get("seed") or "")): float(r["value"])
                  for r in rows}
        return scores if rows and len(scores) == len(rows) else None
