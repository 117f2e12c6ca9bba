"""Sparse CSR features give the same model outputs and gradients as dense ones."""

from __future__ import annotations

import torch

from twirls.data.graph import undirected_graph
from twirls.models import GraphOps, build_model
from twirls.models.layers import dropout


def graph_and_features(n: int = 30, d: int = 50, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, n, (80,), generator=gen), torch.randint(0, n, (80,), generator=gen)
    x = (torch.rand(n, d, generator=gen) < 0.1).float()
    return GraphOps.from_graph(undirected_graph(src, dst, n)), x


def outputs_and_grads(model, ops, x):
    model.zero_grad()
    out = model(ops, x)
    out.square().sum().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]


def test_twirls_and_closed_form_same_with_sparse_features():
    ops, x = graph_and_features()
    configs = [("twirls", {"steps": 4, "lam": 1.0, "alpha": 1.0, "mlp_before": 2, "hidden": 8}),
               ("twirls", {"steps": 4, "lam": 1.0, "alpha": 0.5, "mlp_before": 1,
                           "attention": {"p": 0.1, "tau": 0.2, "T": 2.0}}),
               ("twirls-closed-form", {"lam": 1.0, "mlp_before": 2, "hidden": 8})]
    for name, cfg in configs:
        torch.manual_seed(0)
        model = build_model(name, cfg, x.shape[1], 3).eval()
        dense = outputs_and_grads(model, ops, x)
        sparse = outputs_and_grads(model, ops, x.to_sparse_csr())
        torch.testing.assert_close(sparse[0], dense[0], rtol=1e-5, atol=1e-6)
        for gs, gd in zip(sparse[1], dense[1], strict=True):
            torch.testing.assert_close(gs, gd, rtol=1e-5, atol=1e-6)


def test_baselines_same_with_sparse_features():
    ops, x = graph_and_features()
    for name, cfg in [("mlp", {"layers": 2, "hidden": 8, "input_dropout": 0.3}),
                      ("mlp", {"layers": 1}),
                      ("gcn", {"layers": 2, "hidden": 8}),
                      ("gcn", {"layers": 1}),
                      ("appnp", {"steps": 3, "layers": 2, "hidden": 8})]:
        torch.manual_seed(0)
        model = build_model(name, cfg, x.shape[1], 3).eval()
        assert model.accepts_sparse
        dense = outputs_and_grads(model, ops, x)
        sparse = outputs_and_grads(model, ops, x.to_sparse_csr())
        torch.testing.assert_close(sparse[0], dense[0], rtol=1e-5, atol=1e-6)
        for gs, gd in zip(sparse[1], dense[1], strict=True):
            torch.testing.assert_close(gs, gd, rtol=1e-5, atol=1e-6)
        model.train()  # training mode (sparse dropout) runs and gives finite outputs
        assert torch.isfinite(model(ops, x.to_sparse_csr())).all()


def test_sparse_dropout_is_dense_dropout_on_stored_entries():
    _, x = graph_and_features()
    torch.manual_seed(1)
    out = dropout(x.to_sparse_csr(), 0.5, True).to_dense()
    kept = out != 0
    assert kept.sum() < (x != 0).sum()  # some entries dropped
    assert ((x == 0) <= (out == 0)).all()  # zeros stay zero
    torch.testing.assert_close(out[kept], 2 * x[kept])  # survivors scaled by 1 / (1 - p)
    assert dropout(x.to_sparse_csr(), 0.5, False).layout == torch.sparse_csr
