"""The table5 stage: homophily and the explanation of edge-count differences."""

from __future__ import annotations

import numpy as np
import torch

from twirls.data.graph import GraphData, Split, undirected_graph
from twirls.stages.table5 import (
    TREATMENTS,
    edge_count_rule,
    edge_homophily_counts,
    explain,
    homophily,
    homophily_note,
    stats,
)


def toy(meta: dict) -> GraphData:
    # a triangle 0-1-2 plus the edge 2-3; labels 0,0,1,1
    g = undirected_graph(torch.tensor([0, 1, 2, 2]), torch.tensor([1, 2, 0, 3]), 4)
    empty = torch.tensor([], dtype=torch.long)
    return GraphData("toy", g, torch.eye(4), torch.tensor([0, 0, 1, 1]),
                     {"s": Split(torch.arange(2), empty, torch.arange(2, 4))}, meta=meta)


def test_homophily_is_the_share_of_same_label_edges():
    # edges 0-1 (same), 1-2 (diff), 0-2 (diff), 2-3 (same)
    assert homophily(toy({})) == 0.5


def test_edge_rule_names_the_matching_count():
    data = toy({"raw_directed_edges": 9, "raw_self_loops": 1})
    assert stats(data)["edges"] == 4
    assert "equals the raw directed entries without self-loops" in edge_count_rule(8, data)
    assert "no simple count" in edge_count_rule(11, data)
    assert "equals the directed edges (ours, both directions)" in edge_count_rule(8, toy({}))


def test_explain_is_empty_when_everything_matches():
    data = toy({})
    assert explain(stats(data), {"nodes": 4, "edges": 4, "features": 4, "classes": 2}, data) == ""
    assert explain(stats(data), {"classes": 3}, data).startswith("classes:")


def test_homophily_under_each_treatment_of_the_raw_entries():
    """Raw entries 0->1, 1->0 (one undirected same-class edge twice), 1->2, 2->2 (a self-loop),
    2->3; labels 0,0,1,1. By hand: undirected without loops {0-1, 1-2, 2-3}: 2 of 3 same;
    raw with the loop: 4 of 5; raw without: 3 of 4; both directions deduplicated with the loop:
    {0>1, 1>0, 1>2, 2>1, 2>2, 2>3, 3>2}: 5 of 7."""
    edges = np.array([[0, 1], [1, 0], [1, 2], [2, 2], [2, 3]])
    counts = edge_homophily_counts(edges, np.array([0, 0, 1, 1]))
    assert list(counts.values()) == [(2, 3), (4, 5), (3, 4), (5, 7)]
    assert list(counts) == list(TREATMENTS)
    note = homophily_note(counts, 0.8)
    assert "4/5 = 0.800" in note and note.endswith(
        "given by: the file's directed entries with self-loops")
    assert homophily_note(counts, 0.9).endswith("None of these gives the paper's 0.90 (H2GCN's)")

