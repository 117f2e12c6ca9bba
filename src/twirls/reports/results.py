"""The reports contract: stages write *cells*; the report stage joins them with the paper.

Every experiment stage writes one JSON file (a list of :class:`Cell`). The report stage reads the
files named in ``params.yaml`` (``report.cells``), joins them with ``paper_numbers.csv`` (the one
transcription of the paper's tables) and writes ``reports/results.csv`` with exactly
:data:`COLUMNS`. A paper cell nobody ran yet is ``paper-only``; a cell whose data could not be
fetched is ``no-data`` and its reason goes into the report.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

PAPER_NUMBERS = Path(__file__).with_name("paper_numbers.csv")
COLUMNS = ["table", "dataset", "model", "metric", "mean", "std", "runs",
           "paper_mean", "paper_std", "delta", "status"]
KEY = ["table", "dataset", "model", "metric"]
#: metrics in percent, judged by the tolerance rule of :func:`status_of`.
SCORE_METRICS = {"accuracy", "micro_f1", "macro_f1"}


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
    status: str = ""  # "" (computed from the paper) or "no-data"
    note: str = ""  # reason for no-data, variant used, protocol differences
    extra: dict = field(default_factory=dict)


def write_cells(path: Path, cells: list[Cell]) -> None:
    """Write cells atomically (temp file + rename), so a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps([asdict(c) for c in cells], indent=1) + "\n")
    os.replace(tmp, path)


def read_cells(path: Path) -> list[Cell]:
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is listed in params.yaml report.cells but does not exist; "
            f"run the stage that writes it (dvc repro) or remove it from the list")
    return [Cell(**c) for c in json.loads(path.read_text())]


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
    """Join our cells with the paper's; every paper cell appears, ran or not."""
    ours = pd.DataFrame([asdict(c) for c in cells], columns=[*asdict(Cell("", "", "", "")).keys()])
    dup = ours[ours.duplicated(KEY, keep=False)]
    if len(dup):
        raise ValueError(f"two stages report the same cell: {dup[KEY].values.tolist()[:3]}")
    paper = paper.rename(columns={"mean": "paper_mean", "std": "paper_std"})
    df = ours.merge(paper[[*KEY, "paper_mean", "paper_std"]], on=KEY, how="outer")
    df["runs"] = df["runs"].fillna(0).astype(int)
    df["delta"] = df["mean"] - df["paper_mean"]
    statuses = []
    for row in df.itertuples():
        if row.status == "no-data":
            statuses.append("no-data")
        elif pd.isna(row.mean):
            statuses.append("paper-only")
        elif pd.isna(row.paper_mean):
            statuses.append("not-in-paper")
        else:
            statuses.append(status_of(row.metric, row.delta, row.paper_std))
    df["status"] = statuses
    order = {t: i for i, t in enumerate(dict.fromkeys(paper["table"]))}
    df["_t"] = df["table"].map(order).fillna(len(order))
    df = df.sort_values(["_t", "table", "dataset", "model", "metric"], kind="stable",
                        key=lambda col: col.map(_natural) if col.name == "model" else col)
    return df[COLUMNS + ["note"]].reset_index(drop=True)
