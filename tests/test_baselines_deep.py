"""JKNet, GCNII and DAGNN against dense re-derivations, closed forms and DGL; a Cora smoke run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from twirls.data.graph import Graph, undirected_graph
from twirls.models import DAGNN, GCN, GCNII, MODELS, GraphOps, JKNet, build_model
from twirls.models.baselines.gcnii import dropout_linear, identity_strength
from twirls.models.baselines.jknet import jumping_knowledge
from twirls.train.loop import TrainConfig, set_seed, train_run

from requires import needs

DT = torch.float64
NAMES = ("jknet", "gcnii", "dagnn")
SMALL = {"jknet": {"layers": 3, "hidden": 8, "dropout": 0.0},
         "gcnii": {"layers": 4, "hidden": 8, "dropout": 0.0},
         "dagnn": {"steps": 3, "hidden": 8, "dropout": 0.0}}
PLANETOID = Path("/work/shared/datasets/kimiyoung__planetoid/data")


def random_graph(seed: int, n: int = 30, m: int = 70) -> Graph:
    gen = torch.Generator().manual_seed(seed)
    return undirected_graph(torch.randint(0, n, (m,), generator=gen),
                            torch.randint(0, n, (m,), generator=gen), n)


def features(n: int, d: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, d, dtype=DT, generator=torch.Generator().manual_seed(seed))


def dense_gcn_norm(g: Graph) -> torch.Tensor:
    """``D̃^-1/2 (A + I) D̃^-1/2`` built densely from the edge list (independent of GraphOps)."""
    n = g.num_nodes()
    src, dst = g.edges()
    a = torch.eye(n, dtype=DT)
    a[dst, src] = 1.0
    d = a.sum(1).rsqrt()
    return d[:, None] * a * d[None, :]


def bag_of_words(n: int, d: int, seed: int = 0, density: float = 0.05) -> torch.Tensor:
    """Sparse 0/1 features like Planetoid's (the sparse input path of :func:`dropout_linear`)."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(n, d, generator=gen) < density).to(DT)


def build(name: str, cfg: dict | None = None, in_dim: int = 6, out_dim: int = 3, seed: int = 0):
    torch.manual_seed(seed)
    return build_model(name, {**SMALL[name], **(cfg or {})}, in_dim, out_dim).double().eval()


# ------------------------------------------------------------------ interface
@pytest.mark.parametrize("name", NAMES)
def test_registered_shapes_and_rejects_unknown_keys(name):
    assert MODELS[name] is {"jknet": JKNet, "gcnii": GCNII, "dagnn": DAGNN}[name]
    with pytest.raises(ValueError, match="unknown key 'hiden'.*Did you mean 'hidden'"):
        build_model(name, {"hiden": 3}, 5, 2)
    ops = GraphOps.from_graph(random_graph(0, n=11, m=20))
    torch.manual_seed(0)
    out = build_model(name, None, 5, 2)(ops, torch.randn(11, 5))  # paper defaults
    assert out.shape == (11, 2) and bool(torch.isfinite(out).all())


