"""Stage ``report``: ``reports/results.csv``, every table (md/csv/tex) and ``reports/README.md``.

Inputs come from params, never from globbing: ``report.cells`` and ``report.figures``, plus the
results file of every stage that the table groups define (:func:`twirls.reports.stage_outputs.
stage_outputs`: ``results/table2/<name>.json`` for every entry of ``table2``, Table 4's grid, the
sweeps' ``results/<sweep>.json`` whose ``metrics/<sweep>.json`` says whether its figure had data),
and the ``metrics/`` file of each of those stages (and of ``energy``) for the device it ran on.
The paper's claims (``src/twirls/reports/claims.yaml``) get verdicts computed from these cells
and the sweeps' points; ``reports/headline.json`` (``--headline``) holds the key cells for
``dvc exp show``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from twirls.config.schema import SWEEP_GROUPS
from twirls.files import write_text
from twirls.reports.cell_runs import CellRuns
from twirls.reports.claims import Values, read_claims
from twirls.reports.claims_section import claims_lines, verdicts
from twirls.reports.devices import device_counts, device_lines, stack_counts
from twirls.reports.explanations import read_explanations
from twirls.reports.headline import headline, write_headline
from twirls.reports.render import TABLES, write_index
from twirls.reports.results import COLUMNS, build_results, read_cells, read_paper, with_primary
from twirls.reports.scorecard import PAPER_STATUSES, scorecard, totals
from twirls.reports.stage_outputs import results_files, stage_outputs
from twirls.reports.sweep_points import read_sweep_points
from twirls.stages.skeleton import entry, open_stage

CSV_FLOAT = "%.4f"  # results.csv: one fixed format (4 decimals); tables show 2
SOURCES = Path("docs/sources.md")  # its table is copied into reports/README.md


def figures_present(reports: Path, names: set[str]) -> set[str]:
    """The declared figures whose ``reports/figures/<name>.png`` exists (a stage run one by one
    may not have drawn its figure yet: the index must not claim it)."""
    return {name for name in names if (reports / "figures" / f"{name}.png").exists()}


def sweeps_without_data(metrics: Path, names: set[str]) -> set[str]:
    """The sweeps whose ``metrics/<name>.json`` says ``no-data``: their figure is drawn but only
    says why (the dataset could not be fetched)."""
    out = set()
    for name in names:
        path = metrics / f"{name}.json"
        if path.exists() and json.loads(path.read_text()).get("status") == "no-data":
            out.add(name)
    return out


@entry
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reports", type=Path, default=Path("reports"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics"),
                        help="where the stages' metrics files are (sweep points, devices)")
    parser.add_argument("--headline", type=Path, default=Path("reports/headline.json"))
    args = parser.parse_args(argv)
    declared = open_stage("report")
    params = declared["report"]
    stages = stage_outputs(declared)
    files = [Path(p) for p in params["cells"]] + results_files(declared)
    missing = [path for path in files if not path.exists()]
    for path in missing:  # only when stages were run one by one; `dvc repro` runs them all
        print(f"report: {path} not written yet (its stage has not run); its cells stay "
              f"paper-only", file=sys.stderr)
    primary = declared["table9"].get("primary", "paper")  # Table 9's variant (the rule: docs)
    cells, runs = [], CellRuns()
    for path in (p for p in files if p.exists()):
        for cell in read_cells(path):
            named = with_primary(cell, primary)
            cells.append(named)
            runs.add((named.table, named.dataset, named.model, named.metric),
                     path.with_suffix(".csv"), asdict(cell))
    results = build_results(cells, read_paper())
    # numbers are rounded only where they are shown
    write_text(args.reports / "results.csv",
                 results[COLUMNS].to_csv(index=False, float_format=CSV_FLOAT))
    declared_figures = set(params.get("figures") or []) | set(SWEEP_GROUPS)
    metrics_files = {family: [o.metrics for o in outs] for family, outs in stages.items()}
    metrics_files["energy"] = [
        Path("metrics/energy") / f"{fig.removeprefix('energy-per-step-')}.json"
        for fig in params.get("figures") or [] if fig.startswith("energy-per-step-")]
    sweeps = {name: read_sweep_points(Path("results") / f"{name}.csv") for name in SWEEP_GROUPS}
    judged = verdicts(read_claims(), Values(results, sweeps, runs=runs),
                      Values(results, {}, "paper_mean"))
    write_index(results, args.reports, figures_present(args.reports, declared_figures),
                read_explanations(results),
                sweeps_without_data(args.metrics, set(SWEEP_GROUPS)),
                device_lines(device_counts(metrics_files), stack_counts(metrics_files)),
                claims_lines(judged), primary=primary, sources_section=sources_section())
    paper_totals = totals(scorecard(results, list(TABLES)))
    write_headline(args.headline, headline(results, paper_totals))
    print(count_line(results, paper_totals))
    return 0


def sources_section(path: Path = SOURCES) -> list[str]:
    """The table of ``docs/sources.md`` (each paper table's and figure's params files, stages,
    script and output, written from ``dvc.yaml`` by ``python -m twirls.dag sources --write``; a
    test keeps it in step) under its own heading, its links made relative to ``reports/``."""
    rows = [line.replace("](../reports/", "](") for line in path.read_text().splitlines()
            if line.startswith("|")]
    return ["## Where each table and figure comes from", "",
            "Change a value in a table's params file and `dvc repro` reruns its stages (from "
            "`dvc.yaml`, as in [docs/sources.md](../docs/sources.md)).", "", *rows, ""]


def count_line(results: pd.DataFrame, paper_totals: dict[str, int]) -> str:
    """What the stage prints: the scorecard's totals over the paper's tables (the same numbers
    as reports/README.md), then the rows of our extra tables apart."""
    extra = results[~results["table"].isin(list(TABLES))]
    line = "paper cells (scorecard): " + ", ".join(
        f"{status} {paper_totals[status]}" for status in PAPER_STATUSES)
    return line + f"; extra tables: {len(extra)} rows of results.csv"


if __name__ == "__main__":
    sys.exit(main())
