"""Stage ``sweep@``: a data grid over dataset splits (Amazon's label ratios) and over generator
options (Chains' length), several metrics per point, and one clear message for a bad option."""

from __future__ import annotations

import importlib.util
import json

import pandas as pd
import pytest

from twirls.data.registry import STATUS_FILE

from fixtures import write_amazon, write_planetoid

AMAZON = {
    "dataset": "amazon", "seeds": 1,
    "data_grid": {"split": [0.05, 0.09]},
    "curves": {"TWIRLS-base": {
        "model": "twirls",
        "model_cfg": {"steps": 2, "lam": 10.0, "alpha": 0.1, "mlp_before": 1, "embedding": 8,
                      "normalized": True},
        "train_cfg": {"epochs": 3, "lr": 0.01}}},
    "figure": {"x": "split", "xscale": "linear", "panels": ["micro_f1", "macro_f1"]},
}


def run_sweep(tmp_path, monkeypatch, sweep: dict, batch: int = 1) -> dict:
    from twirls.stages import sweep as stage

    params = {"s": {"seeds": 1, **sweep, "batch": batch}, "threads": 1, "jobs": 1,
              "budget_hours": 12, "device": "cpu"}
    monkeypatch.setattr(stage, "open_stage", lambda name: params)
    monkeypatch.chdir(tmp_path)
    assert stage.main(["s", "--raw", str(tmp_path / "raw")]) == 0
    return json.loads((tmp_path / "metrics" / "s.json").read_text())


def fetched(tmp_path, name: str):
    folder = tmp_path / "raw" / name
    folder.mkdir(parents=True)
    (folder / STATUS_FILE).write_text('{"status": "ok"}')
    return folder


def test_split_grid_trains_on_each_label_ratio_and_draws_both_f1_panels(tmp_path, monkeypatch):
    write_amazon(fetched(tmp_path, "amazon"))
    metrics = run_sweep(tmp_path, monkeypatch, AMAZON)
    assert metrics["status"] == "ok"
    assert metrics["points"].keys() == {"TWIRLS-base"}
    assert sorted(metrics["points"]["TWIRLS-base"]) == ["split=0.05", "split=0.09"]
    assert all(0.0 <= v <= 100.0 for v in metrics["points"]["TWIRLS-base"].values())
    assert (tmp_path / "reports" / "figures" / "s.png").stat().st_size > 1000


def test_amazon_baselines_train_on_a_learned_input_per_node(tmp_path, monkeypatch):
    """Figure 3's SGC, GCN, GAT (``embedding``) and IGNN (its own ``U = I``) on IGNN's files."""
    write_amazon(fetched(tmp_path, "amazon"))
    curves = {
        "SGC": {"model": "sgc", "model_cfg": {"steps": 2, "embedding": 8}},
        "GCN": {"model": "gcn", "model_cfg": {"hidden": 8, "embedding": 8}},
        "IGNN": {"model": "ignn", "model_cfg": {"hidden": 8, "normalize": False}},
    }
    if importlib.util.find_spec("dgl") is not None:
        curves["GAT"] = {"model": "gat", "model_cfg": {"hidden": 2, "heads": 2, "embedding": 8}}
    for curve in curves.values():
        curve["train_cfg"] = {"epochs": 3, "lr": 0.01}
    metrics = run_sweep(tmp_path, monkeypatch, {**AMAZON, "data_grid": {"split": [0.05]},
                                                "curves": curves})
    assert metrics["status"] == "ok"
    assert metrics["points"] == {c: {"split=0.05": metrics["points"][c]["split=0.05"]}
                                 for c in curves}
    assert all(0.0 <= p["split=0.05"] <= 100.0 for p in metrics["points"].values())


def test_split_grid_on_missing_data_draws_a_no_data_figure(tmp_path, monkeypatch):
    folder = tmp_path / "raw" / "amazon"
    folder.mkdir(parents=True)
    (folder / STATUS_FILE).write_text('{"status": "missing", "reason": "no Dropbox here"}')
    metrics = run_sweep(tmp_path, monkeypatch, AMAZON)
    assert set(metrics.pop("stack")) == {"python", "torch", "numpy"}
    assert metrics == {"status": "no-data", "reason": "amazon: no Dropbox here", "points": {}}
    assert (tmp_path / "reports" / "figures" / "s.png").stat().st_size > 1000


