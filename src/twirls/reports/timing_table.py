"""Table 11 laid out as the paper argues it: time relative to MLP and GCN in the same run.

Columns: per-epoch train and test seconds measured on this project's hardware (not comparable
with the paper's Tesla T4), each model's time divided by MLP's and by GCN's (ours, then the
paper's ratio in parentheses), the parameter counts and each row's status (judged on the ratios,
see :mod:`twirls.reports.timing_ratios`).
"""

from __future__ import annotations

import math

import pandas as pd

from twirls.reports.timing_ratios import REFERENCES, SECONDS, ratios

SHORT = {"train_seconds": "train", "test_seconds": "test"}


def _ratio_text(ours: float, paper: float) -> str:
    mine = "—" if math.isnan(ours) else f"{ours:.2f}"
    return mine if math.isnan(paper) else f"{mine} ({paper:.2f})"


def _seconds_text(rows: pd.DataFrame) -> str:
    if not len(rows) or pd.isna(rows.iloc[0]["mean"]):
        return "—"
    row = rows.iloc[0]
    std = "" if pd.isna(row["std"]) else f" ± {row['std']:.2f}"
    return f"{row['mean']:.2f}{std}"


def _count(value: float) -> str:
    return "" if pd.isna(value) else f"{int(value):,}"


def timing_frame(rows: pd.DataFrame, models: list[str]) -> pd.DataFrame:
    """One row per model (``models``: the paper's order), ratio columns next to the paper's."""
    out = []
    for model in models:
        mine = rows[rows["model"] == model]
        line: dict[str, str] = {"model": model}
        for metric in SECONDS:
            short = SHORT[metric]
            line[f"{short} s/epoch (this hardware)"] = _seconds_text(
                mine[mine["metric"] == metric])
            ours, paper = ratios(rows, model, metric), ratios(rows, model, metric, "paper_mean")
            for ref in REFERENCES:
                line[f"{short} ÷ {ref}: ours (paper)"] = _ratio_text(ours[ref], paper[ref])
        params = mine[mine["metric"] == "parameters"]
        line["parameters: ours (paper)"] = (
            f"{_count(params.iloc[0]['mean']) or '—'} ({_count(params.iloc[0]['paper_mean'])})"
            if len(params) else "")
        statuses = [f"{SHORT.get(r.metric, r.metric)}: {r.status}" for r in mine.itertuples()]
        line["status"] = ", ".join(statuses)
        out.append(line)
    return pd.DataFrame(out)
