"""Every run is a row (``results/<group>/<name>.csv``, :mod:`twirls.cells`): the rows of
each kind of stage hold the very per-run scores its cells summarise."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace

import pandas as pd
import pytest

from twirls.cells import columns, run_rows, write_runs
from twirls.reports.runs import unmatched_cells
from twirls.train.loop import RunResult, SeedsResult

from fixtures import write_planetoid


def result(*seeds: int) -> SeedsResult:
    return SeedsResult([RunResult(seed=s, best_epoch=s % 7, train=1.0, val=0.5,
                                  test=(s % 1000 + 1) / 3, extra={"test_macro_f1": 0.125},
                                  history=[{}] * (s % 5 + 1), seconds=0.5) for s in seeds])


def test_rows_name_the_split_of_each_seed_and_every_score_in_percent():
    rows = run_rows(result(0, 1, 1000, 1001), metric="accuracy", splits=["s0", "s1"],
                    identity={"table": "t", "dataset": "d", "model": "M"}, device="cpu",
                    grid={"steps": 4})
    assert [(r["split"], r["seed"], r["metric"]) for r in rows] == [
        (split, seed, metric) for split, seed in [("s0", 0), ("s0", 1), ("s1", 1000), ("s1", 1001)]
        for metric in ("accuracy", "macro_f1")]
    assert rows[0]["value"] == 100 * (1 / 3) and rows[1]["value"] == 12.5
    assert (rows[2]["best_epoch"], rows[2]["epochs"], rows[2]["steps"]) == (1, 2, 4)
    assert rows[0]["graph"] == rows[0]["variant"] == ""  # identity keys it does not give


def test_written_rows_keep_their_columns_in_order_and_floats_exact(tmp_path):
    rows = run_rows(result(0, 1), metric="accuracy", splits=["public"],
                    identity={"table": "t", "dataset": "d", "graph": "clean", "model": "M"},
                    device="cpu", grid={"steps": 8, "alpha": 0.1})
    rows[0]["best_epoch"] = None
    path = tmp_path / "r.csv"
    write_runs(path, rows)
    back = pd.read_csv(path, keep_default_na=False)
    assert list(back.columns) == columns(rows) == [
        "table", "dataset", "graph", "model", "variant", "alpha", "steps", "split", "seed",
        "metric", "value", "best_epoch", "epochs", "seconds", "device"]
    assert back["value"].tolist() == [r["value"] for r in rows]  # repr: the same doubles
    assert back["best_epoch"].tolist()[:3] == ["", "0", "1"]  # a missing value is empty


def test_train_stage_rows_are_its_cells_runs(tmp_path, monkeypatch):
    from twirls.stages import train

    folder = tmp_path / "raw" / "cora"
    write_planetoid(folder, "cora", num_features=40, num_unlabelled=600, num_test=300)
    (folder / "FETCH.json").write_text(json.dumps({"dataset": "cora", "status": "ok"}))
    entry = {"dataset": "cora", "model": "twirls",
             "cells": {"table2": "TWIRLS-base", "variants": "TB"},
             "model_cfg": {"steps": 2, "lam": 1.0, "alpha": 1.0, "mlp_before": 1},
             "train_cfg": {"epochs": 4, "lr": 0.05}}
    params = {"table2": {"tiny": entry}, "train": {"seeds": 3}, "device": "cpu", "threads": 1,
              "jobs": 1, "budget_hours": 12}
    monkeypatch.setattr(train, "open_stage", lambda stage: params)
    assert train.main(["table2", "tiny", "--raw", str(tmp_path / "raw"), "--out",
                       str(tmp_path)]) == 0
    cells = json.loads((tmp_path / "results" / "table2" / "tiny.json").read_text())
    rows = pd.read_csv(tmp_path / "results" / "table2" / "tiny.csv", keep_default_na=False)
    assert len(rows) == 2 * 3
    for cell in cells:
        mine = rows[rows["table"] == cell["table"]]
        assert set(mine["model"]) == {cell["model"]} and set(mine["variant"]) == {"paper"}
        assert mine["seed"].tolist() == [0, 1, 2] and set(mine["split"]) == {"public"}
        assert mine["value"].tolist() == cell["extra"]["test_per_run"]
        assert mine["best_epoch"].tolist() == cell["extra"]["best_epoch_per_run"]
        assert math.isclose(mine["value"].mean(), cell["mean"], rel_tol=1e-12)
        assert set(mine["graph"]) == {"clean"} and set(mine["epochs"]) <= set(range(1, 5))


def test_a_cell_its_rows_do_not_give_is_named():
    rows = run_rows(result(0, 1), metric="accuracy", splits=["public"],
                    identity={"table": "t", "dataset": "d", "model": "M"}, device="cpu")
    good = {"table": "t", "dataset": "d", "model": "M", "metric": "accuracy",
            "mean": (100 / 3 + 200 / 3) / 2, "runs": 2}
    assert unmatched_cells([good, {**good, "runs": 0, "mean": None}], rows) == []
    assert unmatched_cells([{**good, "mean": 50.1}], rows) == ["t / d / M / accuracy"]
    assert unmatched_cells([{**good, "runs": 3}], rows) == ["t / d / M / accuracy"]


def test_the_report_takes_each_cells_numbers_from_its_rows(tmp_path):
    """``read_cells`` recomputes mean, std and runs from the rows beside the cells (found by
    ``extra.rows``), and refuses cells whose rows disagree."""
    from twirls.cells import Cell, write_cells
    from twirls.reports.results import read_cells

    rows = run_rows(result(0, 1), metric="accuracy", splits=["public"], device="cpu",
                    identity={"table": "t", "dataset": "d", "graph": "clean", "model": "M"},
                    grid={"steps": 8})
    rows += run_rows(result(2), metric="accuracy", splits=["public"], device="cpu",
                     identity={"table": "t", "dataset": "d", "graph": "clean", "model": "M"},
                     grid={"steps": 16})
    write_runs(tmp_path / "s.csv", rows)
    sel = {"model": "M", "graph": "clean", "variant": "", "steps": 8}
    cell = Cell("t", "d", "M[S=8]", "accuracy", mean=50.0 + 1e-12, std=0.0, runs=2,
                extra={"rows": sel})
    write_cells(tmp_path / "s.json", [cell, Cell("t", "d", "X", "accuracy", status="no-data")])
    got, no_data = read_cells(tmp_path / "s.json")
    values = [100 * (1 / 3), 100 * (2 / 3)]  # the rows' values, not the cell's mean
    assert (got.mean, got.runs) == (statistics.fmean(values), 2)
    assert got.std == statistics.pstdev(values)
    assert no_data.runs == 0
    write_cells(tmp_path / "s.json", [replace(cell, extra={"rows": {**sel, "steps": 16}})])
    with pytest.raises(ValueError, match="give 1 runs, mean 100.0, but its cell says 2 runs"):
        read_cells(tmp_path / "s.json")


def test_sweep_points_come_from_the_rows(tmp_path):
    """The report's points of a sweep (its claims read them): per curve and grid point the
    mean of its runs in the first metric; ``split`` joins the point when the runs span several
    (a label-ratio grid)."""
    from twirls.reports.sweep_points import read_sweep_points

    ident = {"table": "figure2", "dataset": "cora", "graph": "clean", "model": "TWIRLS-base"}
    rows = []
    for steps, res in ((8, result(0, 1)), (128, result(2))):
        rows += run_rows(res, identity=ident, metric="accuracy", splits=["public"],
                         device="cpu", grid={"steps": steps})
    write_runs(tmp_path / "figure2.csv", rows)
    assert read_sweep_points(tmp_path / "figure2.csv") == [
        {"curve": "TWIRLS-base", "point": {"steps": 8},
         "mean": statistics.fmean([100 * (1 / 3), 100 * (2 / 3)])},
        {"curve": "TWIRLS-base", "point": {"steps": 128}, "mean": 100.0}]
    rows = [*run_rows(result(0), identity=ident, metric="micro_f1", splits=["0.05"],
                      device="cpu"),
            *run_rows(result(1), identity=ident, metric="micro_f1", splits=["0.09"],
                      device="cpu")]
    write_runs(tmp_path / "figure3.csv", rows)
    assert [p["point"] for p in read_sweep_points(tmp_path / "figure3.csv")] == [
        {"split": 0.05}, {"split": 0.09}]
    assert read_sweep_points(tmp_path / "none.csv") == []


def run_train_stage(tmp_path, monkeypatch, entry, batch, seeds=3):
    from twirls.stages import train

    folder = tmp_path / "raw" / "cora"
    if not folder.exists():
        write_planetoid(folder, "cora", num_features=40, num_unlabelled=600, num_test=300)
        (folder / "FETCH.json").write_text(json.dumps({"dataset": "cora", "status": "ok"}))
    params = {"table2": {"tiny": entry}, "train": {"seeds": seeds, "batch": batch},
              "device": "cpu", "threads": 1, "jobs": 1, "budget_hours": 12}
    monkeypatch.setattr(train, "open_stage", lambda stage: params)
    assert train.main(["table2", "tiny", "--raw", str(tmp_path / "raw"), "--out",
                       str(tmp_path)]) == 0
    return pd.read_csv(tmp_path / "results" / "table2" / "tiny.csv", keep_default_na=False)


def test_train_batch_trains_the_seeds_together_where_the_model_allows(tmp_path, monkeypatch,
                                                                        capsys):
    """``train.batch``: batches of seeds (the same seeds and protocol, other dropout masks;
    a rerun is identical); one seed per split runs as today's run; a model the batched trainer
    lacks runs one seed per run and says so in one line."""
    entry = {"dataset": "cora", "model": "twirls", "cells": {"table2": "T"},
             "model_cfg": {"steps": 2, "lam": 1.0, "alpha": 1.0, "mlp_before": 1,
                           "input_dropout": 0.5},
             "train_cfg": {"epochs": 6, "lr": 0.05}}
    single = run_train_stage(tmp_path, monkeypatch, entry, batch=1)
    batched = run_train_stage(tmp_path, monkeypatch, entry, batch=2)
    assert batched["seed"].tolist() == single["seed"].tolist() == [0, 1, 2]
    assert batched["value"].tolist() != single["value"].tolist()  # other masks
    assert batched.equals(run_train_stage(tmp_path, monkeypatch, entry, batch=2)
                          .assign(seconds=batched["seconds"]))
    assert "one seed per run" not in capsys.readouterr().err
    alone = run_train_stage(tmp_path, monkeypatch, entry, batch=2, seeds=1)  # nothing to share
    assert alone.equals(run_train_stage(tmp_path, monkeypatch, entry, batch=1, seeds=1)
                        .assign(seconds=alone["seconds"]))
    gat = {**entry, "model": "gat", "model_cfg": {"layers": 2, "hidden": 4, "heads": 2}}
    fallback = run_train_stage(tmp_path, monkeypatch, gat, batch=2)
    assert fallback.equals(run_train_stage(tmp_path, monkeypatch, gat, batch=1)
                           .assign(seconds=fallback["seconds"]))
    assert "batch 2: gat on cora trains one seed per run (GAT is not supported" in (
        capsys.readouterr().err)
