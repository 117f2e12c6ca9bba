"""MLP, SGC, GCN and APPNP against DGL's layers and closed forms; oversmoothing (paper Sec. 2.2)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from twirls.data.graph import undirected_graph
from twirls.models import APPNP, GCN, MLP, SGC, GraphOps, build_model
from twirls.models.baselines.gcn import GCNConfig
from twirls.models.baselines.sgc import SGCConfig, sgc_features
from twirls.models.energy import closed_form
from twirls.models.propagation import PropagationSpec, iterates

from requires import needs

DT = torch.float64


def random_graph(seed: int, n: int = 40, m: int = 100):
    gen = torch.Generator().manual_seed(seed)
    return undirected_graph(torch.randint(0, n, (m,), generator=gen),
                            torch.randint(0, n, (m,), generator=gen), n)


def connected_graph(seed: int, n: int = 40, extra: int = 60):
    """A random spanning tree plus random edges: one connected component."""
    gen = torch.Generator().manual_seed(seed)
    parent = (torch.rand(n - 1, generator=gen) * torch.arange(1, n)).long()
    src = torch.cat([torch.arange(1, n), torch.randint(0, n, (extra,), generator=gen)])
    dst = torch.cat([parent, torch.randint(0, n, (extra,), generator=gen)])
    return undirected_graph(src, dst, n)


def features(n: int, d: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, d, dtype=DT, generator=torch.Generator().manual_seed(seed))


@needs("dgl", "oracle: dgl.nn.GraphConv")
def test_gcn_equals_dgl_graphconv_stack():
    import dgl
    from dgl.nn import GraphConv

    g = random_graph(0)
    x = features(40, 12)
    torch.manual_seed(0)
    model = GCN.from_config({"layers": 3, "hidden": 8, "dropout": 0.0}, 12, 4).double().eval()
    convs = [GraphConv(a.in_features, a.out_features, norm="both").double()
             for a in model.lins]
    for conv, lin in zip(convs, model.lins, strict=True):
        conv.weight.data.copy_(lin.weight.T)
        conv.bias.data.copy_(lin.bias)
    h, gs = x, dgl.add_self_loop(g.to_dgl())
    for k, conv in enumerate(convs):
        h = conv(gs, h)
        h = h.relu() if k < len(convs) - 1 else h
    out = model(GraphOps.from_graph(g, dtype=DT), x)
    assert torch.allclose(out, h, rtol=1e-10, atol=1e-10)


def test_sgc_propagates_k_times_once_and_caches():
    g = random_graph(1)
    ops = GraphOps.from_graph(g, dtype=DT)
    x = features(40, 6)
    model = SGC.from_config({"steps": 3}, 6, 2).double()
    adj = ops.gcn_norm().to_dense()
    expected = torch.linalg.matrix_power(adj, 3) @ x
    out = model(ops, x)
    assert torch.allclose(out, model.lin(expected), rtol=1e-10, atol=1e-12)
    cached = ops._cache[("sgc", 3)][2]
    out.sum().backward()
    model(ops, x)
    assert ops._cache[("sgc", 3)][2] is cached and not cached.requires_grad
    assert model.lin.weight.grad is not None


@needs("dgl", "oracle: dgl.nn.APPNPConv")
def test_appnp_equals_dgl_appnpconv():
    import dgl
    from dgl.nn import APPNPConv

    g = random_graph(2)
    x = features(40, 5).float()  # DGL's APPNPConv only runs in float32
    torch.manual_seed(0)
    model = APPNP.from_config({"steps": 7, "alpha": 0.2, "hidden": 8, "dropout": 0.0},
                              5, 3).eval()
    h = model.mlp(x)
    expected = APPNPConv(7, 0.2)(dgl.add_self_loop(g.to_dgl()), h)
    out = model(GraphOps.from_graph(g), x)
    assert torch.allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_mlp_ignores_the_graph():
    x = features(40, 5)
    torch.manual_seed(0)
    model = MLP.from_config({"layers": 2, "hidden": 8}, 5, 3).double().eval()
    a = model(GraphOps.from_graph(random_graph(3), dtype=DT), x)
    b = model(GraphOps.from_graph(random_graph(4), dtype=DT), x)
    assert torch.equal(a, b)


def test_oversmoothing_sgc_collapses_twirls_converges_to_closed_form():
    """Paper Sec. 2.2 / Fig. "Accuracy versus propagation steps": as steps grow, SGC's rows
    (rescaled by D̃^-1/2) become one vector c; TWIRLS-base reaches (I + λL)⁻¹ f and stays there."""
    g = connected_graph(5)
    ops = GraphOps.from_graph(g, dtype=DT)
    x = features(40, 6)
    inv_root = (ops.deg + 1).rsqrt()[:, None]

    def spread(h: torch.Tensor) -> float:
        h = h / torch.linalg.norm(h)
        return float(torch.linalg.norm(h - h.mean(0)))

    def sgc(steps: int) -> torch.Tensor:
        return inv_root * sgc_features(ops, x, steps)

    sgc_spread = [spread(sgc(k)) for k in (0, 2, 16, 256)]
    assert sgc_spread[3] < 1e-3 * sgc_spread[0]
    assert sgc_spread[0] > sgc_spread[1] > sgc_spread[2] > sgc_spread[3]

    lam = 1.0
    ys = list(iterates(ops, x, PropagationSpec(256, lam, 0.5)))
    target = closed_form(ops, x, lam)
    assert torch.allclose(ys[256], target, rtol=1e-8, atol=1e-10)
    assert spread(ys[256]) > 0.3 * spread(x)  # not collapsed
    assert spread(ys[256]) == pytest.approx(spread(ys[128]), rel=1e-6)


@pytest.mark.parametrize("name", ["mlp", "sgc", "gcn", "appnp"])
def test_from_config_rejects_unknown_keys(name):
    with pytest.raises(ValueError, match="unknown key 'hiden'"):
        build_model(name, {"hiden": 3}, 5, 2)
    assert build_model(name, None, 5, 2)(GraphOps.from_graph(random_graph(0, n=7, m=9)),
                                         torch.randn(7, 5)).shape == (7, 2)


def test_config_dataclass_holds_the_defaults():
    """A params.yaml section becomes the model's frozen config dataclass: the keys it gives
    over the dataclass's defaults; building from the dataclass or the dict is the same model."""
    assert GCNConfig.from_mapping(None) == GCNConfig.from_mapping({}) == GCNConfig()
    cfg = GCNConfig.from_mapping({"hidden": 8, "layers": 3})
    assert cfg == GCNConfig(layers=3, hidden=8) and cfg.dropout == GCNConfig.dropout
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.hidden = 4  # type: ignore[misc]
    with pytest.raises(ValueError, match="GCN config: unknown key 'hiden'.*Did you mean 'hidden'"):
        GCNConfig.from_mapping({"hiden": 8})
    torch.manual_seed(0)
    a = GCN(5, 2, cfg)
    torch.manual_seed(0)
    b = GCN.from_config({"hidden": 8, "layers": 3}, 5, 2)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_gat_equals_the_dense_attention_formula():
    """GAT eqs. 1-6 written densely: per head, softmax over ``N(i) ∪ {i}`` of
    ``LeakyReLU(a_r·Wh_i + a_l·Wh_j)``; hidden heads concatenated (ELU), output heads averaged."""
    g, x, n = random_graph(3), features(40, 6), 40
    torch.manual_seed(0)
    model = build_model("gat", {"layers": 2, "hidden": 4, "heads": 3, "out_heads": 2,
                                "dropout": 0.0, "attn_dropout": 0.0}, 6, 3).double().eval()
    src, dst = g.edges()
    mask = torch.eye(n, dtype=torch.bool)
    mask[dst, src] = True

    def layer(conv, h):
        heads, width = conv.heads, conv.out_dim
        wh = (h @ conv.fc.weight.T).view(n, heads, width)
        left = (wh * conv.attn_l).sum(-1)  # a_l · W h_j, (n, heads)
        right = (wh * conv.attn_r).sum(-1)  # a_r · W h_i
        e = torch.nn.functional.leaky_relu(right[:, None] + left[None, :], 0.2)
        att = torch.softmax(e.masked_fill(~mask[:, :, None], float("-inf")), dim=1)
        return torch.einsum("ijh,jho->iho", att, wh) + conv.bias.view(1, heads, width)

    hidden = torch.nn.functional.elu(layer(model.convs[0], x).flatten(1))
    expected = layer(model.out, hidden).mean(1)
    assert torch.allclose(model(GraphOps.from_graph(g, dtype=DT), x), expected, rtol=1e-10,
                          atol=1e-12)
    with pytest.raises(ValueError, match=r"GAT config: attn_dropout must be in \[0, 1\)"):
        build_model("gat", {"attn_dropout": 1.0}, 6, 3)


