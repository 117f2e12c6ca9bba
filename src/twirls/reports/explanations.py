"""Why a cell differs from the paper: our written findings, rendered under each table.

``explanations.csv`` (next to this file) has one row per explained cell: ``table, dataset,
model, explanation``. An explanation points at the measurement that supports it (another table
or cell of the report, a benchmark, a test) instead of repeating numbers, so it cannot go stale
when a stage reruns. ``*`` as dataset and model explains a whole table. A row that names no cell
of ``results.csv`` is an error: explanations must follow renamed models and tables.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

EXPLANATIONS = Path(__file__).with_name("explanations.csv")
KEY = ["table", "dataset", "model"]
#: ``dataset`` and ``model`` both ``*``: the explanation covers every cell of the table.
ALL = "*"


def read_explanations(results: pd.DataFrame, path: Path = EXPLANATIONS) -> pd.DataFrame:
    """The explanations, checked against the cells of ``results`` (one clear error if stale)."""
    ex = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing_cols = [c for c in [*KEY, "explanation"] if c not in ex.columns]
    if missing_cols:
        raise ValueError(f"{path}: missing column(s) {missing_cols}; the header must be "
                         f"table,dataset,model,explanation")
    known = set(map(tuple, results[KEY].astype(str).values.tolist()))
    known |= {(table, ALL, ALL) for table in results["table"].astype(str)}
    for i, row in enumerate(ex[KEY].values.tolist(), start=2):
        if tuple(row) not in known:
            raise ValueError(f"{path}, line {i}: no cell {row} in results.csv; fix the table, "
                             f"dataset or model name (see reports/results.csv)")
    if ex.duplicated(KEY).any():
        raise ValueError(f"{path}: cells explained twice: "
                         f"{ex[ex.duplicated(KEY)][KEY].values.tolist()}")
    return ex
