"""IGNN (Gu et al., 2020): fixed point, implicit gradient, ∞-norm projection, config."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from twirls.data.graph import undirected_graph
from twirls.models import GraphOps, build_model
from twirls.models.baselines.ignn import (
    IGNN,
    ImplicitGraph,
    perron_frobenius_bound,
    project_norm_inf,
)

DT = torch.float64


def small_graph(seed: int = 0, n: int = 14, m: int = 30) -> GraphOps:
    gen = torch.Generator().manual_seed(seed)
    g = undirected_graph(torch.randint(0, n, (m,), generator=gen),
                         torch.randint(0, n, (m,), generator=gen), n)
    return GraphOps.from_graph(g, dtype=DT)


def layer(in_dim: int, hidden: int, kappa: float = 0.9, **kw) -> ImplicitGraph:
    torch.manual_seed(0)
    lay = ImplicitGraph(in_dim, hidden, kappa=kappa, **kw).double()
    with torch.no_grad():  # start far outside the ball so the projection is active
        lay.weight.mul_(5.0)
    return lay


def test_forward_reaches_fixed_point():
    ops = small_graph()
    x = torch.randn(ops.n, 5, dtype=DT, generator=torch.Generator().manual_seed(1))
    lay = layer(5, 6, tol=1e-10)
    h = lay(ops, x)
    iters, residual = lay.last_forward
    assert residual < 1e-10 and iters < lay.max_iter
    adj = ops.gcn_norm().to_dense()
    fixed = F.relu(adj @ h @ lay.weight.t() + adj @ x @ lay.omega)
    assert torch.allclose(h, fixed, atol=1e-9)
    assert (h > 0).any()  # not the trivial zero state


def test_projection_bounds_inf_norm():
    ops = small_graph()
    lam = perron_frobenius_bound(ops.gcn_norm())
    eig = torch.linalg.eigvalsh(ops.gcn_norm().to_dense()).abs().max().item()
    assert lam == pytest.approx(1.0, abs=1e-9) and lam >= eig - 1e-9  # D̃^-1/2 Ã D̃^-1/2: ρ = 1
    lay = layer(5, 6, kappa=0.7)
    assert lay.weight.abs().sum(1).max() > 0.7  # starts outside
    lay.project_(ops)
    norm = lay.weight.detach().abs().sum(1).max().item()
    assert norm <= 0.7 / lam + 1e-12
    assert norm == pytest.approx(0.7 / (lam + 1e-5), rel=1e-9)  # the violating rows hit the sphere


def test_projection_is_the_euclidean_projection():
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(7, 9, dtype=DT, generator=gen)
    w[2] *= 0.01  # one row already inside: unchanged
    p = project_norm_inf(w, 1.5)
    assert torch.equal(p[2], w[2])
    assert (p.abs().sum(1) <= 1.5 + 1e-12).all()
    # the projection onto the ℓ1 ball: no point of the ball is closer (random feasible probes)
    for row in range(7):
        probes = torch.randn(2000, 9, dtype=DT, generator=gen)
        probes = probes / probes.abs().sum(1, keepdim=True) * 1.5 * torch.rand(
            2000, 1, dtype=DT, generator=gen)
        assert (probes - w[row]).norm(dim=1).min() >= (p[row] - w[row]).norm() - 1e-12
    # the same map as IGNN's row-by-row projection_norm_inf (ascending sort, shrink)
    for row in range(7):
        a = w[row].abs()
        if a.sum() <= 1.5:
            continue
        s, count = a.sum().item() - 1.5, float(a.numel())
        for v in a.sort().values.tolist():
            if s / count > v:
                s, count = s - v, count - 1
            else:
                break
        ref = w[row].sign() * (a - s / count).clamp(min=0)
        assert torch.allclose(p[row], ref, atol=1e-12)


@pytest.mark.parametrize("features", [True, False])
def test_implicit_gradient_equals_unrolled(features: bool):
    ops = small_graph(seed=2)
    adj = ops.gcn_norm().to_dense()
    x = torch.randn(ops.n, 4, dtype=DT, generator=torch.Generator().manual_seed(5))
    lay = layer(4 if features else 0, 5, kappa=0.9, tol=1e-13, backward_tol=1e-13,
                num_nodes=ops.n)
    lay.project_(ops)
    target = torch.randn(ops.n, 5, dtype=DT, generator=torch.Generator().manual_seed(6))

    h = lay(ops, x if features else None)
    loss = (h * target).sum() + h.pow(2).sum()
    grads = torch.autograd.grad(loss, [lay.weight, lay.omega])
    assert lay.last_backward[1] < 1e-13

    # unrolled: 600 plain iterations from zero, differentiated by autograd (contraction ≤ 0.9)
    w, omega = lay.weight.detach().clone().requires_grad_(), lay.omega.detach().clone()
    omega.requires_grad_()
    b = adj @ (x @ omega) if features else adj @ omega
    u = torch.zeros(ops.n, 5, dtype=DT)
    for _ in range(600):
        u = F.relu(adj @ u @ w.t() + b)
    assert torch.allclose(h, u, atol=1e-11)
    ref = torch.autograd.grad((u * target).sum() + u.pow(2).sum(), [w, omega])
    for g, r in zip(grads, ref, strict=True):
        assert torch.allclose(g, r, rtol=1e-7, atol=1e-10)


def test_model_forward_backward_and_clipping():
    ops = small_graph()
    x = torch.rand(ops.n, 6, dtype=DT, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = build_model("ignn", {"hidden": 8, "clip_grad_norm": 0.01}, 6, 3).double()
    out = model(ops, x)
    assert out.shape == (ops.n, 3)
    F.cross_entropy(out, torch.arange(ops.n) % 3).backward()
    for p in model.parameters():
        assert p.grad is not None and p.grad.norm() <= 0.01 + 1e-9
    # Amazon: no features, a learned vector per node
    amazon = IGNN.from_config({"hidden": 8, "normalize": False, "kappa": 0.95}, 0, 4,
                              num_nodes=ops.n).double()
    assert amazon(ops, None).shape == (ops.n, 4)


def test_from_config_rejects_unknown_and_bad_keys():
    with pytest.raises(ValueError, match="unknown key 'kapa'.*'kappa'"):
        IGNN.from_config({"kapa": 0.9}, 5, 2)
    with pytest.raises(ValueError, match="kappa"):
        IGNN.from_config({"kappa": 1.5}, 5, 2)
    with pytest.raises(ValueError, match="num_nodes"):
        IGNN.from_config({}, 0, 2)


def test_ignn_learns_short_chains():
    """IGNN's Chains protocol (its train_IGNN_chains.py settings), 200 epochs, chains of 10."""
    from twirls.data.chains import generate
    from twirls.train.loop import TrainConfig, run_seeds

    data = generate(length=10)
    ops = GraphOps.from_graph(data.graph)
    cfg = {"hidden": 16, "kappa": 0.9, "dropout": 0.5, "normalize": True, "clip_grad_norm": 0.5}
    res = run_seeds(lambda: build_model("ignn", cfg, data.num_features, 2), ops, data.features,
                    data.labels, data.splits["ignn"],
                    TrainConfig(epochs=200, lr=0.01, weight_decay=5e-4), [0])
    assert res.runs[0].test == 1.0