def test_unknown_data_option_is_one_clear_message(tmp_path, monkeypatch, capsys):
    fetched(tmp_path, "chains")
    sweep = {"dataset": "chains", "split": "ignn", "seeds": 1, "data_grid": {"lenght": [10]},
             "curves": {"SGC": {"model": "sgc", "model_cfg": {"steps": 2},
                                "train_cfg": {"epochs": 2}}}}
    from twirls.stages import sweep as stage

    monkeypatch.setattr(stage, "open_stage", lambda name: {"s": sweep, "threads": 1, "jobs": 2,
                                                          "budget_hours": 12,
                                                          "device": "cpu"})
    monkeypatch.chdir(tmp_path)
    assert stage.main(["s", "--raw", str(tmp_path / "raw")]) == 1
    err = capsys.readouterr().err
    assert "s.data_grid: dataset 'chains' has no option 'lenght'" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_sweep_rows_hold_every_point_and_split(tmp_path, monkeypatch):
    """The figure's data: per label ratio (a ``split`` of the data grid) and metric, the runs
    whose means the metrics file gives."""
    write_amazon(fetched(tmp_path, "amazon"))
    metrics = run_sweep(tmp_path, monkeypatch, {**AMAZON, "seeds": 2})
    rows = pd.read_csv(tmp_path / "results" / "s.csv", keep_default_na=False, dtype={"split": str})
    assert set(rows["table"]) == {"s"} and set(rows["model"]) == {"TWIRLS-base"}
    assert sorted(set(rows["split"])) == ["0.05", "0.09"] and set(rows["seed"]) == {0, 1}
    assert set(rows["metric"]) == {"micro_f1", "macro_f1"}
    for key, mean in metrics["points"]["TWIRLS-base"].items():
        split = key.removeprefix("split=")
        mine = rows[(rows["split"] == split) & (rows["metric"] == "micro_f1")]
        assert len(mine) == 2 and mine["value"].mean() == pytest.approx(mean, abs=1e-3)


def test_a_sweep_without_data_writes_no_rows(tmp_path, monkeypatch):
    folder = tmp_path / "raw" / "amazon"
    folder.mkdir(parents=True)
    (folder / "FETCH.json").write_text('{"status": "missing", "reason": "no Dropbox here"}')
    run_sweep(tmp_path, monkeypatch, AMAZON)
    rows = pd.read_csv(tmp_path / "results" / "s.csv")
    assert rows.empty and "value" in rows.columns


def test_sweep_batch_trains_each_points_seeds_as_batches(tmp_path, monkeypatch, capsys):
    """A sweep's ``batch: 2`` (set next to its ``seeds``): every point's 3 seeds train as
    batches of 2 + 1 (the same seeds and protocol, other dropout masks: seed 2 alone in its batch
    is what the batched trainer gives it; a rerun is identical); a model the batched trainer
    lacks runs one seed per run and says so."""
    import torch

    from twirls.data.registry import load_dataset
    from twirls.train.batched.trainer import train_batch
    from twirls.train.experiment import run_inputs

    write_planetoid(fetched(tmp_path, "cora"), "cora", num_features=40, num_unlabelled=600,
                    num_test=300)
    twirls = {"model": "twirls", "train_cfg": {"epochs": 6, "lr": 0.05},
              "model_cfg": {"steps": 2, "lam": 1.0, "alpha": 1.0, "mlp_before": 1,
                            "input_dropout": 0.5},
              "grid": {"steps": [1, 2]}}
    sweep = {"dataset": "cora", "split": "public", "seeds": 3, "curves": {"TWIRLS-base": twirls}}

    def rows(batch: int, curves: dict | None = None) -> pd.DataFrame:
        run_sweep(tmp_path, monkeypatch, {**sweep, "curves": curves or sweep["curves"]}, batch)
        return pd.read_csv(tmp_path / "results" / "s.csv", keep_default_na=False)

    single, batched = rows(1), rows(2)
    assert batched["seed"].tolist() == single["seed"].tolist() == [0, 1, 2] * 2
    assert batched["value"].tolist() != single["value"].tolist()  # other masks
    assert batched.equals(rows(2).assign(seconds=batched["seconds"]))
    data = load_dataset("cora", tmp_path / "raw")
    exp = {**twirls, "model_cfg": {**twirls["model_cfg"], "steps": 2}, "split": "public"}
    inp = run_inputs(exp, data, torch.device("cpu"), progress=False)
    alone = train_batch(inp.build, inp.ops, inp.x, data.labels, data.splits["public"], inp.cfg,
                        [2])[0]
    last = batched[(batched["steps"] == 2) & (batched["seed"] == 2)].iloc[0]
    assert (last["best_epoch"], last["value"]) == (alone.best_epoch,
                                                   pytest.approx(100 * alone.test))
    assert "one seed per run" not in capsys.readouterr().err
    gat = {"GAT": {"model": "gat", "model_cfg": {"layers": 2, "hidden": 4, "heads": 2},
                   "train_cfg": {"epochs": 3}}}
    fallback = rows(2, gat)
    assert fallback.equals(rows(1, gat).assign(seconds=fallback["seconds"]))
    assert "batch 2: gat on cora trains one seed per run (GAT is not supported" in (
        capsys.readouterr().err)


