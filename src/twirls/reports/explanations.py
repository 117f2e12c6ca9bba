"""Why a cell differs from the paper: our written findings, rendered under each table.

``explanations.csv`` (next to this file) has one row per explained cell: ``table, dataset,
model, explanation``. An explanation points at the measurement that supports it (another table
or cell of the report, a benchmark, a test) instead of repeating numbers, so it cannot go stale
when a stage reruns. ``*`` as dataset and model explains a whole table. A row that names no cell
of ``results.csv`` is an error: explanations must follow renamed models and tables. So is a row
that states a run count ("10 seeds"): the count changes whenever a cell's seeds do, and the
table's header and ``results.csv`` already give each cell's runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

EXPLANATIONS = Path(__file__).with_name("explanations.csv")
KEY = ["table", "dataset", "model"]
#: ``dataset`` and ``model`` both ``*``: the explanation covers every cell of the table.
ALL = "*"
#: a run count written out ("10 seeds", "three runs", "1,000 splits"), which goes stale; not
#: a numbered thing or a param's value ("Table 9 runs the authors' code", "a K = 1 run")
RUN_COUNT = re.compile(r"(?<!table )(?<!figure )(?<!claim )(?<!= )(?<!=)"
                       r"\b(?:\d[\d,]*|two|three|four|five|six|seven|eight|nine|ten|twenty|fifty"
                       r"|hundred)\s+(?:seeds?|runs?|splits?)\b", re.IGNORECASE)


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
    for i, text in enumerate(ex["explanation"], start=2):
        if (m := RUN_COUNT.search(text)):
            raise ValueError(f"{path}, line {i}: '{m.group()}' states a run count, which goes "
                             f"stale when the cell's seeds change; drop it (the table's header "
                             f"and reports/results.csv give each cell's runs)")
    if ex.duplicated(KEY).any():
        raise ValueError(f"{path}: cells explained twice: "
                         f"{ex[ex.duplicated(KEY)][KEY].values.tolist()}")
    return ex
