"""The reports contract: stages write *cells*; the report stage joins them with the paper.

Every experiment stage writes one JSON file (a list of :class:`~twirls.cells.Cell`). The report
stage reads the files named in ``params.yaml`` (``report.cells``), joins them with
``paper_numbers.csv`` (the one transcription of the paper's tables) and writes
``reports/results.csv`` with exactly :data:`COLUMNS`. A paper cell nobody ran yet is
``paper-only``; a cell whose data could not be fetched is ``no-data`` and its reason goes into
the report. A cell computed under a clearly labelled stand-in protocol (e.g. Table 12 trained on
part of the test gold) is ``stand-in``: shown, never counted as reproduced. Table 11's seconds
are judged on their ratios to MLP and GCN (:mod:`twirls.reports.timing_ratios`)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, replace
from pathlib import Path

import pandas as pd

from twirls.cells import STAGE_STATUSES, Cell
from twirls.reports.runs import read_runs, summary_of
from twirls.reports.timing_ratios import judge_timing_ratios

PAPER_NUMBERS = Path(__file__).with_name("paper_numbers.csv")
COLUMNS = ["table", "dataset", "model", "metric", "mean", "std", "runs",
           "paper_mean", "paper_std", "delta", "status"]
KEY = ["table", "dataset", "model", "metric"]
#: metrics in percent, judged by the tolerance rule of :func:`status_of`.
SCORE_METRICS = {"accuracy", "micro_f1", "macro_f1"}
#: every status a results.csv row can have, in the order reports list them.
STATUSES = ["reproduced", "differs", "stand-in", "no-data", "paper-only", "not-in-paper"]
#: extra tables that rerun a paper table under another protocol (Table 8 with the other variant
#: or K): each cell is judged against the paper's number for the same cell of that table, and
#: counted in its own table only (not in the scorecard).
COMPARED_WITH = {
    "table8-paper-k2": "table8",
    "table8-paper-k1": "table8",
    "table8-reference-k2": "table8",
    "table3-best-val": "table3",
    "table9-reference": "table9",
    "table9-paper": "table9",
}


#: tables whose cells run in both variants, the primary one in the table, the other beside it
#: (``<table>-<variant>``): Table 9 on our graph and on Pro-GNN's (``table9.primary``)
VARIANT_TABLES = ("table9", "table9-prognn")
VARIANTS = ("paper", "reference")
#: every ``<table>-<variant>`` table of :data:`VARIANT_TABLES`, with the table it varies; the
#: report writes those of the variant that is not primary, never those of the primary
VARIANT_EXTRA_TABLES = {f"{table}-{variant}": table
                        for table in VARIANT_TABLES for variant in VARIANTS}


def with_primary(cell: Cell, primary: str) -> Cell:
    """``cell`` in its table of :data:`VARIANT_TABLES` if its variant (``extra.variant``) is
    ``primary``, else in ``<table>-<variant>``; any other cell unchanged."""
    variant = cell.extra.get("variant", "paper")
    base = cell.table.removesuffix(f"-{variant}")
    if base not in VARIANT_TABLES:
        return cell
    return replace(cell, table=base if variant == primary else f"{base}-{variant}")


def read_cells(path: Path) -> list[Cell]:
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is listed in params.yaml report.cells but does not exist; "
            f"run the stage that writes it (dvc repro) or remove it from the list")
    cells = [Cell(**c) for c in json.loads(path.read_text())]
    for cell in cells:
        if cell.status not in STAGE_STATUSES:
            raise ValueError(f"{path}: cell {cell.table}/{cell.dataset}/{cell.model} has status "
                             f"{cell.status!r}; a stage may only set one of "
                             f"{sorted(STAGE_STATUSES)}")
    runs_file = path.with_suffix(".csv")
    return from_rows(cells, read_runs(runs_file), runs_file) if runs_file.exists() else cells


def from_rows(cells: list[Cell], rows: list[dict], where: Path) -> list[Cell]:
    """``cells`` with mean, std and runs computed from the stage's rows
    (:func:`twirls.reports.runs.summary_of`). A cell that says it has runs but whose rows
    disagree (another count or mean) is an error: the stage's outputs do not belong together."""
    out = []
    for cell in cells:
        if not cell.runs or cell.mean is None:
            out.append(cell)
            continue
        mean, std, runs = summary_of(asdict(cell), rows)
        if runs != cell.runs or not math.isclose(mean, cell.mean, rel_tol=1e-9, abs_tol=1e-9):
            raise ValueError(
                f"{where}: the rows of {cell.table}/{cell.dataset}/{cell.model}/{cell.metric} "
                f"give {runs} runs, mean {mean}, but its cell says {cell.runs} runs, mean "
                f"{cell.mean}; rerun the stage (dvc repro -f <stage>) to rewrite both")
        out.append(replace(cell, mean=mean, std=None if cell.std is None else std, runs=runs))
    return out