def test_graphsage_equals_the_dense_mean_aggregator():
    """``h_i' = W_self h_i + W_neigh mean_{j ∈ N(i)} h_j + b``, ReLU between layers; a node
    without neighbours aggregates zeros."""
    g, x, n = random_graph(4), features(40, 6), 40
    torch.manual_seed(0)
    model = build_model("graphsage", {"layers": 2, "hidden": 5, "dropout": 0.0}, 6, 3)
    model = model.double().eval()
    src, dst = g.edges()
    a = torch.zeros(n, n, dtype=DT)
    a[dst, src] = 1.0
    mean = a / a.sum(1, keepdim=True).clamp(min=1.0)

    def layer(conv, h):
        return h @ conv.fc_self.weight.T + conv.fc_self.bias + mean @ h @ conv.fc_neigh.weight.T

    expected = layer(model.convs[1], torch.relu(layer(model.convs[0], x)))
    assert torch.allclose(model(GraphOps.from_graph(g, dtype=DT), x), expected, rtol=1e-10,
                          atol=1e-12)


def test_h2gcn_two_hop_neighbourhood_on_a_path():
    """Path 0-1-2-3-4: exact two-hop neighbours are {2}, {3}, {0, 4}, {1}, {2}; the node itself
    and its neighbours are excluded; normalisation is D₂^-1/2 A₂ D₂^-1/2."""
    from twirls.models.baselines.h2gcn import hop_adjacencies

    g = undirected_graph(torch.arange(4), torch.arange(1, 5), 5)
    a1, a2 = hop_adjacencies(GraphOps.from_graph(g, dtype=DT))
    pairs = {tuple(p) for p in a2.to_dense().nonzero().tolist()}
    assert pairs == {(0, 2), (2, 0), (1, 3), (3, 1), (2, 4), (4, 2)}
    d = torch.tensor([1.0, 1.0, 2.0, 1.0, 1.0], dtype=DT).rsqrt()
    expected = torch.zeros(5, 5, dtype=DT)
    for i, j in pairs:
        expected[i, j] = d[i] * d[j]
    assert torch.allclose(a2.to_dense(), expected)
    d1 = torch.tensor([1.0, 2.0, 2.0, 2.0, 1.0], dtype=DT).rsqrt()
    expected1 = torch.zeros(5, 5, dtype=DT)
    for i in range(4):
        expected1[i, i + 1] = expected1[i + 1, i] = d1[i] * d1[i + 1]
    assert torch.allclose(a1.to_dense(), expected1)


