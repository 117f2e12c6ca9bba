"""Stage ``report``: ``reports/results.csv``, every table (md/csv/tex) and ``reports/README.md``.

Inputs come from params, never from globbing: ``report.cells`` and ``report.figures``, plus
``results/train/<name>.json`` for every entry of ``experiments`` and ``results/robust/<name>.json``
for every entry of ``robust`` and ``robust_attn``.
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
    declared = load_params("report")
    params = declared["report"]
    files = [Path(p) for p in params["cells"]]
    files += [Path("results/train") / f"{name}.json" for name in declared.get("experiments", {})]
    for group in ("robust", "robust_attn"):
        files += [Path("results/robust") / f"{name}.json" for name in declared.get(group, {})]
    cells = [c for path in files for c in read_cells(path)]
    results = build_results(cells, read_paper())
    write_atomic(args.reports / "results.csv", results[COLUMNS].to_csv(index=False))
    write_index(results, args.reports, set(params.get("figures") or []))
    counts = results["status"].value_counts().to_dict()
    print("results.csv:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
