"""The ogbn-arxiv column of Table 2: our baselines, configured as in ``params.yaml``, replay the
forward pass of the leaderboard scripts the paper copied its numbers from, dropout masks
included; every arxiv experiment runs through the train stage on OGB-format files.

Each reference below is a plain-torch transcription of the published script's ``forward``
(dense ``Â``, functional batch norm), so it shares no code with the models.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch.nn import functional as F

from twirls.config.entries import train_entry
from twirls.data.graph import undirected_graph
from twirls.data.registry import STATUS_FILE
from twirls.models import GraphOps, build_model
from twirls.params import read_all
from twirls.train.experiment import prepare_features

from fixtures import REPO, write_ogb_arxiv

DT = torch.float64
N, D, C = 40, 12, 5
#: Table 2's ogbn-arxiv entries as written in params.yaml (the stage adds the dataset's defaults)
TABLE2_ARXIV = {k: v for k, v in read_all(REPO)[
    "table2"].items() if v["dataset"] == "ogbn-arxiv"}
#: ... and complete (split ``time``, ``feature_norm: none`` from twirls.data.defaults)
ARXIV = {k: train_entry(v) for k, v in TABLE2_ARXIV.items()}


def small(cfg: dict, **sizes) -> dict:
    """An arxiv ``model_cfg`` with smaller widths/depths (same switches)."""
    return {**cfg, **sizes}


def graph_and_features(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    g = undirected_graph(torch.randint(0, N, (100,), generator=gen),
                         torch.randint(0, N, (100,), generator=gen), N)
    x = torch.randn(N, D, dtype=DT, generator=gen)
    n = g.num_nodes()
    src, dst = g.edges()
    a = torch.eye(n, dtype=DT)
    a[dst, src] = 1.0
    d = a.sum(1).rsqrt()
    return g, x, d[:, None] * a * d[None, :]


def bn(x: torch.Tensor, module: torch.nn.Module) -> torch.Tensor:
    """Training-mode batch norm with the module's affine parameters (batch statistics)."""
    return F.batch_norm(x, None, None, module.weight, module.bias, training=True,
                        eps=module.eps)


def run_both(name: str, cfg: dict, reference) -> tuple[torch.Tensor, torch.Tensor]:
    """Our model and ``reference(model, x, adj)`` in training mode from the same RNG state."""
    g, x, adj = graph_and_features()
    torch.manual_seed(0)
    model = build_model(name, cfg, D, C).double().train()
    torch.manual_seed(1)
    ours = model(GraphOps.from_graph(g, dtype=DT), x)
    torch.manual_seed(1)
    return ours, reference(model, x, adj)


def test_every_arxiv_baseline_of_table_2_has_an_entry_with_raw_features():
    labels = {label for exp in ARXIV.values() for label in exp["cells"].values()}
    assert labels == {"SGC", "GCN", "APPNP", "JKNet", "GCNII", "DAGNN", "TWIRLS-base"}
    seeds = read_all(REPO)["train"]["seeds"]
    assert all(exp["feature_norm"] == "none" and exp["split"] == "time"
               and exp.get("seeds", seeds) == 10 for exp in ARXIV.values())  # OGB's 10 runs


def test_gcn_replays_the_ogb_example():
    """``examples/nodeproppred/arxiv/gnn.py``: conv → BN → ReLU → dropout, last conv plain."""
    cfg = small(ARXIV["ogbn-arxiv-gcn"]["model_cfg"], hidden=16)

    def reference(model, x, adj):
        for k, lin in enumerate(model.lins):
            x = adj @ x @ lin.weight.T + lin.bias
            if k < len(model.lins) - 1:
                x = F.dropout(F.relu(bn(x, model.norms[k])), 0.5, True)
        return x

    ours, ref = run_both("gcn", cfg, reference)
    assert torch.allclose(ours, ref, rtol=1e-10, atol=1e-12)


