"""Render ``results.csv`` rows as per-table Markdown / CSV / LaTeX, and the report index."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from twirls.files import write_text
from twirls.reports.explanations import ALL
from twirls.reports.figures_index import FIGURES, NOT_BUILT
from twirls.reports.notes import cell_notes
from twirls.reports.order import in_paper_order, natural_key, paper_order
from twirls.reports.results import COMPARED_WITH, STATUSES, VARIANT_EXTRA_TABLES, read_paper
from twirls.reports.scorecard import scorecard, scorecard_lines
from twirls.reports.timing_ratios import RATIO_TOLERANCE
from twirls.reports.timing_ratios import TABLE as TIMING_TABLE
from twirls.reports.timing_table import timing_frame

#: table id -> (paper table number and title). The order is the paper's.
TABLES: dict[str, str] = {
    "table2": "Table 2: Baseline results on standard benchmarks",
    "table3": "Table 3: Result on heterophily graphs",
    "table4": "Table 4: Adversarial attack comparison with SOTA models",
    "table5": "Table 5: Dataset statistics",
    "table8": "Table 8: TWIRLS-base on Citeseer, step size alpha x steps S",
    "table9": "Table 9: TWIRLS under attack with different truncation T",
    "table10": "Table 10: TWIRLS-base with K MLP layers before propagation",
    "table11": "Table 11: Running time per epoch on ogbn-arxiv",
    "table12": "Table 12: Chinese word segmentation (PKU)",
}
#: how an extra table names the table and the variant it varies
VARIED = {"table9": "Table 9", "table9-prognn": "Table 9 on Pro-GNN's graphs"}
VARIANT_WORDS = {"reference": "authors' reference code (dgl.nn.TWIRLSConv)",
                 "paper": "paper's equations"}
#: our tables beyond the paper's (same format; their cells are ``not-in-paper``).
EXTRA_TABLES: dict[str, str] = {
    "table4-clean": "Extra: the models of Table 4 on the clean graphs (no attack)",
    "table4-prognn": "Extra: the models of Table 4 on Pro-GNN's published 20% Meta-Self graphs",
    "table9-prognn": "Extra: Table 9's truncation T on Pro-GNN's published 20% Meta-Self "
                           "graphs",
    **{name: f"Extra: {VARIED[table]} with the {VARIANT_WORDS[name.rsplit('-', 1)[1]]}"
       for name, table in VARIANT_EXTRA_TABLES.items()},  # the variant that is not primary
    "variants": "Extra: paper equations vs the authors' reference code "
                          "(dgl.nn.TWIRLSConv) on the same cells",
    "table8-paper-k2": "Extra: Table 8 with the paper's equations, K = 2 (Table 6)",
    "table8-paper-k1": "Extra: Table 8 with the paper's equations, K = 1",
    "table8-reference-k2": "Extra: Table 8 with the authors' reference code, K = 2",
    "table3-best-val": "Extra: Table 3's Geom-GCN with our loop (best validation accuracy) "
                         "instead of its authors'",
}



STATS_TABLE = "table5"
#: metrics that are counts: printed as integers with thousands separators.
COUNT_METRICS = {"nodes", "edges", "features", "classes", "parameters"}
#: how a cell without our number reads, by status.
MISSING = {"no-data": "no data", "paper-only": "not run"}
STATUS_TAG = {"stand-in": " [stand-in]"}


def _num(x: float | None, digits: int, count: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if count or (float(x).is_integer() and abs(x) >= 100):
        return f"{int(round(x)):,}"
    return f"{x:.{digits}f}"


def cell_text(row: pd.Series, digits: int = 2) -> str:
    """``ours ± std (paper ± std)``, ``ours ± std [stand-in] (paper)``, or the status when we
    have no number; cells outside the paper show ours alone."""
    count = row.get("metric") in COUNT_METRICS
    ours = _num(row["mean"], digits, count)
    if ours and not count and _num(row["std"], digits) and row["runs"] > 1:
        ours += f" ± {_num(row['std'], digits)}"
    paper = _num(row["paper_mean"], digits, count)
    if paper and not count and _num(row["paper_std"], digits):
        paper += f" ± {_num(row['paper_std'], digits)}"
    if not ours:
        ours = MISSING.get(row["status"], "—")
    ours += STATUS_TAG.get(row["status"], "")
    return f"{ours} ({paper})" if paper else ours


GRID_LABEL = re.compile(r"^(?P<name>[^\[]+)\[(?P<a>\w+)=(?P<va>[^,\]]+),"
                        r"(?P<b>\w+)=(?P<vb>[^\]]+)\]$")


def _value(v: object) -> str:
    """A grid value as the table shows it (``0.25``, ``1``, ``16``; text stays text)."""
    try:
        return f"{float(v):g}"
    except (TypeError, ValueError):
        return str(v)


def _label_grid(model: object) -> tuple[str, dict[str, str]] | None:
    m = GRID_LABEL.match(str(model))
    return (m["name"], {m["a"]: m["va"], m["b"]: m["vb"]}) if m else None


def _aliases(rows: pd.DataFrame) -> dict[str, str]:
    """Label key -> grid key (``S`` -> ``steps``), from the cells that carry both."""
    votes: dict[str, set[str]] = {}
    for model, grid in zip(rows["model"], rows["grid"], strict=True):
        parsed = _label_grid(model)
        if not parsed or not isinstance(grid, dict):
            continue
        for key, value in parsed[1].items():
            same = {g for g, v in grid.items() if _value(v) == _value(value)}
            votes[key] = votes[key] & same if key in votes else same
    return {k: next(iter(v)) for k, v in votes.items() if len(v) == 1}


def grid_values(rows: pd.DataFrame) -> list[dict[str, str]] | None:
    """Each row's grid values: ``grid`` (the cell's ``extra["grid"]``) when present, else parsed
    from a ``Name[a=x,b=y]`` label (files written before cells carried their grid). Keys in the
    label's order (the paper's rows, then columns); None when a row has neither."""
    if "grid" not in rows.columns:
        rows = rows.assign(grid=None)
    alias = _aliases(rows)
    out = []
    for model, grid in zip(rows["model"], rows["grid"], strict=True):
        parsed = _label_grid(model)
        if parsed:
            values = {alias.get(k, k): v for k, v in parsed[1].items()}
            if isinstance(grid, dict):
                values = {k: grid.get(k, v) for k, v in values.items()}
        elif isinstance(grid, dict) and grid:
            values = dict(grid)
        else:
            return None
        out.append({k: _value(v) for k, v in values.items()})
    return out


def grid_frame(rows: pd.DataFrame) -> pd.DataFrame | None:
    """A two-parameter sweep of one model on one dataset (e.g. Table 8) as the paper lays it
    out: one row per value of the first grid key, one column per value of the second (in
    numeric order); ``None`` for any other table."""
    if not len(rows) or rows["dataset"].nunique() != 1 or rows["metric"].nunique() != 1:
        return None
    values = grid_values(rows)
    if values is None or len({tuple(v) for v in values}) != 1 or len(values[0]) != 2:
        return None
    row_key, col_key = values[0]
    names = {str(m).split("[")[0] for m in rows["model"]}
    if len(names) != 1:
        return None
    grid = rows.assign(_r=[v[row_key] for v in values], _c=[v[col_key] for v in values],
                       text=rows.apply(cell_text, axis=1))
    wide = grid.pivot_table(index="_r", columns="_c", values="text", aggfunc="first")
    wide = wide.reindex(index=sorted(wide.index, key=natural_key),
                        columns=sorted(wide.columns, key=natural_key))
    wide.columns = [f"{col_key}={c}" for c in wide.columns]
    head = f"{names.pop()} ({rows['dataset'].iloc[0]}): {row_key}"
    return wide.fillna("").reset_index(names=head)


def stats_frame(rows: pd.DataFrame, datasets: list[str], metrics: list[str]) -> pd.DataFrame:
    """Table 5's layout: one row per dataset, one column per statistic."""
    rows = rows.assign(text=rows.apply(cell_text, axis=1))
    wide = rows.pivot_table(index="dataset", columns="metric", values="text", aggfunc="first")
    wide = wide.reindex(index=datasets, columns=metrics)
    return wide.fillna("").reset_index()


