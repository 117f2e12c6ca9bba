"""Stage ``table5``: statistics of every dataset next to the paper's Table 5.

Writes ``results/table5.json`` (cells of table ``dataset-statistics``) and
``reports/tables/datasets.{md,csv}`` with one row per dataset and the reason for every difference.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from twirls.data.graph import GraphData
from twirls.data.registry import DatasetUnavailable, load_dataset
from twirls.reports.render import to_markdown, write_atomic
from twirls.reports.results import Cell, read_paper, write_cells
from twirls.stages.skeleton import entry, open_stage

TABLE = "dataset-statistics"
METRICS = ("nodes", "edges", "features", "classes")
HETEROPHILY = ("texas", "wisconsin", "actor", "cornell")
HOMOPHILY_NOTE = ("H over our undirected edges without self-loops is {h:.3f}; over the raw "
                  "file's directed entries with self-loops it is {raw:.3f}, the count behind "
                  "the paper's (H2GCN's) numbers")


def homophily(data: GraphData) -> float | None:
    """Edge homophily ratio H of the paper's section 5.3 (single-label data only)."""
    if data.labels.dim() != 1 or data.graph.num_edges() == 0:
        return None
    src, dst = data.graph.edges()
    return int((data.labels[src] == data.labels[dst]).sum()) / src.numel()


def stats(data: GraphData) -> dict[str, float]:
    return {
        "nodes": data.num_nodes,
        "edges": data.num_undirected_edges,
        "features": data.num_features,
        "classes": data.num_classes,
    }


def edge_count_rule(paper_edges: int, data: GraphData) -> str:
    """Find which way of counting the raw files gives the paper's edge number, if any."""
    ours = data.num_undirected_edges
    raw = data.meta.get("raw_directed_edges")
    loops = data.meta.get("raw_self_loops", 0)
    candidates = {}  # counts of the raw files first: they say where the paper's number came from
    if raw is not None:
        candidates.update({
            "raw directed entries of the files": raw,
            "raw directed entries without self-loops": raw - loops,
            "raw directed entries / 2 (duplicates kept)": raw / 2,
        })
    candidates["directed edges (ours, both directions)"] = 2 * ours
    matches = [name for name, value in candidates.items() if value == paper_edges]
    facts = f"we count {ours:,} undirected edges without self-loops or duplicates"
    if raw is not None:
        facts += f"; the raw files hold {raw:,} directed entries ({loops:,} self-loops)"
    if matches:
        return f"{facts}; the paper's {paper_edges:,} equals the {matches[0]}"
    return f"{facts}; no simple count of these files gives the paper's {paper_edges:,}"


def explain(ours: dict, paper: dict, data: GraphData) -> str:
    """Why a statistic differs from the paper, from facts the loader recorded."""
    reasons = []
    if paper.get("edges") is not None and ours["edges"] != paper["edges"]:
        reasons.append("edges: " + edge_count_rule(int(paper["edges"]), data))
    for key in ("nodes", "features", "classes"):
        if paper.get(key) is not None and ours[key] != paper[key]:
            reasons.append(f"{key}: {data.meta.get(key + '_note', 'see the loader docstring')}")
    return "; ".join(reasons)


@entry
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    parser.add_argument("--cells", type=Path, default=Path("results/table5.json"))
    parser.add_argument("--tables", type=Path, default=Path("reports/tables"))
    args = parser.parse_args(argv)
    names = open_stage("table5")["table5"]["datasets"]
    paper = read_paper()
    paper = paper[paper["table"] == TABLE]

    cells: list[Cell] = []
    rows = []
    for name in names:
        expected = {r.metric: r.mean for r in paper[paper["dataset"] == name].itertuples()}
        try:
            data = load_dataset(name, args.raw)
        except DatasetUnavailable as exc:
            reason = str(exc)
            cells += [Cell(TABLE, name, "dataset", m, status="no-data", note=reason)
                      for m in METRICS if m in expected]
            rows.append({"dataset": name, "status": "no-data", "note": reason})
            continue
        ours = stats(data)
        note = explain(ours, expected, data)
        cells += [Cell(TABLE, name, "dataset", m, mean=float(v), runs=1, note=note)
                  for m, v in ours.items() if m in expected]
        h = homophily(data)
        if name in HETEROPHILY and h is not None:
            raw_h = data.meta.get("raw_edge_homophily")
            cells.append(Cell("heterophily", name, "dataset", "homophily", round(h, 2), runs=1,
                              note=HOMOPHILY_NOTE.format(h=h, raw=raw_h)))
        splits = "; ".join(f"{k}: {'/'.join(map(str, s.sizes()))}"
                           for k, s in list(data.splits.items())[:3])
        if len(data.splits) > 3:
            splits += f"; ... ({len(data.splits)} splits)"
        rows.append({"dataset": name, "status": "ok",
                     **{m: ours[m] for m in METRICS},
                     **{f"paper_{m}": expected.get(m) for m in METRICS},
                     "homophily": None if h is None else round(h, 3),
                     "splits (train/val/test)": splits, "note": note})
    write_cells(args.cells, cells)
    table = pd.DataFrame(rows)
    write_atomic(args.tables / "datasets.csv", table.to_csv(index=False))
    shown = table.fillna("").astype(str).replace({r"\.0$": ""}, regex=True)
    md = ("# Datasets (paper Table 5)\n\nOur statistics next to the paper's. Edges are undirected "
          "edges without self-loops or duplicates; every difference is explained in `note`.\n\n"
          + to_markdown(shown))
    write_atomic(args.tables / "datasets.md", md)
    missing = [r["dataset"] for r in rows if r["status"] != "ok"]
    print(f"datasets: {len(rows) - len(missing)} loaded"
          + (f", no data for {', '.join(missing)}" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
