"""Render ``results.csv`` rows as per-table Markdown / CSV / LaTeX, and the report index."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pandas as pd

from twirls.reports.explanations import ALL
from twirls.reports.figures_index import FIGURES

#: table id -> (paper table number and title). The order is the paper's.
TABLES: dict[str, str] = {
    "standard-benchmarks": "Table 2: Baseline results on standard benchmarks",
    "heterophily": "Table 3: Result on heterophily graphs",
    "attack": "Table 4: Adversarial attack comparison with SOTA models",
    "dataset-statistics": "Table 5: Dataset statistics",
    "citeseer-alpha-steps": "Table 8: TWIRLS-base on Citeseer, step size alpha x steps S",
    "truncation-T": "Table 9: TWIRLS under attack with different truncation T",
    "mlp-layers": "Table 10: TWIRLS-base with K MLP layers before propagation",
    "running-time": "Table 11: Running time per epoch on ogbn-arxiv",
    "cws": "Table 12: Chinese word segmentation (PKU)",
}
#: our tables beyond the paper's (same format; their cells are ``not-in-paper``).
EXTRA_TABLES: dict[str, str] = {
    "attack-clean": "Extra: the models of Table 4 on the clean graphs (no attack)",
    "attack-prognn": "Extra: the models of Table 4 on Pro-GNN's published 20% Meta-Self graphs",
    "variant-comparison": "Extra: paper equations vs the authors' reference code "
                          "(dgl.nn.TWIRLSConv) on the same cells",
}


def _num(x: float, digits: int) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if float(x).is_integer() and abs(x) >= 100:
        return f"{int(x):,}"
    return f"{x:.{digits}f}"


def cell_text(row: pd.Series, digits: int = 2) -> str:
    """``ours ± std (paper ± std)``, or the status when we have no number."""
    ours = _num(row["mean"], digits)
    if ours and _num(row["std"], digits) and row["runs"] > 1:
        ours += f" ± {_num(row['std'], digits)}"
    paper = _num(row["paper_mean"], digits)
    if paper and _num(row["paper_std"], digits):
        paper += f" ± {_num(row['paper_std'], digits)}"
    if not ours:
        ours = {"no-data": "no data", "paper-only": "not run"}.get(row["status"], "—")
    return f"{ours} ({paper})" if paper else ours


GRID_LABEL = re.compile(r"^(?P<name>[^\[]+)\[(?P<a>\w+)=(?P<va>[^,\]]+),"
                        r"(?P<b>\w+)=(?P<vb>[^\]]+)\]$")


def grid_frame(rows: pd.DataFrame) -> pd.DataFrame | None:
    """A two-parameter sweep of one model on one dataset (labels ``Name[a=x,b=y]``, e.g. Table 8)
    as the paper lays it out: one row per ``a``, one column per ``b``; ``None`` otherwise."""
    if rows["dataset"].nunique() != 1 or rows["metric"].nunique() != 1:
        return None
    parsed = [GRID_LABEL.match(str(m)) for m in rows["model"]]
    if not all(parsed) or len({(m["name"], m["a"], m["b"]) for m in parsed}) != 1:
        return None
    first = parsed[0]
    row_key, col_key = first["a"], first["b"]
    grid = rows.assign(**{row_key: [m["va"] for m in parsed], col_key: [m["vb"] for m in parsed]},
                       text=rows.apply(cell_text, axis=1))
    wide = grid.pivot_table(index=row_key, columns=col_key, values="text", aggfunc="first",
                            sort=False)
    wide.columns = [f"{col_key}={c}" for c in wide.columns]
    head = f"{first['name']} ({rows['dataset'].iloc[0]}): {row_key}"
    return wide.fillna("").reset_index().rename(columns={row_key: head})


def table_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """Pivot one table's rows into model x (dataset, metric) text cells (or a
    :func:`grid_frame` for a two-parameter sweep)."""
    grid = grid_frame(rows)
    if grid is not None:
        return grid
    rows = rows.assign(col=rows["dataset"] + (" " + rows["metric"]).where(
        rows.groupby("dataset")["metric"].transform("nunique") > 1, ""))
    rows = rows.assign(text=rows.apply(cell_text, axis=1))
    wide = rows.pivot_table(index="model", columns="col", values="text", aggfunc="first",
                            sort=False)
    return wide.fillna("").reset_index()


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(text)
    os.replace(tmp, path)


def to_markdown(df: pd.DataFrame) -> str:
    header = "| " + " | ".join(map(str, df.columns)) + " |\n"
    header += "|" + "---|" * len(df.columns) + "\n"
    body = ("| " + " | ".join(map(str, r)) + " |\n" for r in df.itertuples(index=False))
    return header + "".join(body)


def to_latex(df: pd.DataFrame, caption: str) -> str:
    def esc(s: object) -> str:
        return str(s).replace("_", r"\_").replace("±", r"$\pm$").replace("%", r"\%")

    lines = [r"\begin{table}[t]", rf"\caption{{{esc(caption)}. Ours (paper).}}",
             r"\begin{tabular}{l" + "c" * (len(df.columns) - 1) + "}", r"\toprule",
             " & ".join(esc(c) for c in df.columns) + r" \\", r"\midrule"]
    lines += [" & ".join(esc(v) for v in r) + r" \\" for r in df.itertuples(index=False)]
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def cell_notes(rows: pd.DataFrame) -> list[str]:
    """One line per note; a note shared by every cell of the table (paper-only cells aside) is
    printed once."""
    ran = rows[rows["note"].fillna("") != ""]
    by_note = ran.groupby("note", sort=True)
    lines = []
    for note, group in by_note:
        if len(group) > 1 and len(group) == (rows["status"] != "paper-only").sum():
            lines.append(f"- all cells: {note}")
        else:
            lines += [f"- {r.model} / {r.dataset}: {note}" for r in group.itertuples()]
    return sorted(lines)


def write_table(results: pd.DataFrame, table: str, out_dir: Path,
                explanations: pd.DataFrame | None = None) -> dict[str, int]:
    """Write ``<table>.md/.csv/.tex``; return the count of cells per status. ``explanations``
    (see :mod:`twirls.reports.explanations`) are listed under the table with each cell's status."""
    rows = results[results["table"] == table]
    wide = table_frame(rows)
    title = {**TABLES, **EXTRA_TABLES}.get(table, table)
    notes = cell_notes(rows)
    md = f"# {title}\n\nEach cell: ours (paper). Status of cells: "
    counts = rows["status"].value_counts().to_dict()
    md += ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ".\n\n" + to_markdown(wide)
    if explanations is not None and len(explanations):
        status = {(r.dataset, r.model): r.status for r in rows.itertuples()}
        ex = explanations[explanations["table"] == table]
        if len(ex):
            md += "\n## Why cells differ from the paper\n\n" + "\n".join(
                f"- all cells: {r.explanation}" if (r.dataset, r.model) == (ALL, ALL) else
                f"- {r.model} / {r.dataset} ({status[(r.dataset, r.model)]}): {r.explanation}"
                for r in ex.itertuples()) + "\n"
    if notes:
        md += "\n## Notes\n\n" + "\n".join(notes) + "\n"
    write_atomic(out_dir / f"{table}.md", md)
    write_atomic(out_dir / f"{table}.csv", wide.to_csv(index=False))
    write_atomic(out_dir / f"{table}.tex", to_latex(wide, title))
    return counts