def table_frame(rows: pd.DataFrame, paper: pd.DataFrame | None = None) -> pd.DataFrame:
    """One table's cells as text, laid out as in the paper: the paper's rows and columns in
    its order (our extra ones after), Table 5 as datasets x statistics, Table 11 as time ratios,
    a two-parameter sweep as the paper's grid (:func:`grid_frame`). A column names a metric
    only where a model has several on one dataset; a row of one other metric (Table 3's
    homophily) is named after it."""
    if not len(rows):
        return pd.DataFrame(columns=["model"])
    grid = grid_frame(rows)
    if grid is not None:
        return grid
    paper = read_paper() if paper is None else paper
    table = str(rows["table"].iloc[0])
    datasets, models, metrics = (in_paper_order(rows[c], paper_order(paper, table, c))
                                 for c in ("dataset", "model", "metric"))
    if table == TIMING_TABLE:
        return timing_frame(rows, models)
    if models == ["dataset"]:
        return stats_frame(rows, datasets, metrics)
    multi = rows.groupby(["model", "dataset"])["metric"].nunique().max() > 1
    rows = rows.assign(col=rows["dataset"] + (" " + rows["metric"] if multi else ""),
                       text=rows.apply(cell_text, axis=1))
    cols = [f"{d} {m}" if multi else d for d in datasets for m in (metrics if multi else [""])]
    wide = rows.pivot_table(index="model", columns="col", values="text", aggfunc="first")
    wide = wide.reindex(index=models, columns=[c for c in cols if c in wide.columns])
    if not multi:  # a row of a single other metric is named after it ("homophily")
        main = rows["metric"].mode().iloc[0]
        own = rows.groupby("model")["metric"].first()
        wide.index = [own[m] if m == "dataset" and own[m] != main else m for m in wide.index]
    return wide.fillna("").reset_index(names="model")


