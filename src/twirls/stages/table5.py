"""Stage ``table5``: statistics of every dataset next to the paper's Table 5.

Writes ``results/table5.json`` (cells of table ``table5``, each with the reason for
any difference from the paper; the report renders them as Table 5) and
``reports/datasets.{md,csv}``: how each dataset was loaded (status or the reason it is missing,
edge homophily, splits), which Table 5 does not show.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from twirls.cells import Cell, write_cells
from twirls.data.files import raw_file
from twirls.data.geom import read_edges
from twirls.data.graph import GraphData
from twirls.data.registry import DatasetUnavailable, load_dataset
from twirls.files import write_text
from twirls.reports.render import to_markdown
from twirls.reports.results import read_paper
from twirls.stages.skeleton import entry, open_stage

TABLE = "table5"
METRICS = ("nodes", "edges", "features", "classes")
HETEROPHILY = ("texas", "wisconsin", "actor", "cornell")
#: ways to count a Geom-GCN edge file's entries in H (section 5.3); the first is the graph the
#: models train on, the others are what an author may have counted (H2GCN's numbers, quoted by
#: the paper, come from its own copy of the data)
TREATMENTS = ("undirected edges without self-loops (ours)",
              "the file's directed entries with self-loops",
              "the file's directed entries without self-loops",
              "both directions, deduplicated, with self-loops")


def edge_homophily_counts(edges: np.ndarray, labels: np.ndarray) -> dict[str, tuple[int, int]]:
    """Same-class edges and all edges under each of :data:`TREATMENTS`, from the raw directed
    ``(m, 2)`` entries of ``out1_graph_edges.txt``."""
    loops = edges[:, 0] == edges[:, 1]
    counted = (np.unique(np.sort(edges[~loops], axis=1), axis=0), edges, edges[~loops],
               np.unique(np.concatenate([edges, edges[:, ::-1]]), axis=0))
    return {name: (int((labels[e[:, 0]] == labels[e[:, 1]]).sum()), len(e))
            for name, e in zip(TREATMENTS, counted, strict=True)}


def homophily_note(counts: dict[str, tuple[int, int]], paper: float | None) -> str:
    """Every treatment's H with its counts, and which of them give the paper's value (rounded
    as printed, to 2 decimals)."""
    parts = [f"{name}: {same}/{total} = {same / total:.3f}"
             for name, (same, total) in counts.items()]
    note = "H (same-class edges / edges) over " + "; ".join(parts)
    if paper is None:
        return note
    hits = [name for name, (same, total) in counts.items()
            if round(same / total, 2) == round(paper, 2)]
    return note + (f". The paper's {paper:.2f} (H2GCN's) is given by: {', '.join(hits)}" if hits
                   else f". None of these gives the paper's {paper:.2f} (H2GCN's)")


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
    parser.add_argument("--overview", type=Path, default=Path("reports/datasets"),
                        help="writes <overview>.md and <overview>.csv")
    args = parser.parse_args(argv)
    names = open_stage("table5")["table5"]["datasets"]
    paper = read_paper()
    homophily_paper = {r.dataset: r.mean for r in paper[
        (paper["table"] == "table3") & (paper["metric"] == "homophily")].itertuples()}
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
            counts = edge_homophily_counts(
                read_edges(raw_file(args.raw / name, "out1_graph_edges.txt")),
                data.labels.numpy())
            cells.append(Cell("table3", name, "dataset", "homophily", round(h, 2), runs=1,
                              note=homophily_note(counts, homophily_paper.get(name))))
        splits = "; ".join(f"{k}: {'/'.join(map(str, s.sizes()))}"
                           for k, s in list(data.splits.items())[:3])
        if len(data.splits) > 3:
            splits += f"; ... ({len(data.splits)} splits)"
        rows.append({"dataset": name, "status": "ok", **{m: ours[m] for m in METRICS},
                     "homophily": None if h is None else round(h, 3),
                     "splits (train/val/test)": splits, "note": ""})
    write_cells(args.cells, cells)
    table = pd.DataFrame(rows, columns=["dataset", "status", *METRICS, "homophily",
                                        "splits (train/val/test)", "note"])
    write_text(args.overview.with_suffix(".csv"), table.to_csv(index=False))
    shown = table.fillna("").astype(str).replace({r"\.0$": ""}, regex=True)
    md = ("# Datasets as loaded\n\nWhat each dataset's loader read (edges: undirected, without "
          "self-loops or duplicates; homophily: the same-class share of those edges; the first "
          "splits), or why a dataset is missing. The counts next to the paper's, with the reason "
          "for every difference, are Table 5: "
          "[tables/table5.md](tables/table5.md).\n\n"
          + to_markdown(shown))
    write_text(args.overview.with_suffix(".md"), md)
    missing = [r["dataset"] for r in rows if r["status"] != "ok"]
    print(f"datasets: {len(rows) - len(missing)} loaded"
          + (f", no data for {', '.join(missing)}" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
