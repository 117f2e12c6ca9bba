"""The plain-tensor graph type, its DGL view, and the refusal of dense n x n on large graphs."""

from __future__ import annotations

import pytest
import torch

from twirls.data.graph import Graph, undirected_graph
from twirls.models.graph_ops import DENSE_MAX_NODES, GraphOps
from twirls.models.twirls import TWIRLS

from requires import needs


def test_undirected_graph_is_symmetric_simple_and_plain_tensors():
    g = undirected_graph(torch.tensor([0, 1, 1, 2, 3]), torch.tensor([1, 0, 1, 3, 2]), 5)
    assert isinstance(g, Graph) and g.num_nodes() == 5 and g.num_edges() == 4
    pairs = set(zip(*(t.tolist() for t in g.edges()), strict=True))
    assert pairs == {(0, 1), (1, 0), (2, 3), (3, 2)}  # loop 1-1 and the duplicate dropped
    assert torch.equal(g.edge_index, torch.stack([g.src, g.dst]))
    with pytest.raises(ValueError, match="1-D of equal length"):
        Graph(torch.zeros(3, dtype=torch.int64), torch.zeros(2, dtype=torch.int64), 4)


@needs("dgl", "Graph.to_dgl builds a DGLGraph")
def test_to_dgl_keeps_nodes_and_edge_ids():
    g = undirected_graph(torch.tensor([0, 2, 4]), torch.tensor([1, 3, 0]), 6)
    d = g.to_dgl()
    assert d.num_nodes() == 6  # node 5 is isolated and kept
    src, dst = d.edges()
    assert torch.equal(src, g.src) and torch.equal(dst, g.dst)
    # GraphOps reads either the same way
    a, b = GraphOps.from_graph(g), GraphOps.from_graph(d)
    assert torch.equal(a.col, b.col) and torch.equal(a.crow, b.crow)


def test_no_dense_n_by_n_on_large_graphs():
    n = DENSE_MAX_NODES + 1
    ops = GraphOps.from_graph(undirected_graph(torch.arange(n - 1), torch.arange(1, n), n))
    with pytest.raises(ValueError, match="refusing a dense 50,001 x 50,001 matrix"):
        ops.laplacian_dense()
    with pytest.raises(ValueError, match="refusing a dense"):
        ops.gcn_norm().to_dense()
    # the sparse model runs at this size
    model = TWIRLS.from_config({"steps": 2, "lam": 1.0, "alpha": 1.0}, 3, 2)
    assert model(ops, torch.randn(n, 3)).shape == (n, 2)