def test_h2gcn_equals_the_dense_formula():
    """``[ReLU(X W_e) ‖ Ā₁ r ‖ Ā₂ r ‖ (round 2)] W_c + b`` with dense hop matrices."""
    g, x, n = random_graph(5), features(40, 6), 40
    torch.manual_seed(0)
    model = build_model("h2gcn", {"hidden": 4, "rounds": 2, "dropout": 0.0}, 6, 3).double()
    src, dst = g.edges()
    a = torch.zeros(n, n, dtype=DT)
    a[dst, src] = 1.0
    two = ((a @ a) > 0) & (a == 0) & ~torch.eye(n, dtype=torch.bool)

    def norm(m: torch.Tensor) -> torch.Tensor:
        m = m.to(DT)
        deg = m.sum(1)
        d = torch.where(deg > 0, deg.clamp(min=1).rsqrt(), torch.zeros_like(deg))
        return d[:, None] * m * d[None, :]

    a1, a2 = norm(a), norm(two)
    r0 = torch.relu(x @ model.embed.weight.T)
    r1 = torch.cat([a1 @ r0, a2 @ r0], 1)
    r2 = torch.cat([a1 @ r1, a2 @ r1], 1)
    expected = model.classify(torch.cat([r0, r1, r2], 1))
    out = model(GraphOps.from_graph(g, dtype=DT), x)
    assert torch.allclose(out, expected, rtol=1e-10, atol=1e-12)
    # the hand-written sparse backward (M symmetric) gives the dense formula's gradient
    grads = [torch.autograd.grad(o.square().sum(), model.embed.weight)[0] for o in (out, expected)]
    assert torch.allclose(grads[0], grads[1], rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="H2GCN config: rounds must be an integer >= 1"):
        build_model("h2gcn", {"rounds": 0}, 6, 3)


