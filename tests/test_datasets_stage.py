"""The dataset-statistics stage: homophily and the explanation of edge-count differences."""

from __future__ import annotations

import torch

from twirls.data.graph import GraphData, Split, undirected_graph
from twirls.stages.datasets import edge_count_rule, explain, homophily, stats


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
