"""Did a rerun change any result? Per-run scores of ``results/`` against a git revision.

The project's rule is that a refactor changes no result: rerun stages, then compare each cell's
per-run scores (``extra.test_per_run``, else the mean; score metrics only) with the committed
ones. Scores within :data:`TOLERANCE` percentage points count as the same run (the float32
accuracy of older results, e.g. 71.52999997, against the exact fraction 71.53). The same
comparison measures how far a rerun on another machine moves the cells (CPU generations round
float32 kernels differently).

``python -m twirls.bench.rerun_diff --ref HEAD [--results DIR] [--out FILE]``: every cell of every
``*.json`` under ``DIR`` (default ``results``) whose file exists at ``--ref``, and the runs of a
stage new since ``--ref`` that an older stage ran (a stage split in two); prints a summary and
writes JSON (cells, the runs that moved, the largest moves of the mean, the cells moved per
table). It also sets the report beside its ``--ref`` version: the cells of
``reports/results.csv`` whose status changed, and the claims of ``reports/README.md`` whose
verdict or close calls changed.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from twirls.bench.pipeline import machine
from twirls.cells import IDENTITY, MEASURED, PER_RUN
from twirls.files import write_json
from twirls.reports.results import SCORE_METRICS

TOLERANCE = 1e-4  # percentage points: float32 accuracy vs the exact fraction differ by < 1e-5
#: table ids before each paper table had one name (issue 26): old prefix -> today's; a
#: ``<old>-<suffix>`` table (``attack-clean``) is ``<today's>-<suffix>`` (``table4-clean``)
RENAMED_TABLES = {"standard-benchmarks": "table2", "heterophily": "table3",
                  "geom-gcn-best-val": "table3-best-val", "attack": "table4",
                  "dataset-statistics": "table5", "citeseer-alpha-steps": "table8",
                  "truncation-T": "table9", "mlp-layers": "table10", "running-time": "table11",
                  "cws": "table12", "variant-comparison": "variants"}


def committed_text(path: Path, ref: str, repo: Path) -> str | None:
    """The file at ``ref`` (``git show``), or None when it did not exist there."""
    proc = subprocess.run(["git", "show", f"{ref}:{path.as_posix()}"], cwd=repo,
                          capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def current_table(table: Any) -> Any:
    """Today's id of a table named ``table`` in an older revision (:data:`RENAMED_TABLES`)."""
    for old, new in RENAMED_TABLES.items():
        if table == old or (isinstance(table, str) and table.startswith(f"{old}-")):
            return new + table[len(old):]
    return table


def cell_runs(cell: dict[str, Any]) -> list[float]:
    """A cell's per-run test scores, or its mean alone when the stage keeps no runs."""
    runs = (cell.get("extra") or {}).get("test_per_run")
    if runs:
        return [float(v) for v in runs]
    mean = cell.get("mean")
    return [] if mean is None else [float(mean)]


