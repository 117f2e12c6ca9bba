"""The scorecard: per table, how many cells are reproduced, differ, have no data, ..."""

from __future__ import annotations

import pandas as pd

from twirls.reports.results import STATUSES

#: statuses of the paper's cells (``not-in-paper`` is our extra tables).
PAPER_STATUSES = [s for s in STATUSES if s != "not-in-paper"]


def scorecard(results: pd.DataFrame, tables: list[str]) -> pd.DataFrame:
    """One row per table of ``tables`` (in that order) with a count column per status of
    :data:`STATUSES`, zeros included."""
    counts = results.groupby(["table", "status"]).size().unstack(fill_value=0)
    counts = counts.reindex(index=tables, columns=STATUSES, fill_value=0)
    return counts.fillna(0).astype(int)


def totals(card: pd.DataFrame) -> dict[str, int]:
    """Status -> cells over every table of ``card``."""
    return {status: int(card[status].sum()) for status in card.columns}


def scorecard_lines(card: pd.DataFrame, titles: dict[str, str]) -> list[str]:
    """Markdown: one row per paper table (its title linked to ``tables/<table>.md``), then the
    totals."""
    head = "| table | " + " | ".join(PAPER_STATUSES) + " |"
    lines = [head, "|---" * (len(PAPER_STATUSES) + 1) + "|"]
    for table, row in card.iterrows():
        if row[PAPER_STATUSES].sum() == 0:
            continue
        link = f"[{titles.get(table, table)}](tables/{table}.md)"
        lines.append(f"| {link} | " + " | ".join(str(row[s]) for s in PAPER_STATUSES) + " |")
    total = totals(card)
    lines.append("| **all paper cells** | " + " | ".join(f"**{total[s]}**"
                                                      for s in PAPER_STATUSES) + " |")
    return lines
