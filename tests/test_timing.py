"""Table 11 (stage ``table11``): the configured models have the paper's parameter counts, and the
stage times every model on the graph it says it used."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from twirls.models import build_model
from twirls.params import read_all
from twirls.reports.results import read_paper
from twirls.timing import EpochTimer, count_parameters, random_graph, time_round_robin

from fixtures import REPO

TIMING = read_all(REPO)["table11"]
#: models whose layers allow the paper's exact count (the others: closest hidden size).
EXACT = {"MLP", "GCN", "JKNet", "DAGNN", "TWIRLS-base", "TWIRLS*-base", "TWIRLS", "TWIRLS*"}


def paper_parameters() -> pd.Series:
    paper = read_paper()
    rows = paper[(paper.table == "table11") & (paper.metric == "parameters")]
    return rows.set_index("model")["mean"]


def test_every_model_of_table_11_is_configured():
    assert set(TIMING["models"]) == set(paper_parameters().index)


@pytest.mark.parametrize("label", sorted(TIMING["models"]))
def test_parameter_counts_match_the_paper(label):
    spec = TIMING["models"][label]
    sizes = TIMING["random_sizes"]
    model = build_model(spec["model"], spec["model_cfg"], sizes["features"], sizes["classes"])
    ours, paper = count_parameters(model), int(paper_parameters()[label])
    if label in EXACT:
        assert ours == paper
    else:
        assert abs(ours - paper) / paper < 0.005, (ours, paper)


def test_random_graph_has_exactly_the_requested_edges():
    g = random_graph(500, 1200, seed=3)
    src, dst = g.edges()
    assert g.num_nodes() == 500 and g.num_edges() == 2 * 1200
    assert not bool((src == dst).any())
    pairs = set(zip(src.tolist(), dst.tolist(), strict=True))
    assert all((d, s) in pairs for s, d in pairs)


def test_round_robin_times_every_model_in_train_and_eval_mode():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5),
                                torch.nn.Linear(8, 3))
    x, labels = torch.randn(20, 4), torch.arange(20) % 3
    modes: list[bool] = []

    def forward() -> torch.Tensor:
        modes.append(model.training)
        return model(x)

    timer = EpochTimer("toy", model, forward, labels, torch.arange(10))
    before = model[0].weight.detach().clone()
    time_round_robin([timer], epochs=4, warmup=1, test_epochs=2)
    assert len(timer.train_s) == 4 and len(timer.test_s) == 2
    assert modes == [True] * 5 + [False] * 2  # warm-up + timed training, then test passes
    assert not torch.equal(before, model[0].weight)  # Adam stepped
    assert timer.summary()["parameters"] == 4 * 8 + 8 + 8 * 3 + 3


@pytest.mark.parametrize("labels", [("GCN", "TWIRLS*", "GAT"), ("GCN", "TWIRLS*")])
def test_stage_writes_cells_for_every_model_on_the_random_graph(tmp_path, monkeypatch, labels):
    """With GAT and without it."""
    from twirls.stages import table11 as timing

    models = {"GCN": TIMING["models"]["GCN"], "TWIRLS*": TIMING["models"]["TWIRLS*"],
              "GAT": {"model": "gat", "model_cfg": {"layers": 2, "hidden": 4}}}
    cfg = {**TIMING, "graph": "random", "epochs": 2, "warmup": 1,
           "random_sizes": {"nodes": 200, "edges": 600, "features": 16, "classes": 4,
                            "train": 80},
           "models": {label: models[label] for label in labels}}
    params = {"table11": {**cfg, "threads": 1}, "device": "cpu"}
    monkeypatch.setattr(timing, "open_stage", lambda stage: params)
    assert timing.main(["--raw", str(tmp_path / "raw"), "--out", str(tmp_path)]) == 0
    cells = json.loads((tmp_path / "results" / "table11.json").read_text())
    by_key = {(c["model"], c["metric"]): c for c in cells}
    assert set(by_key) == {(m, k) for m in labels
                           for k in ("train_seconds", "test_seconds", "parameters")}
    assert by_key[("GCN", "train_seconds")]["runs"] == 2
    assert by_key[("GCN", "train_seconds")]["mean"] > 0
    assert "random graph of 200 nodes, 600 edges, 16 features" in by_key[(labels[-1],
                                                                          "parameters")]["note"]
    metrics = json.loads((tmp_path / "metrics" / "table11.json").read_text())
    assert [m["model"] for m in metrics["models"]] == list(labels)
    rows = pd.read_csv(tmp_path / "results" / "table11.csv", keep_default_na=False)
    assert set(rows["graph"]) == {"random"}
    for (model, metric), cell in by_key.items():  # the cell is the median of its rows
        mine = rows[(rows["model"] == model) & (rows["metric"] == metric)]
        assert len(mine) == cell["runs"] and mine["value"].median() == cell["mean"]
        assert mine["epoch"].tolist() == ([""] if metric == "parameters"
                                          else [str(i) for i in range(cell["runs"])])


def test_stage_rejects_a_bad_model_config_by_name(tmp_path, monkeypatch, capsys):
    from twirls.stages import table11 as timing

    cfg = {**TIMING, "graph": "random", "epochs": 1,
           "random_sizes": {"nodes": 50, "edges": 100, "features": 4, "classes": 2, "train": 10},
           "models": {"GCN": {"model": "gcn", "model_cfg": {"hiden": 3}}}}
    monkeypatch.setattr(timing, "open_stage",
                        lambda stage: {"table11": cfg, "device": "cpu"})
    assert timing.main(["--raw", str(tmp_path), "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")  # one line, no traceback
    assert "table11.models.GCN: GCN config: unknown key 'hiden'" in err[0]
    assert not (tmp_path / "results" / "table11.json").exists()


def test_cells_on_arxiv_are_judged_and_on_a_substitute_graph_are_stand_ins():
    """Every model of Table 11 is timed on the one device of the stage (GAT and GraphSAGE are
    torch-native): on ogbn-arxiv no cell is a stand-in; on the random graph every one is."""
    from twirls.stages.table11 import timing_cells

    timers = []
    for name, seconds in (("GCN", 0.01), ("GAT", 2.0)):
        timer = EpochTimer(name, torch.nn.Linear(4, 3), lambda: None, None, None)
        timer.train_s, timer.test_s = [seconds, seconds * 1.1], [seconds / 2]
        timers.append(timer)
    real = timing_cells(timers, {"GCN": "cpu", "GAT": "cpu"}, "ogbn-arxiv", 1)
    assert {c.status for c in real} == {""}
    assert [c.note for c in real][0] == "ogbn-arxiv; cpu (1 threads); median over epochs"
    assert [c.mean for c in real][-1] == 4 * 3 + 3  # parameters
    substitute = timing_cells(timers, {"GCN": "cpu", "GAT": "cpu"}, "random graph", 1)
    assert {c.status for c in substitute} == {"stand-in"}
    assert substitute[0].note == "stand-in: random graph; cpu (1 threads); median over epochs"
    assert [c.mean for c in substitute] == [c.mean for c in real]
