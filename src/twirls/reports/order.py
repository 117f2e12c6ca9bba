"""The paper's order of datasets, models and metrics in each table.

``paper_numbers.csv`` is transcribed row by row in the paper's order, so the first appearance of
a dataset (model, metric) in a table is its place in the paper. Labels the paper does not have
(our extra rows and columns) follow, in natural order (``K=2`` before ``K=10``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import pandas as pd

from twirls.reports.results import COMPARED_WITH, VARIANT_EXTRA_TABLES


def natural_key(label: object) -> str:
    """Sort key that orders numbers inside labels by value (``S=8`` before ``S=16``)."""
    return re.sub(r"\d+(?:\.\d+)?", lambda m: f"{float(m.group()):016.6f}", str(label))


#: extra tables laid out like a paper table (same rows and columns on other graphs).
LAID_OUT_LIKE = {"table4-clean": "table4", "table4-prognn": "table4",
                 "table9-prognn": "table9",
                 **dict.fromkeys(VARIANT_EXTRA_TABLES, "table9"),
                 **COMPARED_WITH}


def paper_order(paper: pd.DataFrame, table: str, column: str) -> list[str]:
    """The values of ``column`` in ``table`` (or in the paper table it is laid out like), in
    the order the paper lists them."""
    table = LAID_OUT_LIKE.get(table, table)
    return list(dict.fromkeys(paper.loc[paper["table"] == table, column].astype(str)))


def in_paper_order(values: Iterable[object], first: list[str]) -> list[str]:
    """``values`` (as strings, once each): those in ``first`` in its order, then the rest in
    natural order."""
    present = list(dict.fromkeys(map(str, values)))
    known = [v for v in first if v in present]
    return known + sorted((v for v in present if v not in first), key=natural_key)