def test_jknet_replays_the_leaderboard_script():
    """conv → BN → ReLU → dropout per layer, the dropped outputs feed the next layer and a
    max jump, then a linear output layer."""
    cfg = small(ARXIV["ogbn-arxiv-jknet"]["model_cfg"], hidden=16, layers=3)

    def reference(model, x, adj):
        xs = []
        for conv, norm in zip(model.convs, model.norms, strict=True):
            x = adj @ x @ conv.weight.T + conv.bias
            x = F.dropout(F.relu(bn(x, norm)), 0.5, True)
            xs.append(x)
        return model.out(torch.stack(xs).amax(0))

    ours, ref = run_both("jknet", cfg, reference)
    assert torch.allclose(ours, ref, rtol=1e-10, atol=1e-12)


def test_dagnn_replays_the_authors_arxiv_script():
    """``lin1 → BN → ReLU → dropout → lin2``, then K propagations weighed by retain scores."""
    cfg = small(ARXIV["ogbn-arxiv-dagnn"]["model_cfg"], hidden=16, steps=4)

    def reference(model, x, adj):
        x = F.relu(bn(model.lins[0](x), model.norms[0]))
        x = model.lins[1](F.dropout(x, 0.2, True))
        preds = [x]
        for _ in range(4):
            preds.append(adj @ preds[-1])
        pps = torch.stack(preds, dim=1)
        score = torch.sigmoid(model.adjust.proj(pps)).squeeze(-1).unsqueeze(1)
        return torch.matmul(score, pps).squeeze(1)

    ours, ref = run_both("dagnn", cfg, reference)
    assert torch.allclose(ours, ref, rtol=1e-10, atol=1e-12)


def test_gcnii_dense_replays_the_authors_arxiv_script():
    """``GCNIIdense_model``: ``BN(Â(d + d W1) + α h0 + h0 W2)``, ReLU, plus the previous
    layer's (undropped) output."""
    cfg = small(ARXIV["ogbn-arxiv-gcnii"]["model_cfg"], hidden=16, layers=3)

    def reference(model, x, adj):
        h0 = F.relu(model.lin_in(F.dropout(x, 0.1, True)))
        hidden = [h0]
        x = h0
        for conv, norm in zip(model.convs, model.norms, strict=True):
            x = F.dropout(x, 0.1, True)
            support = x + x @ conv.weight1
            initial = 0.5 * h0 + h0 @ conv.weight2
            x = F.relu(bn(adj @ support + initial, norm)) + hidden[-1]
            hidden.append(x)
        return model.lin_out(F.dropout(x, 0.1, True))

    ours, ref = run_both("gcnii-dense", cfg, reference)
    assert torch.allclose(ours, ref, rtol=1e-10, atol=1e-12)


def test_gcnii_dense_without_layers_is_a_two_layer_mlp_and_checks_its_config():
    g, x, _ = graph_and_features(1)
    torch.manual_seed(0)
    model = build_model("gcnii-dense", {"layers": 0, "hidden": 8, "dropout": 0.0}, D, C)
    model = model.double().eval()
    expected = model.lin_out(F.relu(model.lin_in(x)))
    assert torch.allclose(model(GraphOps.from_graph(g, dtype=DT), x), expected, rtol=1e-12)
    for cfg, match in [({"layers": -1}, "layers must be an integer >= 0"),
                       ({"norm": "group"}, "norm must be one of"),
                       ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
                       ({"alpah": 0.1}, "unknown key 'alpah'.*Did you mean 'alpha'")]:
        with pytest.raises(ValueError, match=f"GCNIIDense config: {match}"):
            build_model("gcnii-dense", cfg, D, C)


@pytest.mark.parametrize(("name", "cfg"), [
    ("gcn", {"input_dropout": 1.5}), ("jknet", {"input_dropout": -0.1}),
    ("dagnn", {"norm": "batchnorm"}), ("gcn", {"norm": "group"}),
])
def test_new_switches_reject_bad_values_with_the_model_name(name, cfg):
    with pytest.raises(ValueError, match=r"(GCN|JKNet|DAGNN) config: (input_dropout|norm)"):
        build_model(name, cfg, D, C)


