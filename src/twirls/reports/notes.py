"""Notes under a table: one line per distinct note, naming the cells it covers.

A table's notes repeat: Table 2's fourteen ``no-data`` cells share two download errors. Each
distinct note is printed once, with its cells grouped by dataset (``pubmed (every model)`` when
it covers every row of that column; ``all cells`` when it covers the whole table).
"""

from __future__ import annotations

import pandas as pd

from twirls.reports.order import in_paper_order


def covered_cells(group: pd.DataFrame, rows: pd.DataFrame, datasets: list[str],
                  models: list[str]) -> str:
    """Which cells of ``rows`` (one table) the note's ``group`` covers, compactly."""
    ran = rows[rows["status"] != "paper-only"]
    if len(group) == len(ran) and len(ran) > 1:
        return "all cells" if len(ran) == len(rows) else "every cell that ran"
    parts = []
    for dataset in in_paper_order(group["dataset"], datasets):
        mine = group[group["dataset"] == dataset]
        everyone = rows[rows["dataset"] == dataset]
        names = in_paper_order(mine["model"], models)
        if set(names) == {"dataset"}:
            parts.append(dataset)
        elif len(mine) == len(everyone) and len(names) > 1:
            parts.append(f"{dataset} (every model)")
        else:
            parts.append(f"{dataset} (" + ", ".join(names) + ")")
    return "; ".join(parts)


def cell_notes(rows: pd.DataFrame, datasets: list[str] | None = None,
               models: list[str] | None = None) -> list[str]:
    """Markdown bullet lines, one per distinct note, in the order of the cells they cover
    (``datasets`` and ``models`` give the paper's order)."""
    datasets, models = datasets or [], models or []
    noted = rows[rows["note"].fillna("") != ""]
    place = {d: i for i, d in enumerate(in_paper_order(rows["dataset"], datasets))}
    notes = sorted(dict.fromkeys(noted["note"]),
                   key=lambda n: min(place[d] for d in noted.loc[noted["note"] == n, "dataset"]))
    lines = []
    for n in notes:
        group = noted[noted["note"] == n]
        shown = n
        if group["dataset"].nunique() == 1:  # "pubmed: cannot download ..." under pubmed's
            shown = n.removeprefix(f"{group['dataset'].iloc[0]}: ")  # cells: the name once
        lines.append(f"- {covered_cells(group, rows, datasets, models)}: {shown}")
    return lines
