"""What an experiment stage writes for the report: its *cells* and its *runs*.

The report stage (:mod:`twirls.reports`) reads both and joins them with the paper; training
stages import this module alone, so that the report's code and the paper's numbers are not
their dependencies (a change there reruns the report, not the training).

Cells: ``results/<group>/<name>.json`` (a stage without a name: ``results/<group>.json``), a
list of :class:`Cell` (:func:`write_cells`).

Runs: ``results/<group>/<name>.csv``, one row per run and reported score, with these columns in
this order:

* what identifies the run: ``table`` (our table id, as in the cells), ``dataset``, ``graph``
  (``clean`` or the attacked graph, e.g. ``meta-20``), ``model`` (the cell's model label
  without its grid values), ``variant`` (``paper`` or ``reference`` for TWIRLS, else empty),
  the grid keys of a sweep (``steps``, ``alpha``, ``length``, ... sorted by name), ``split``
  and ``seed``;
* what it measured: ``metric`` (``accuracy``, ``macro_f1``, ``seconds``...), ``value`` (percent
  for scores, as in the cells; seconds for timings), ``best_epoch`` (0-based, the selected
  epoch), ``epochs`` (epochs run), ``seconds`` (the run's training time) and ``device``.

A stage with no data writes no rows (its cells say why). The cells' means and standard
deviations are those of these values (:func:`twirls.reports.runs.summary_of`), which a test
checks for every committed stage; ``rerun_diff`` compares the rows run by run.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from twirls import files

#: statuses a stage may set on a cell (others are computed from the paper).
STAGE_STATUSES = {"", "no-data", "stand-in"}


@dataclass
class Cell:
    """One reported number (mean ± std over ``runs``), or a ``no-data`` cell with its reason."""

    table: str
    dataset: str
    model: str
    metric: str
    mean: float | None = None
    std: float | None = None
    runs: int = 0
    status: str = ""  # "" (computed from the paper), "no-data" or "stand-in"
    note: str = ""  # reason for no-data, variant used, protocol differences
    extra: dict = field(default_factory=dict)  # e.g. {"grid": {"steps": 16, "alpha": 0.5}}


def write_cells(path: Path, cells: list[Cell]) -> None:
    """Write cells atomically (temp file + rename), so a crash never leaves half a file."""
    files.write_json(path, [asdict(c) for c in cells])


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
        writer.writerow({k: csv_value(row.get(k)) for k in cols})
    return buf.getvalue()


def write_runs(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """:func:`runs_text` of ``rows`` to ``path``, atomically."""
    files.write_text(path, runs_text(rows))


def csv_value(value: Any) -> str:
    """``value`` as a runs file holds it: empty for None and NaN, floats exact (``repr``)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return repr(value) if isinstance(value, float) else str(value)
