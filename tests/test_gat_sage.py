"""GAT and GraphSAGE on torch-native layers (no DGL) against DGL 2.1's ``GATConv`` / ``SAGEConv``,
the layers the committed GAT and GraphSAGE numbers were computed with (``make test-reference``).

On a generated graph with isolated nodes (the GAT layer sees the pattern's self-loops, as DGL's
graph from ``GraphOps.dgl_graph(self_loops=True)`` did): from the same seed the same parameters;
with dropout off the same outputs and gradients to 1e-5 (float32); with dropout on, from the
same seed, the same dropout draws, hence the same outputs again.
"""

from __future__ import annotations

import pytest
import torch

from twirls.data.graph import undirected_graph
from twirls.models import GraphOps, build_model
from twirls.models.baselines.gat import GATConv, edge_softmax
from twirls.models.baselines.graphsage import SAGEConv

from requires import needs_dgl

TOL = dict(rtol=1e-5, atol=1e-5)


def generated_graph(n: int = 40, edges: int = 70, isolated: int = 5) -> GraphOps:
    """A random symmetric graph whose last ``isolated`` nodes have no edge."""
    gen = torch.Generator().manual_seed(3)
    src = torch.randint(0, n - isolated, (edges,), generator=gen)
    dst = torch.randint(0, n - isolated, (edges,), generator=gen)
    ops = GraphOps.from_graph(undirected_graph(src, dst, n))
    assert int((ops.deg == 0).sum()) >= isolated
    return ops


def layers(kind: str, in_dim: int, out_dim: int, drop: float):
    """Ours and DGL's layer of ``kind``, each built after ``torch.manual_seed(0)``."""
    dgl_nn = pytest.importorskip("dgl.nn")
    torch.manual_seed(0)
    if kind == "gat":
        ours = GATConv(in_dim, out_dim, 3, feat_drop=drop, attn_drop=drop)
    else:
        ours = SAGEConv(in_dim, out_dim, feat_drop=drop)
    torch.manual_seed(0)
    if kind == "gat":
        ref = dgl_nn.GATConv(in_dim, out_dim, 3, feat_drop=drop, attn_drop=drop)
    else:
        ref = dgl_nn.SAGEConv(in_dim, out_dim, "mean", feat_drop=drop)
    return ours, ref


# (kind, in, out): SAGE maps before averaging when in > out, after otherwise
CASES = [("gat", 12, 5), ("sage", 12, 5), ("sage", 4, 9)]


@needs_dgl
@pytest.mark.parametrize(("kind", "in_dim", "out_dim"), CASES)
def test_same_seed_same_parameters_as_dgl(kind, in_dim, out_dim):
    ours, ref = layers(kind, in_dim, out_dim, 0.0)
    mine, theirs = ours.state_dict(), ref.state_dict()
    theirs = {k: v for k, v in theirs.items() if v is not None}
    assert set(mine) == set(theirs)
    for key, value in mine.items():
        assert torch.equal(value, theirs[key]), key


@needs_dgl
@pytest.mark.parametrize(("kind", "in_dim", "out_dim"), CASES)
@pytest.mark.parametrize("drop", [0.0, 0.5])
def test_outputs_and_gradients_equal_dgls(kind, in_dim, out_dim, drop):
    ops = generated_graph()
    graph = ops.dgl_graph(self_loops=kind == "gat")
    ours, ref = layers(kind, in_dim, out_dim, drop)
    x = torch.rand(ops.n, in_dim, generator=torch.Generator().manual_seed(5))
    x_ours, x_ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    torch.manual_seed(7)  # the dropout draws of both, in the same order over the same edges
    out = ours(ops, x_ours)
    torch.manual_seed(7)
    expected = ref(graph, x_ref)
    torch.testing.assert_close(out, expected, **TOL)
    weight = torch.rand(expected.shape, generator=torch.Generator().manual_seed(9))
    (out * weight).sum().backward()
    (expected * weight).sum().backward()
    torch.testing.assert_close(x_ours.grad, x_ref.grad, **TOL)
    params = dict(ref.named_parameters())
    for name, param in ours.named_parameters():
        torch.testing.assert_close(param.grad, params[name].grad, **TOL, msg=name)
    if kind == "sage" and drop == 0.0:  # a node without neighbours: only its own term, as DGL
        lonely = ops.deg == 0
        torch.testing.assert_close(out[lonely], ours.fc_self(x[lonely]), **TOL)


def test_edge_softmax_sums_to_one_per_node_and_matches_a_dense_softmax():
    ops = generated_graph()
    scores = torch.randn(ops.row.numel(), 2, generator=torch.Generator().manual_seed(1)) * 30
    alpha = edge_softmax(scores, ops.row, ops.n)
    totals = torch.zeros(ops.n, 2).index_add(0, ops.row, alpha)
    torch.testing.assert_close(totals, torch.ones(ops.n, 2))
    dense = torch.full((ops.n, ops.n, 2), -torch.inf)
    dense[ops.row, ops.col] = scores
    expected = torch.softmax(dense, dim=1)[ops.row, ops.col]
    torch.testing.assert_close(alpha, expected)


@pytest.mark.parametrize("name", ["gat", "graphsage"])
def test_models_train_without_dgl_and_take_sparse_features(name):
    ops = generated_graph()
    torch.manual_seed(0)
    model = build_model(name, {"hidden": 4} if name == "gat" else {"hidden": 8}, 12, 3)
    x = torch.rand(ops.n, 12)
    dense = model.eval()(ops, x)
    sparse = model(ops, x.to_sparse_csr())
    torch.testing.assert_close(dense, sparse)
    assert dense.shape == (ops.n, 3)
    model.train()
    loss = torch.nn.functional.cross_entropy(model(ops, x), torch.arange(ops.n) % 3)
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    model.eval()  # CSR features stay sparse: the same gradients as from dense ones

    def grads(x_in):
        model.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(ops, x_in), torch.arange(ops.n) % 3)
        loss.backward()
        return [p.grad.clone() for p in model.parameters()]

    for a, b in zip(grads(x), grads(x.to_sparse_csr()), strict=True):
        torch.testing.assert_close(a, b)
