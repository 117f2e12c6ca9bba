"""Stage ``report``: ``reports/results.csv``, every table (md/csv/tex) and ``reports/README.md``.

Inputs come from params (``report.cells``, ``report.figures``), never from globbing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from twirls.params import load_params
from twirls.reports.render import write_atomic, write_index
from twirls.reports.results import COLUMNS, build_results, read_cells, read_paper


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reports", type=Path, default=Path("reports"))
    args = parser.parse_args(argv)
    params = load_params("report")["report"]
    cells = [c for path in params["cells"] for c in read_cells(Path(path))]
    results = build_results(cells, read_paper())
    write_atomic(args.reports / "results.csv", results[COLUMNS].to_csv(index=False))
    write_index(results, args.reports, set(params.get("figures") or []))
    counts = results["status"].value_counts().to_dict()
    print("results.csv:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
