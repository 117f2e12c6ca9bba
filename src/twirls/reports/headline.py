"""``reports/headline.json``: a flat, small metrics file for ``dvc exp show``.

The paper's key cells (``headline.yaml``: short key -> cell), our means rounded to 2 decimals
(cells without our number are left out) and the scorecard's ``reproduced`` / ``differs``
counts; few, short keys, so that ``dvc metrics show`` fits a 120-column terminal (the claims'
verdicts are in reports/README.md). Written atomically.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from twirls.files import write_json
from twirls.reports.claims import OURS

HEADLINE = Path(__file__).with_name("headline.yaml")


def headline(results: pd.DataFrame, totals: dict[str, int],
             path: Path = HEADLINE) -> dict[str, float | int]:
    """The flat headline dict (keys in ``headline.yaml`` order, then the two counts)."""
    spec = yaml.safe_load(path.read_text()) or {}
    out: dict[str, float | int] = {}
    for key, cell in spec.items():
        if not isinstance(cell, list) or len(cell) != 4:
            raise ValueError(f"{path}: {key} must be [table, dataset, model, metric], got {cell}")
        table, dataset, model, metric = cell
        hit = results[(results["table"] == table) & (results["dataset"] == dataset)
                      & (results["model"] == model) & (results["metric"] == metric)]
        if len(hit) and hit.iloc[0]["status"] in OURS and not pd.isna(hit.iloc[0]["mean"]):
            out[key] = round(float(hit.iloc[0]["mean"]), 2)
    out |= {k: int(totals.get(k, 0)) for k in ("reproduced", "differs")}
    return out


def write_headline(path: Path, values: dict[str, float | int]) -> None:
    """Write ``values`` as JSON atomically (temp file + rename)."""
    write_json(path, values)