def to_markdown(df: pd.DataFrame) -> str:
    header = "| " + " | ".join(map(str, df.columns)) + " |\n"
    header += "|" + "---|" * len(df.columns) + "\n"
    body = ("| " + " | ".join(map(str, r)) + " |\n" for r in df.itertuples(index=False))
    return header + "".join(body)


def to_latex(df: pd.DataFrame, caption: str, legend: str = "Ours (paper)") -> str:
    def esc(s: object) -> str:
        return str(s).replace("_", r"\_").replace("±", r"$\pm$").replace("%", r"\%")

    text = f"{caption}. {legend}" if legend else caption
    head = rf"\caption{{{esc(text)}.}}"
    lines = [r"\begin{table}[t]", head,
             r"\begin{tabular}{l" + "c" * (len(df.columns) - 1) + "}", r"\toprule",
             " & ".join(esc(c) for c in df.columns) + r" \\", r"\midrule"]
    lines += [" & ".join(esc(v) for v in r) + r" \\" for r in df.itertuples(index=False)]
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def legend_line(table: str) -> str:
    """How to read a cell of ``table``."""
    if table in COMPARED_WITH:
        return (f"Each cell: ours, mean ± std over runs (the paper's number for the same cell of "
                f"{TABLES[COMPARED_WITH[table]].split(':')[0]}, which used one protocol); "
                "statuses as there, not counted in the scorecard.")
    if table in EXTRA_TABLES:
        return "Each cell: ours, mean ± std over runs (our table; the paper has no numbers here)."
    if table == STATS_TABLE:
        return "Each cell: ours (paper); how each count was made is in the notes."
    if table == TIMING_TABLE:
        return ("Seconds per epoch are measured on this project's hardware (not comparable with "
                "the paper's Tesla T4). The paper's argument is relative cost, so each model's "
                "time is divided by MLP's and by GCN's in the same run, next to the same ratio "
                "from the paper's seconds (in parentheses); a time cell is `reproduced` when "
                f"both ratios are within {RATIO_TOLERANCE:.0%} of the paper's.")
    return ("Each cell: ours, mean ± std over runs (paper's mean ± std); `[stand-in]` marks a "
            "number from a stand-in protocol (see the notes).")


def status_counts(rows: pd.DataFrame) -> dict[str, int]:
    """Status -> cells, in :data:`STATUSES` order, zeros left out."""
    counts = rows["status"].value_counts().to_dict()
    return {s: int(counts[s]) for s in STATUSES if counts.get(s)}


def runs_line(rows: pd.DataFrame, datasets: list[str] | None = None) -> str:
    """How many runs are behind the table's cells: the usual count, then the cells with another
    (``Runs per cell: 10; 3 for GCNII (cora, citeseer).``, datasets in the order of
    ``datasets``); empty for a table of single values (counts, Table 5)."""
    ran = rows[(rows["runs"].fillna(0) > 1) & rows["mean"].notna()]
    if ran.empty:
        return ""
    runs = ran["runs"].astype(int)
    usual = int(runs.mode().max())
    others = ran[runs != usual]
    line = f"Runs per cell: {usual}"
    for count, group in others.groupby(others["runs"].astype(int), sort=True):
        cells = ", ".join(f"{model} ({', '.join(in_paper_order(g['dataset'], datasets or []))})"
                          for model, g in group.groupby("model", sort=False))
        line += f"; {count} for {cells}"
    return line + "."