def read_paper(path: Path = PAPER_NUMBERS) -> pd.DataFrame:
    return pd.read_csv(path, dtype={"mean": float, "std": float})


def status_of(metric: str, delta: float, paper_std: float) -> str:
    """``reproduced`` when |delta| <= max(1.0, 2 * paper_std) for scores in percent.

    Counts (nodes, edges, ...) must match exactly; other metrics (seconds, parameters) depend on
    hardware and implementation and are reported as ``differs`` unless equal.
    """
    if metric in SCORE_METRICS:
        tol = max(1.0, 2.0 * (0.0 if math.isnan(paper_std) else paper_std))
        return "reproduced" if abs(delta) <= tol + 1e-9 else "differs"
    return "reproduced" if abs(delta) < 1e-9 else "differs"


def _natural(label: object) -> str:
    """Sort key that orders numbers in labels by value (``S=8`` before ``S=16``)."""
    return re.sub(r"\d+(?:\.\d+)?", lambda m: f"{float(m.group()):016.6f}", str(label))


def build_results(cells: list[Cell], paper: pd.DataFrame) -> pd.DataFrame:
    """Join our cells with the paper's; every paper cell appears, ran or not. Besides
    :data:`COLUMNS` the frame has ``note`` and ``grid`` (a sweep cell's grid values, or None)."""

    ours = pd.DataFrame([asdict(c) for c in cells], columns=[*asdict(Cell("", "", "", "")).keys()])
    dup = ours[ours.duplicated(KEY, keep=False)]
    if len(dup):
        raise ValueError(f"two stages report the same cell: {dup[KEY].values.tolist()[:3]}")
    paper = paper.rename(columns={"mean": "paper_mean", "std": "paper_std"})
    df = ours.merge(paper[[*KEY, "paper_mean", "paper_std"]], on=KEY, how="outer")
    for extra, base in COMPARED_WITH.items():  # our cells there get the base table's numbers
        rows = df["table"] == extra
        same = pd.MultiIndex.from_frame(df.loc[rows, KEY[1:]])
        ref = paper[paper["table"] == base].set_index(KEY[1:])
        for col in ("paper_mean", "paper_std"):
            df.loc[rows, col] = ref[col].reindex(same).to_numpy()
    df["runs"] = df["runs"].fillna(0).astype(int)
    df["delta"] = df["mean"] - df["paper_mean"]
    statuses = []
    for row in df.itertuples():
        if row.status in ("no-data", "stand-in"):
            statuses.append(row.status)
        elif pd.isna(row.mean):
            statuses.append("paper-only")
        elif pd.isna(row.paper_mean):
            statuses.append("not-in-paper")
        else:
            statuses.append(status_of(row.metric, row.delta, row.paper_std))
    df["status"] = statuses
    df["grid"] = [e.get("grid") if isinstance(e, dict) else None for e in df["extra"]]
    df = judge_timing_ratios(df)
    order = {t: i for i, t in enumerate(dict.fromkeys(paper["table"]))}
    df["_t"] = df["table"].map(order).fillna(len(order))
    df = df.sort_values(["_t", "table", "dataset", "model", "metric"], kind="stable",
                        key=lambda col: col.map(_natural) if col.name == "model" else col)
    return df[COLUMNS + ["note", "grid"]].reset_index(drop=True)