@pytest.mark.parametrize(("name", "cfg", "match"), [
    ("jknet", {"mode": "lstm"}, "mode must be one of"),
    ("jknet", {"layers": 0}, "layers must be an integer >= 1"),
    ("gcnii", {"lam": -0.5}, "lam must be >= 0"),
    ("gcnii", {"alpha": 1.5}, r"alpha must be in \[0, 1\]"),
    ("dagnn", {"steps": -1}, "steps must be an integer >= 0"),
    ("dagnn", {"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
])
def test_invalid_values_name_the_model_and_key(name, cfg, match):
    with pytest.raises(ValueError, match=f"{MODELS[name].__name__} config: {match}"):
        build_model(name, cfg, 5, 2)


def test_dropout_linear_sparse_path_equals_dense_and_drops_only_nonzeros():
    ops = GraphOps.from_graph(random_graph(12, n=300, m=600), dtype=DT)
    x = bag_of_words(300, 40)
    torch.manual_seed(0)
    lin = torch.nn.Linear(40, 5).double()
    for p in (0.0, 0.7):  # p = 0 in training mode: same values and weight gradient as dense
        out = dropout_linear(ops, x, lin, p, training=False)
        assert ops._cache[("sparse_features",)][2] is not None  # went sparse
        assert torch.allclose(out, lin(x), rtol=1e-12, atol=1e-12)
    sparse_grad = torch.autograd.grad(dropout_linear(ops, x, lin, 0.0, True).square().sum(),
                                      lin.weight)[0]
    dense_grad = torch.autograd.grad(lin(x).square().sum(), lin.weight)[0]
    assert torch.allclose(sparse_grad, dense_grad, rtol=1e-10, atol=1e-12)

    identity = torch.nn.Linear(40, 40, bias=False).double()
    torch.nn.init.eye_(identity.weight)
    dropped = dropout_linear(ops, x, identity, 0.7, training=True).detach()
    kept = dropped != 0
    assert not bool((kept & (x == 0)).any())
    assert torch.allclose(dropped[kept], x[kept] / 0.3, rtol=1e-12)
    assert float(kept.sum() / (x != 0).sum()) == pytest.approx(0.3, abs=0.05)

    dense = features(300, 40)  # dense features: plain path, nothing sparse cached
    assert torch.allclose(dropout_linear(ops, dense, lin, 0.5, False), lin(dense), rtol=1e-12)
    assert ops._cache[("sparse_features",)][2] is None


# ------------------------------------------------------------------ JKNet
@pytest.mark.parametrize("mode", ["max", "cat"])
def test_jknet_aggregates_its_layer_outputs(mode):
    g = random_graph(1)
    ops, x, adj = GraphOps.from_graph(g, dtype=DT), features(30, 6), dense_gcn_norm(g)
    model = build("jknet", {"mode": mode, "layers": 4})
    hs = model.layer_outputs(ops, x)
    h = x
    for conv, got in zip(model.convs, hs, strict=True):  # h⁽ˡ⁾ = ReLU(Â h W + b)
        h = torch.relu(adj @ h @ conv.weight.T + conv.bias)
        assert torch.allclose(got, h, rtol=1e-10, atol=1e-12)
    stacked = torch.stack(hs)
    z = stacked.max(0).values if mode == "max" else torch.cat(hs, 1)
    if mode == "max":  # every entry is one of the layers' entries, and none is larger
        assert bool((stacked <= z).all()) and bool((stacked == z).any(0).all())
    assert torch.equal(jumping_knowledge(hs, mode), z)
    assert torch.allclose(model(ops, x), adj @ z @ model.out.weight.T + model.out.bias,
                          rtol=1e-10, atol=1e-12)
    model.final_propagation = False
    assert torch.allclose(model(ops, x), model.out(z), rtol=1e-10, atol=1e-12)


def test_jknet_with_one_layer_is_a_two_layer_gcn():
    g, x = random_graph(2), features(30, 6)
    ops = GraphOps.from_graph(g, dtype=DT)
    jk = build("jknet", {"layers": 1, "mode": "max"})
    gcn = GCN.from_config({"layers": 2, "hidden": 8, "dropout": 0.0}, 6, 3).double().eval()
    for lin, src in zip(gcn.lins, [jk.convs[0], jk.out], strict=True):
        lin.load_state_dict(src.state_dict())
    assert torch.allclose(jk(ops, x), gcn(ops, x), rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ GCNII
def test_gcnii_identity_strength_follows_log_lambda_over_l():
    model = build("gcnii", {"layers": 5, "lam": 0.5})
    betas = [conv.beta for conv in model.convs]
    assert betas == pytest.approx([math.log(0.5 / k + 1) for k in range(1, 6)], rel=1e-12)
    assert all(a > b > 0 for a, b in zip(betas, betas[1:], strict=False))
    assert identity_strength(0.0, 3) == 0.0


def test_gcnii_layers_match_the_dense_formula():
    """h⁽ˡ⁾ = ReLU(((1-α) Â h⁽ˡ⁻¹⁾ + α h⁽⁰⁾)((1-β_l) I + β_l W_l)) (GCNII eq. 5)."""
    g, x = random_graph(3), features(30, 6)
    adj, alpha = dense_gcn_norm(g), 0.3
    model = build("gcnii", {"alpha": alpha, "lam": 1.5})
    h0 = torch.relu(model.lin_in(x))
    h = h0
    for conv in model.convs:
        s = (1 - alpha) * adj @ h + alpha * h0
        h = torch.relu(s @ ((1 - conv.beta) * torch.eye(8, dtype=DT) + conv.beta * conv.weight))
    expected = model.lin_out(h)
    assert torch.allclose(model(GraphOps.from_graph(g, dtype=DT), x), expected, rtol=1e-10,
                          atol=1e-12)


def test_gcnii_with_alpha_one_ignores_the_graph():
    """α = 1: every layer sees only h⁽⁰⁾, h⁽ˡ⁾ = ReLU(h⁽⁰⁾((1-β_l) I + β_l W_l)): no graph."""
    x = features(30, 6)
    model = build("gcnii", {"alpha": 1.0})
    a = model(GraphOps.from_graph(random_graph(4), dtype=DT), x)
    b = model(GraphOps.from_graph(random_graph(5), dtype=DT), x)
    h0 = torch.relu(model.lin_in(x))
    conv = model.convs[-1]  # only the last layer matters: each one restarts from h⁽⁰⁾
    h = torch.relu(h0 @ ((1 - conv.beta) * torch.eye(8, dtype=DT) + conv.beta * conv.weight))
    assert torch.equal(a, b)
    assert torch.allclose(a, model.lin_out(h), rtol=1e-10, atol=1e-12)


@needs("dgl", "oracle: dgl.nn.APPNPConv")
def test_gcnii_with_lambda_zero_is_appnp_propagation():
    """λ = 0 ⇒ β_l = 0: each layer is an APPNP step (ReLU is inactive on h ≥ 0), checked
    against DGL's APPNPConv."""
    import dgl
    from dgl.nn import APPNPConv

    g = random_graph(6)
    x = features(30, 6).float()  # DGL's APPNPConv runs in float32
    torch.manual_seed(0)
    model = GCNII.from_config({"layers": 7, "hidden": 8, "alpha": 0.2, "lam": 0.0,
                               "dropout": 0.0}, 6, 3).eval()
    h0 = torch.relu(model.lin_in(x))
    expected = model.lin_out(APPNPConv(7, 0.2)(dgl.add_self_loop(g.to_dgl()), h0))
    assert torch.allclose(model(GraphOps.from_graph(g), x), expected, rtol=1e-5, atol=1e-6)


def test_gcnii_with_lambda_zero_reaches_pagerank():
    """λ = 0: many layers of APPNP steps reach PageRank's α (I - (1-α)Â)⁻¹ h⁽⁰⁾."""
    g = random_graph(6)
    deep = build("gcnii", {"layers": 300, "alpha": 0.2, "lam": 0.0})
    x64, adj = features(30, 6), dense_gcn_norm(g)
    h0 = torch.relu(deep.lin_in(x64))
    limit = 0.2 * torch.linalg.solve(torch.eye(30, dtype=DT) - 0.8 * adj, h0)
    out = deep(GraphOps.from_graph(g, dtype=DT), x64)
    assert torch.allclose(out, deep.lin_out(limit), rtol=1e-9, atol=1e-10)


def test_gcnii_param_groups_split_conv_and_dense_weight_decay():
    model = build("gcnii", {"conv_weight_decay": 0.01})
    groups = model.param_groups(5e-4)
    assert [grp["weight_decay"] for grp in groups] == [0.01, 5e-4]
    ids = [id(p) for grp in groups for p in grp["params"]]
    assert sorted(ids) == sorted(id(p) for p in model.parameters())  # each exactly once
    assert {id(p) for p in groups[0]["params"]} == {id(c.weight) for c in model.convs}
    opt = torch.optim.SGD(groups, lr=1.0)  # zero loss gradient: the step is the decay alone
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    conv, dense = model.convs[0].weight, model.lin_in.weight
    before = conv.detach().clone(), dense.detach().clone()
    opt.step()
    assert torch.allclose(conv.detach(), (1 - 0.01) * before[0], rtol=1e-12)
    assert torch.allclose(dense.detach(), (1 - 5e-4) * before[1], rtol=1e-12)


# ------------------------------------------------------------------ DAGNN
def test_dagnn_with_zero_steps_gates_its_mlp():
    """K = 0: out = σ(Z s + b) ⊙ Z with Z = MLP(X): the MLP's output, rescaled per node."""
    x = features(30, 6)
    model = build("dagnn", {"steps": 0})
    ops = GraphOps.from_graph(random_graph(7), dtype=DT)
    z = model.mlp(ops, x)
    gate = torch.sigmoid(z @ model.adjust.proj.weight.T + model.adjust.proj.bias)
    assert torch.allclose(model(ops, x), gate * z, rtol=1e-12, atol=1e-14)
    with torch.no_grad():  # a saturated gate passes the MLP through unchanged
        model.adjust.proj.weight.zero_()
        model.adjust.proj.bias.fill_(50.0)
    assert torch.allclose(model(GraphOps.from_graph(random_graph(8), dtype=DT), x), z,
                          rtol=1e-12, atol=1e-14)


def test_dagnn_mlp_with_three_layers_and_batch_norm():
    """``layers: 3``: Linear → BN → ReLU → Linear → BN → ReLU → Linear (Table 11's DAGNN)."""
    x = features(30, 6)
    model = build("dagnn", {"layers": 3, "norm": "batch"}).train()
    h = x
    for k, lin in enumerate(model.lins):
        h = lin(h)
        if k < 2:
            norm = model.norms[k]
            h = torch.relu(torch.nn.functional.batch_norm(h, None, None, norm.weight, norm.bias,
                                                          training=True, eps=norm.eps))
    assert torch.allclose(model.mlp(GraphOps.from_graph(random_graph(7), dtype=DT), x), h,
                          rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="DAGNN config: layers must be an integer >= 2"):
        build("dagnn", {"layers": 1})


def test_dagnn_matches_the_dense_adaptive_combination():
    """out_i = Σ_k σ((Â^k Z)_i s + b) (Â^k Z)_i (the DAGNN model)."""
    g, x = random_graph(9), features(30, 6)
    adj = dense_gcn_norm(g)
    model = build("dagnn", {"steps": 5})
    z = model.mlp(GraphOps.from_graph(g, dtype=DT), x)
    expected = torch.zeros_like(z)
    for k in range(6):
        h = torch.linalg.matrix_power(adj, k) @ z
        expected += torch.sigmoid(h @ model.adjust.proj.weight.T + model.adjust.proj.bias) * h
    assert torch.allclose(model(GraphOps.from_graph(g, dtype=DT), x), expected, rtol=1e-10,
                          atol=1e-12)
    scores = model.adjust.scores(model.adjust.representations(GraphOps.from_graph(g, dtype=DT), z))
    assert scores.shape == (30, 6) and bool(((scores > 0) & (scores < 1)).all())


# ------------------------------------------------------------------ training behaviour
@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_gets_a_gradient(name):
    ops, x = GraphOps.from_graph(random_graph(10), dtype=DT), bag_of_words(30, 6, density=0.2)
    model = build(name, {"dropout": 0.5}).train()
    torch.nn.functional.cross_entropy(model(ops, x), torch.arange(30) % 3).backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and bool(p.grad.abs().sum() > 0), pname


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_model_and_dropout(name):
    ops, x = GraphOps.from_graph(random_graph(11), dtype=DT), features(30, 6)

    def run(seed: int) -> torch.Tensor:
        model = build(name, {"dropout": 0.5}, seed=seed).train()
        set_seed(seed + 1)
        return model(ops, x)

    assert torch.equal(run(0), run(0))
    assert not torch.equal(run(0), run(1))


@pytest.mark.skipif(not (PLANETOID / "ind.cora.graph").exists(), reason="no Planetoid mirror")
@pytest.mark.parametrize(("name", "cfg", "lr"), [
    ("jknet", {"layers": 3, "hidden": 32}, 0.01),
    ("gcnii", {"layers": 4, "hidden": 64, "dropout": 0.5}, 0.05),
    ("dagnn", {"steps": 10}, 0.01),
])
def test_smoke_training_on_cora(tmp_path, name, cfg, lr):
    from twirls.data import planetoid

    for f in PLANETOID.glob("ind.cora.*"):
        (tmp_path / f.name).symlink_to(f)
    data = planetoid.load(tmp_path, "cora")
    x = data.features / data.features.sum(1, keepdim=True).clamp(min=1e-12)
    torch.set_num_threads(1)
    set_seed(0)
    model = build_model(name, cfg, data.num_features, data.num_classes)
    res = train_run(model, GraphOps.from_graph(data.graph), x, data.labels,
                    data.splits["public"], TrainConfig(epochs=40, lr=lr, weight_decay=5e-4),
                    seed=0)
    assert res.train > 0.9 and res.val > 0.7 and res.test > 0.7, res