def write_table(results: pd.DataFrame, table: str, out_dir: Path,
                explanations: pd.DataFrame | None = None,
                paper: pd.DataFrame | None = None) -> dict[str, int]:
    """Write ``<table>.md/.csv/.tex``; return the count of cells per status.
    ``explanations`` (see :mod:`twirls.reports.explanations`) are listed under the table with
    each cell's status; notes are listed once per distinct note with the cells they cover."""
    paper = read_paper() if paper is None else paper
    rows = results[results["table"] == table]
    wide = table_frame(rows, paper)
    title = {**TABLES, **EXTRA_TABLES}.get(table, table)
    notes = cell_notes(rows, paper_order(paper, table, "dataset"),
                       paper_order(paper, table, "model"))
    counts = status_counts(rows)
    runs = ("" if table == TIMING_TABLE  # Table 11: epochs timed, in its legend
            else runs_line(rows, paper_order(paper, table, "dataset")))
    md = (f"# {title}\n\n{legend_line(table)} Status of cells: "
          + ", ".join(f"{k} {v}" for k, v in counts.items()) + "."
          + (f" {runs}" if runs else "") + "\n\n" + to_markdown(wide))
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
    write_text(out_dir / f"{table}.md", md)
    write_text(out_dir / f"{table}.csv", wide.to_csv(index=False))
    write_text(out_dir / f"{table}.tex",
                 to_latex(wide, title, "" if table in EXTRA_TABLES and table not in COMPARED_WITH
                                  else "Ours (paper)"))
    return counts


LEGEND = ("Status per cell: `reproduced` (|ours - paper| <= max(1, 2 x paper std) points; "
          "Table 11's times: ratios to MLP and GCN within "
          f"{RATIO_TOLERANCE:.0%} of the paper's), `differs`, `stand-in` (our number comes from "
          "a clearly labelled stand-in protocol, e.g. a substitute for data that cannot be had; "
          "never counted as reproduced), `no-data` (the experiment exists but its data could not "
          "be fetched; the reason is in the table's notes), `paper-only` (no experiment built for "
          "this cell yet), `not-in-paper` (cells of our extra tables).")


def write_index(results: pd.DataFrame, reports: Path, figures_made: set[str],
                explanations: pd.DataFrame | None = None,
                figures_no_data: set[str] = frozenset(),
                device_section: list[str] | None = None,
                claims_section: list[str] | None = None,
                primary: str = "paper",
                sources_section: list[str] | None = None) -> None:
    """``reports/README.md``: the scorecard (cells per status, per paper table), then
    ``claims_section`` (the paper's claims with their verdicts), every table (paper order, then
    our extra tables) and figure of the paper with its status (``figures_no_data``: drawn, but
    their data could not be fetched; the figure says why), then ``device_section`` (where the
    numbers were computed); ``sources_section`` (each table's params, stages and code) after
    the figures. ``primary``: Table 9's variant (its cells are in Table 9 itself, so
    the extra tables named after it are not written; the other variant's always are)."""
    paper = read_paper()
    titles = {**TABLES, **EXTRA_TABLES}
    lines = ["# Reproduction report", "",
             "Regenerated by `dvc repro` (stage `report`); do not edit by hand. Every number comes "
             "from a pipeline run; the paper's numbers come from "
             "`src/twirls/reports/paper_numbers.csv`.", "", LEGEND, "",
             "## Scorecard", "",
             *scorecard_lines(scorecard(results, list(TABLES)), TABLES), ""]
    lines += [*(claims_section or []), "## Tables", "",
              "| table | files | cells by status |", "|---|---|---|"]
    for table, title in titles.items():
        if table in VARIANT_EXTRA_TABLES and table.endswith(f"-{primary}"):
            continue  # Table 9's primary variant: its cells are in Table 9 itself
        counts = write_table(results, table, reports / "tables", explanations, paper)
        files = " · ".join(f"[{ext}](tables/{table}.{ext})"
                           for ext in ("md", "csv", "tex"))
        lines.append(f"| {title} | {files} | "
                     + ", ".join(f"{k}: {v}" for k, v in counts.items()) + " |")
    lines += ["", "## Figures", "", "| paper figure | file | status |", "|---|---|---|"]
    for fig, title in FIGURES.items():
        made = fig in figures_made
        link = f"[{fig}.png](figures/{fig}.png)" if made else "—"
        status = ("no data (the figure says why)" if fig in figures_no_data
                  else "generated" if made else "not generated yet")
        lines.append(f"| {title} | {link} | {status} |")
    missing = [f"- {curve} ({FIGURES[fig].split(':')[0]}): {why}."
               for fig, curves in NOT_BUILT.items() for curve, why in curves]
    lines += ["", "Curves the paper draws that no stage runs:" + ("" if missing else " none."),
              *([""] + missing if missing else [])]
    lines += ["", *(sources_section or []),
              "All cells: [results.csv](results.csv). Each dataset as loaded (sizes, "
              "homophily, splits, or why it is missing): [datasets.md](datasets.md).", "",
              *(device_section or [])]
    write_text(reports / "README.md", "\n".join(lines))