def write_index(results: pd.DataFrame, reports: Path, figures_made: set[str],
                explanations: pd.DataFrame | None = None,
                figures_no_data: set[str] = frozenset(),
                device_section: list[str] | None = None) -> None:
    """``reports/README.md``: every table and figure of the paper with its status
    (``figures_no_data``: drawn, but their data could not be fetched; the figure says why),
    then ``device_section`` (where the numbers were computed)."""
    lines = ["# Reproduction report", "",
             "Regenerated by `dvc repro` (stage `report`); do not edit by hand. Every number comes "
             "from a pipeline run; the paper's numbers come from "
             "`src/twirls/reports/paper_numbers.csv`.",
             "Status per cell: `reproduced` (|ours - paper| <= max(1, 2 x paper std) points), "
             "`differs`, `paper-only` (not run yet), `no-data` (data could not be fetched; reason "
             "in the table's notes), `not-in-paper` (our extra cells).", "",
             "## Tables", "", "| paper table | files | cells by status |", "|---|---|---|"]
    for table, title in {**TABLES, **EXTRA_TABLES}.items():
        counts = write_table(results, table, reports / "tables", explanations)
        files = " · ".join(f"[{ext}](tables/{table}.{ext})" for ext in ("md", "csv", "tex"))
        lines.append(f"| {title} | {files} | "
                     + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + " |")
    lines += ["", "## Figures", "", "| paper figure | file | status |", "|---|---|---|"]
    for fig, title in FIGURES.items():
        made = fig in figures_made
        link = f"[{fig}.png](figures/{fig}.png)" if made else "—"
        status = ("no data (the figure says why)" if fig in figures_no_data
                  else "generated" if made else "not generated yet")
        lines.append(f"| {title} | {link} | {status} |")
    lines += ["", "All cells: [results.csv](results.csv). Dataset statistics with explanations: "
              "[tables/datasets.md](tables/datasets.md).", "", *(device_section or [])]
    write_atomic(reports / "README.md", "\n".join(lines))