def test_sgc_seeds_reach_the_same_optimum():
    """SGC is a weight-decayed softmax regression on fixed features S^K X: a strictly convex
    problem, so seeds that start from independent weights end at the same weights and the same
    predictions (why Table 2's SGC cell on Citeseer has a near-zero std over seeds), but only
    once trained enough."""
    from twirls.data.graph import Split
    from twirls.train.loop import TrainConfig, set_seed, train_run

    ops = GraphOps.from_graph(connected_graph(3, n=60, extra=120))
    x = features(60, 12, seed=1).float()
    labels = torch.arange(60) % 3
    split = Split(torch.arange(0, 30), torch.arange(30, 40), torch.arange(40, 60))

    def fit(seed: int, epochs: int) -> tuple[torch.Tensor, torch.Tensor]:
        set_seed(seed)
        model = SGC(12, 3, SGCConfig(steps=2))
        start = model.lin.weight.detach().clone()
        train_run(model, ops, x, labels, split, TrainConfig(epochs=epochs, lr=0.2,
                                                            weight_decay=5e-3), seed=seed)
        return start, model.lin.weight.detach().clone()

    (a0, a), (b0, b) = fit(0, 400), fit(1, 400)
    assert (a0 - b0).norm() > 0.5 * a0.norm()  # independent starts
    assert (a - b).norm() < 1e-3 * a.norm()  # one optimum
    _, early = fit(1, 3)
    assert (early - a).norm() > 10 * (a - b).norm()  # not yet there after 3 epochs


@pytest.mark.parametrize("normalized", [False, True])
def test_closed_form_model_is_eq2_and_its_gradient_is_autograds(normalized):
    """``twirls-closed-form``: ``(I + λL)⁻¹ f(X; W)`` (eq. 2), its backward through the stored
    transpose ``Mᵀ`` giving autograd's gradient of ``M @ f``, bit for bit."""
    ops = GraphOps.from_graph(connected_graph(6), dtype=torch.float32)
    x = features(40, 6).float()
    cfg = {"lam": 2.0, "mlp_before": 2, "hidden": 8, "normalized": normalized}
    model = build_model("twirls-closed-form", cfg, 6, 3)
    out = model(ops, x)
    assert torch.allclose(out, closed_form(ops, model.f(x), 2.0, normalized=normalized),
                          atol=1e-5)
    out.square().sum().backward()
    ours = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    (model.inverse(ops) @ model.f(x)).square().sum().backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(ours, model.parameters(), strict=True))
    assert torch.equal(model.inverse_t(ops), model.inverse(ops).t())
