"""Every run is a row: the tidy table each experiment stage writes beside its cells.

``results/<group>/<name>.csv`` (a stage without a name: ``results/<group>.csv``), one row per run
and reported score, with these columns in this order:

* what identifies the run: ``table`` (our table id, as in the cells), ``dataset``, ``graph``
  (``clean`` or the attacked graph, e.g. ``meta-20``), ``model`` (the cell's model label
  without its grid values), ``variant`` (``paper`` or ``reference`` for TWIRLS, else empty),
  the grid keys of a sweep (``steps``, ``alpha``, ``length``, ... sorted by name), ``split``
  and ``seed``;
* what it measured: ``metric`` (``accuracy``, ``macro_f1``, ``seconds``...), ``value`` (percent
  for scores, as in the cells; seconds for timings), ``best_epoch`` (0-based, the selected
  epoch), ``epochs`` (epochs run), ``seconds`` (the run's training time) and ``device``.

A stage with no data writes no rows (its cells say why). The cells' means and standard
deviations are those of these values (:func:`summary_of`), which a test checks for every
committed stage; ``rerun_diff`` compares the rows run by run.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from twirls import files

IDENTITY = ["table", "dataset", "graph", "model", "variant"]
PER_RUN = ["split", "seed"]
MEASURED = ["metric", "value", "best_epoch", "epochs", "seconds", "device"]


def columns(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The columns of ``rows``: :data:`IDENTITY`, the grid keys (sorted), :data:`PER_RUN`,
    :data:`MEASURED`."""
    fixed = set(IDENTITY + PER_RUN + MEASURED)
    grid = sorted({key for row in rows for key in row} - fixed)
    return [*IDENTITY, *grid, *PER_RUN, *MEASURED]


def selector(identity: Mapping[str, Any], grid: Mapping[str, Any] | None = None
             ) -> dict[str, Any]:
    """What a cell keeps (``extra.rows``) to find its rows: the identity columns beyond table
    and dataset, and the grid point."""
    return {**{k: identity.get(k, "") for k in IDENTITY if k not in ("table", "dataset")},
            **(grid or {})}


def run_rows(result: Any, *, identity: Mapping[str, Any], metric: str,
             splits: Sequence[str], device: str, grid: Mapping[str, Any] | None = None
             ) -> list[dict[str, Any]]:
    """The rows of a :class:`~twirls.train.loop.SeedsResult`: per run, its test score under
    ``metric`` and each further test score (``test_macro_f1`` -> ``macro_f1``), in percent.
    Run ``i`` of split ``splits[j]`` has the seed ``1000 j + s``
    (:func:`twirls.train.experiment.experiment_runs`)."""
    rows = []
    for run in result.runs:
        seed = run.seed
        split = splits[seed // 1000] if seed is not None and len(splits) > 1 else splits[0]
        base = {**{k: identity.get(k, "") for k in IDENTITY}, **(grid or {}),
                "split": split, "seed": seed}
        after = {"best_epoch": run.best_epoch, "epochs": len(run.history) or None,
                 "seconds": run.seconds, "device": device}
        scores = {metric: run.test, **{k[5:]: v for k, v in getattr(run, "extra", {}).items()
                                       if k.startswith("test_")}}
        for name, value in scores.items():
            rows.append({**base, "metric": name, "value": 100 * value, **after})
    return rows


def runs_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """``rows`` as CSV text in :func:`columns` order (floats exact: ``repr``; None empty)."""
    cols = columns(rows)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _text(row.get(k)) for k in cols})
    return buf.getvalue()


def write_runs(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """:func:`runs_text` of ``rows`` to ``path``, atomically."""
    files.write_text(path, runs_text(rows))


def read_runs(path: Path) -> list[dict[str, Any]]:
    """The rows of a runs file, each value as written (text; empty for none)."""
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return repr(value) if isinstance(value, float) else str(value)


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
    return str(value) == _text(wanted)


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