def compare_cells(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per cell present in both (matched by table, dataset, model, metric)."""
    def key(c: dict[str, Any]) -> tuple:
        return current_table(c.get("table")), c.get("dataset"), c.get("model"), c.get("metric")

    before = {key(c): c for c in old if isinstance(c, dict)}
    rows = []
    for cell in new:
        if not isinstance(cell, dict) or key(cell) not in before:
            continue
        if cell.get("metric") not in SCORE_METRICS:
            continue  # timings change on every run; counts (Table 5, parameters) are no runs
        a, b = cell_runs(before[key(cell)]), cell_runs(cell)
        if not a or not b:
            continue  # no-data cells
        runs_moved = (sum(abs(x - y) > TOLERANCE for x, y in zip(a, b, strict=True))
                      if len(a) == len(b)
                      else len(b))
        rows.append({"table": key(cell)[0], "dataset": key(cell)[1], "model": key(cell)[2],
                     "runs": len(b), "runs_moved": runs_moved, "moved": runs_moved > 0,
                     "mean_before": before[key(cell)].get("mean"), "mean_after": cell.get("mean"),
                     "std_before": before[key(cell)].get("std")})
    return rows


def compare_rows(old_csv: str, new_csv: str) -> list[dict[str, Any]]:
    """:func:`compare_cells` on two texts of a stage's rows (:mod:`twirls.cells`): the
    runs of one table, dataset, model, grid point, graph, variant and metric make a cell, runs
    are matched by split and seed; score metrics only. Sees what cells cannot: every point of a
    figure and every run of a sweep."""
    old, new = (pd.read_csv(io.StringIO(t), keep_default_na=False, dtype=str)
                for t in (old_csv, new_csv))
    if new.empty or old.empty:
        return []
    group = [c for c in new.columns if c not in (*PER_RUN, *MEASURED)] + ["metric"]
    if set(group) - set(old.columns):
        return []
    both = old.merge(new, on=[*group, *PER_RUN], suffixes=("_before", "_after"))
    both = both[both["metric"].isin(SCORE_METRICS)]
    out = []
    for key, runs in both.groupby(group, sort=False):
        ident = dict(zip(group, key, strict=True))
        grid = {k: v for k, v in ident.items() if k not in (*IDENTITY, "metric") and v != ""}
        a, b = runs["value_before"].astype(float), runs["value_after"].astype(float)
        moved = int(((a - b).abs() > TOLERANCE).sum())
        out.append({"table": ident["table"], "dataset": ident["dataset"],
                    "model": ident["model"] + (f" {grid}" if grid else ""),
                    "runs": len(runs), "runs_moved": moved, "moved": moved > 0,
                    "mean_before": float(a.mean()), "mean_after": float(b.mean()),
                    "std_before": float(a.std(ddof=0))})
    return out


def committed_rows(results: Path, ref: str, repo: Path) -> dict[str, str]:
    """The rows, at ``ref``, of every stage under ``results``, one CSV text per header (the
    files with the same columns joined): where a stage's rows were before a stage was split or
    renamed (``table4-twirls@`` -> ``table4-twirls-extra@``)."""
    listed = subprocess.run(["git", "ls-tree", "-r", "--name-only", ref, "--",
                             results.relative_to(repo).as_posix()], cwd=repo,
                            capture_output=True, text=True)
    bodies: dict[str, list[str]] = {}
    for name in listed.stdout.split():
        text = committed_text(Path(name), ref, repo) if name.endswith(".csv") else None
        if text is not None:
            header, _, body = text.partition("\n")
            bodies.setdefault(header.strip(), []).append(body)
    return {header: header + "\n" + "".join(parts) for header, parts in bodies.items()}


def compare_tree(results: Path, ref: str, repo: Path) -> list[dict[str, Any]]:
    """:func:`compare_cells` over every results file (``results``: a folder or one file) that
    ``ref`` also has; :func:`compare_rows` instead where both have the stage's rows. A stage's
    rows file that ``ref`` lacks is matched, run by run, against the rows of every stage at
    ``ref`` (:func:`committed_rows`), so runs that moved to a new stage are compared too."""
    rows = []
    pool: dict[str, str] | None = None  # committed_rows, read once when first needed
    for path in [results] if results.is_file() else sorted(results.rglob("*.json")):
        text = committed_text(path.relative_to(repo), ref, repo)
        runs_path = path.with_suffix(".csv")
        if text is None:
            if runs_path.is_file() and results.is_dir():
                new_runs = runs_path.read_text()
                if pool is None:
                    pool = committed_rows(results, ref, repo)
                old_runs = pool.get(new_runs.partition("\n")[0].strip())
                if old_runs is not None:
                    rows += [{"file": runs_path.relative_to(repo).as_posix(), **row}
                             for row in compare_rows(old_runs, new_runs)]
            continue
        old_runs = (committed_text(runs_path.relative_to(repo), ref, repo)
                    if runs_path.is_file() else None)
        if old_runs is not None:
            for row in compare_rows(old_runs, runs_path.read_text()):
                rows.append({"file": runs_path.relative_to(repo).as_posix(), **row})
            continue
        old, new = json.loads(text), json.loads(path.read_text())
        if isinstance(old, list) and isinstance(new, list):
            for row in compare_cells(old, new):
                rows.append({"file": path.relative_to(repo).as_posix(), **row})
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    moved = [r for r in rows if r["moved"]]
    shifts = [abs(r["mean_after"] - r["mean_before"]) for r in moved
              if r["mean_after"] is not None and r["mean_before"] is not None]
    largest = sorted(moved, key=lambda r: -abs((r["mean_after"] or 0) - (r["mean_before"] or 0)))
    return {"cells": len(rows), "cells_moved": len(moved),
            "runs": sum(r["runs"] for r in rows),
            "runs_moved": sum(r["runs_moved"] for r in rows),
            "largest_mean_shift": round(max(shifts), 4) if shifts else 0.0,
            "largest": [{k: r.get(k) for k in ("file", "model", "dataset", "runs", "runs_moved",
                                           "mean_before", "mean_after", "std_before")}
                        for r in largest[:15]]}


def moved_by_table(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per report table: its compared cells and how many of them moved."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        entry = out.setdefault(str(r["table"]), {"cells": 0, "cells_moved": 0})
        entry["cells"] += 1
        entry["cells_moved"] += int(r["moved"])
    return dict(sorted(out.items()))


def status_changes(old_csv: str, new_csv: str) -> list[dict[str, Any]]:
    """Cells of two ``results.csv`` texts whose status differs (cells in both)."""
    keys = ["table", "dataset", "model", "metric"]
    old, new = (pd.read_csv(io.StringIO(t)) for t in (old_csv, new_csv))
    old["table"] = old["table"].map(current_table)
    both = old.merge(new, on=keys, suffixes=("_before", "_after"))
    changed = both[both["status_before"] != both["status_after"]]
    cols = keys + ["mean_before", "mean_after", "paper_mean_after", "status_before",
                   "status_after"]
    return [{k: (None if pd.isna(v) else v) for k, v in row.items()}
            for row in changed[cols].to_dict("records")]


def claim_rows(readme: str) -> dict[str, dict[str, str]]:
    """The claims table of a ``reports/README.md`` text: claim number -> verdict, close calls."""
    out = {}
    for line in readme.splitlines():
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cols) == 6 and cols[0].isdigit():
            out[cols[0]] = {"verdict": cols[3].strip("*"), "close_calls": cols[4]}
    return out


def claim_changes(old_readme: str, new_readme: str) -> list[dict[str, str]]:
    """Claims whose verdict or close calls differ between two ``reports/README.md`` texts."""
    old, new = claim_rows(old_readme), claim_rows(new_readme)
    return [{"claim": k, **{f"{f}_before": old[k][f] for f in ("verdict", "close_calls")},
             **{f"{f}_after": new[k][f] for f in ("verdict", "close_calls")}}
            for k in new if k in old and old[k] != new[k]]


def report_changes(ref: str, repo: Path) -> dict[str, Any]:
    """:func:`status_changes` and :func:`claim_changes` of the workspace's report vs ``ref``'s."""
    out: dict[str, Any] = {}
    for name, path, compare in (("statuses_changed", "reports/results.csv", status_changes),
                                ("claims_changed", "reports/README.md", claim_changes)):
        old, new = committed_text(Path(path), ref, repo), repo / path
        if old is not None and new.is_file():
            out[name] = compare(old, new.read_text())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ref", default="HEAD", help="git revision holding the earlier results")
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--out", type=Path, help="write the comparison as JSON here")
    args = parser.parse_args(argv)
    repo = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                               text=True, check=True).stdout.strip())
    rows = compare_tree(args.results.resolve(), args.ref, repo)
    report = {"ref": args.ref, "rerun_on": machine(), **summary(rows),
              "moved_by_table": moved_by_table(rows), **report_changes(args.ref, repo),
              "moved": [r for r in rows if r["moved"]]}
    if args.out:
        write_json(args.out, report)
    print(json.dumps({k: v for k, v in report.items()
                      if k not in ("moved", "largest", "moved_by_table", "statuses_changed",
                                   "claims_changed")}))
    for change in report.get("statuses_changed", []):
        print(f"  status {change['status_before']} -> {change['status_after']}: "
              f"{change['table']} {change['dataset']} {change['model']} {change['metric']}")
    for change in report.get("claims_changed", []):
        print(f"  claim {change['claim']}: {change['verdict_before']} -> "
              f"{change['verdict_after']} (close calls: {change['close_calls_after']})")
    for r in report["largest"]:
        delta = (r["mean_after"] or math.nan) - (r["mean_before"] or math.nan)
        print(f"  {r['file']}: {r['model']} on {r['dataset']}: {r['runs_moved']}/{r['runs']} runs "
              f"moved, mean {r['mean_before']:.2f} -> {r['mean_after']:.2f} ({delta:+.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
