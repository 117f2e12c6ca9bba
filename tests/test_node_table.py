"""A learned input per node (``model_cfg.embedding``) for featureless graphs such as Amazon."""

from __future__ import annotations

import pytest
import torch

from twirls.data.amazon import load as load_amazon
from twirls.data.graph import undirected_graph
from twirls.models import TWIRLS, GraphOps, NodeTable, build_model
from twirls.train.experiment import run_inputs

from fixtures import write_amazon


def small_ops(n: int = 12, m: int = 30) -> GraphOps:
    gen = torch.Generator().manual_seed(0)
    g = undirected_graph(torch.randint(0, n, (m,), generator=gen),
                         torch.randint(0, n, (m,), generator=gen), n)
    return GraphOps.from_graph(g)


@pytest.mark.parametrize("name, cfg", [("gcn", {"hidden": 8}), ("sgc", {"steps": 2}),
                                       ("mlp", {})])
def test_embedding_wraps_a_model_and_its_table_learns(name, cfg):
    ops = small_ops()
    torch.manual_seed(0)
    model = build_model(name, {**cfg, "embedding": 6}, 0, 3, num_nodes=ops.n)
    assert isinstance(model, NodeTable) and model.table.shape == (ops.n, 6)
    before = model.table.detach().clone()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    loss = model(ops).logsumexp(-1).sum() - model(ops)[:, 0].sum()
    loss.backward()
    assert model.table.grad is not None and model.table.grad.abs().sum() > 0
    opt.step()
    assert not torch.equal(model.table, before)


def test_sgc_on_a_learned_input_is_the_propagated_table_times_w():
    """SGC caches ``S^K X`` for fixed features; a learned table must be propagated on every
    call (a cached copy would be stale after the first step and carry no gradient)."""
    ops = small_ops()
    torch.manual_seed(0)
    model = build_model("sgc", {"steps": 3, "embedding": 5}, 0, 2, num_nodes=ops.n)
    s = ops.gcn_norm().to_dense()
    for _ in range(2):
        out = model(ops)
        expected = torch.linalg.matrix_power(s, 3) @ model.table @ model.model.lin.weight.t()
        torch.testing.assert_close(out, expected + model.model.lin.bias, rtol=1e-5, atol=1e-7)
        out.sum().backward()
        with torch.no_grad():
            model.table.add_(1.0)  # the next call must see the new table
    assert model.table.grad.abs().sum() > 0


def test_twirls_keeps_its_own_embedding():
    model = build_model("twirls", {"steps": 2, "lam": 1.0, "alpha": 0.5, "embedding": 4}, 0, 3,
                        num_nodes=10)
    assert isinstance(model, TWIRLS) and model.embedding.shape == (10, 4)


@pytest.mark.parametrize("cfg, message", [
    ({"embedding": -2}, "embedding must be an integer >= 0"),
    ({"embedding": 2.5}, "embedding must be an integer >= 0"),
])
def test_bad_embedding_is_one_clear_error(cfg, message):
    with pytest.raises(ValueError, match=message):
        build_model("gcn", cfg, 0, 3, num_nodes=10)


def test_embedding_zero_is_the_plain_model():
    torch.manual_seed(0)
    plain = build_model("gcn", {"hidden": 8}, 5, 3)
    torch.manual_seed(0)
    zero = build_model("gcn", {"hidden": 8, "embedding": 0}, 5, 3)
    assert not isinstance(zero, NodeTable)
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(),
                                                 zero.state_dict().values(), strict=True))


def test_node_table_refuses_features_and_a_wrong_graph():
    ops = small_ops()
    model = build_model("gcn", {"embedding": 4}, 0, 3, num_nodes=ops.n)
    with pytest.raises(ValueError, match="takes no features"):
        model(ops, torch.zeros(ops.n, 4))
    with pytest.raises(ValueError, match="the graph has 7 nodes"):
        model(small_ops(n=7))


def test_featureless_dataset_without_embedding_is_one_clear_error(tmp_path):
    write_amazon(tmp_path)
    data = load_amazon(tmp_path)
    exp = {"model": "gcn", "model_cfg": {"hidden": 8}, "split": "0.05"}
    with pytest.raises(ValueError, match="amazon has no node features.*model_cfg.embedding"):
        run_inputs(exp, data, torch.device("cpu"), progress=False)
    inp = run_inputs({**exp, "model_cfg": {"hidden": 8, "embedding": 4}}, data,
                     torch.device("cpu"), progress=False)
    assert inp.x is None and inp.build()(inp.ops).shape == (data.num_nodes, data.num_classes)
    ignn = run_inputs({"model": "ignn", "model_cfg": {"hidden": 4}, "split": "0.05"}, data,
                      torch.device("cpu"), progress=False)  # IGNN's own U = I
    assert ignn.build()(ignn.ops, None).shape == (data.num_nodes, data.num_classes)