@pytest.mark.parametrize("name", ["gcn", "jknet", "dagnn"])
def test_input_dropout_zero_keeps_the_input_and_none_means_dropout(name):
    """Only the input's dropout changes: with ``input_dropout: 0`` a change of the input
    rate leaves the training-mode output (same RNG state) unchanged iff rates agree."""
    g, x, _ = graph_and_features(2)
    ops = GraphOps.from_graph(g, dtype=DT)

    def out(cfg: dict) -> torch.Tensor:
        torch.manual_seed(0)
        model = build_model(name, {"hidden": 8, "dropout": 0.5, **cfg}, D, C).double().train()
        torch.manual_seed(1)
        return model(ops, x)

    assert torch.equal(out({}), out({"input_dropout": None}))
    assert torch.equal(out({}), out({"input_dropout": 0.5}))
    assert not torch.equal(out({}), out({"input_dropout": 0.0}))


def test_signed_features_are_refused_by_row_normalisation():
    x = torch.tensor([[1.0, -1.0], [0.5, 0.5]])
    with pytest.raises(ValueError, match="negative entries.*feature_norm: none"):
        prepare_features(x, {"dataset": "ogbn-arxiv"})
    assert torch.equal(prepare_features(x, {"feature_norm": "none"}), x)


@pytest.mark.parametrize("name", sorted(ARXIV))
def test_arxiv_experiment_runs_through_the_train_stage(tmp_path, monkeypatch, name):
    """The real entry (two epochs, one seed, widths capped) on OGB-format files."""
    from twirls.stages import train

    folder = tmp_path / "raw" / "ogbn-arxiv"
    write_ogb_arxiv(folder, num_nodes=120, num_edges=400)
    (folder / STATUS_FILE).write_text(json.dumps({"status": "ok"}))  # as fetch@ogbn-arxiv
    exp = json.loads(json.dumps(TABLE2_ARXIV[name]))  # as written: the stage adds the defaults
    exp["seeds"] = 1
    exp["train_cfg"] = {**exp["train_cfg"], "epochs": 2}
    for key in ("hidden", "layers"):
        if key in exp["model_cfg"]:
            exp["model_cfg"][key] = min(exp["model_cfg"][key], 16 if key == "hidden" else 3)
    params = {"table2": {name: exp}, "train": {"seeds": 1}, "device": "cpu", "threads": 1,
              "jobs": 1, "budget_hours": 12}
    stages: list[str] = []
    monkeypatch.setattr(train, "open_stage", lambda stage: stages.append(stage) or params)
    assert train.main(["table2", name, "--raw", str(tmp_path / "raw"),
                       "--out", str(tmp_path)]) == 0
    assert stages == [f"table2@{name}"]
    cells = json.loads((tmp_path / "results" / "table2" / f"{name}.json").read_text())
    metrics = json.loads((tmp_path / "metrics" / "table2" / f"{name}.json").read_text())
    assert metrics["status"] == "ok" and cells[0]["runs"] == 1
    assert 0.0 <= cells[0]["mean"] <= 100.0


@pytest.mark.parametrize("name", ["ogbn-arxiv-gcn", "ogbn-arxiv-jknet", "ogbn-arxiv-gcnii",
                                  "ogbn-arxiv-dagnn"])
def test_every_parameter_of_the_arxiv_configs_gets_a_gradient(name):
    exp = ARXIV[name]
    g, x, _ = graph_and_features(3)
    cfg = small(exp["model_cfg"], hidden=16, **({"layers": 3} if "layers" in exp["model_cfg"]
                                                else {}))
    model = build_model(exp["model"], cfg, D, C).double().train()
    F.cross_entropy(model(GraphOps.from_graph(g, dtype=DT), x), torch.arange(N) % C).backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and bool(p.grad.abs().sum() > 0), pname