def test_a_curve_with_its_own_seeds_runs_that_many_per_point(tmp_path, monkeypatch):
    """Table 8's cells at 100 seeds, its diagnostic curves at 10: a curve's ``seeds`` overrides
    the sweep's for its points (its rows and its cells' run counts), the others keep the
    sweep's."""
    write_planetoid(fetched(tmp_path, "cora"), "cora", num_features=20, num_unlabelled=600,
                    num_test=300)
    twirls = {"model": "twirls", "train_cfg": {"epochs": 2, "lr": 0.05},
              "model_cfg": {"steps": 1, "lam": 1.0, "alpha": 1.0, "mlp_before": 1}}
    sweep = {"dataset": "cora", "split": "public", "seeds": 1, "table": "s",
             "curves": {"cells": {**twirls, "seeds": 3, "grid": {"steps": [1, 2]}},
                        "other": {**twirls, "table": "s-other", "grid": {"steps": [1]}}}}
    run_sweep(tmp_path, monkeypatch, sweep)
    rows = pd.read_csv(tmp_path / "results" / "s.csv", keep_default_na=False)
    per_point = rows.groupby(["model", "steps"])["seed"].apply(list).to_dict()
    assert per_point == {("cells", 1): [0, 1, 2], ("cells", 2): [0, 1, 2], ("other", 1): [0]}
    cells = json.loads((tmp_path / "results" / "s.json").read_text())
    assert [(c["table"], c["runs"]) for c in cells] == [("s", 3), ("s", 3), ("s-other", 1)]


def test_an_extra_curve_runs_in_its_own_stage_and_files(tmp_path, monkeypatch, capsys):
    """``--extra <table>`` (stage ``<sweep>-extra@<table>``, e.g. ``table8-extra@table8-paper-k2``):
    the params of that stage (its one curve), its runs and cells under ``results/<sweep>-extra/``,
    no figure; a curve of another table is one clear message."""
    from twirls.stages import sweep as stage

    write_planetoid(fetched(tmp_path, "cora"), "cora", num_features=20, num_unlabelled=600,
                    num_test=300)
    curve = {"model": "twirls", "table": "s-other", "grid": {"steps": [1, 2]},
             "train_cfg": {"epochs": 2, "lr": 0.05},
             "model_cfg": {"steps": 1, "lam": 1.0, "alpha": 1.0, "mlp_before": 1}}
    params = {"s": {"dataset": "cora", "split": "public", "seeds": 2, "batch": 1,
                    "curves": {"other": curve}},
              "threads": 1, "jobs": 1, "budget_hours": 12, "device": "cpu"}
    opened = []
    monkeypatch.setattr(stage, "open_stage", lambda name: opened.append(name) or params)
    monkeypatch.chdir(tmp_path)
    assert stage.main(["s", "--extra", "s-other", "--raw", str(tmp_path / "raw")]) == 0
    assert opened == ["s-extra@s-other"]
    rows = pd.read_csv(tmp_path / "results" / "s-extra" / "s-other.csv", keep_default_na=False)
    assert set(rows["table"]) == {"s-other"} and len(rows) == 4
    cells = json.loads((tmp_path / "results" / "s-extra" / "s-other.json").read_text())
    assert [(c["table"], c["runs"]) for c in cells] == [("s-other", 2), ("s-other", 2)]
    points = json.loads((tmp_path / "metrics" / "s-extra" / "s-other.json").read_text())
    assert sorted(points["points"]["other"]) == ["steps=1", "steps=2"]
    assert not (tmp_path / "results" / "s.json").exists()
    assert not (tmp_path / "reports" / "figures").exists()
    capsys.readouterr()
    assert stage.main(["s", "--extra", "s-wrong", "--raw", str(tmp_path / "raw")]) == 1
    err = capsys.readouterr().err
    assert "s.curves.other.table = 's-other': expected 's-wrong': the curve fills table " in err
    assert "Traceback" not in err and err.count("\n") == 1
