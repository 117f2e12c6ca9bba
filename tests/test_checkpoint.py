"""The first run's model, saved by a Table 2 stage (``--save-model``) and loaded by ``energy``.

The saved weights are those of the first run, bit for bit, whether it ran in the stage's process
or in a worker; the file has the same bytes whenever the weights are the same; and a missing,
damaged, stale or empty file is one clear ``ValueError`` naming the command that remakes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from twirls.config.entries import train_entry
from twirls.reports.propagation_input import propagation_input
from twirls.stages import train
from twirls.train.checkpoint import FORMAT, load_checkpoint, save_checkpoint
from twirls.train.experiment import run_experiment, run_inputs
from twirls.train.loop import seed_model_run

from fixtures import toy_data, write_planetoid

CPU = torch.device("cpu")
RAW = {"dataset": "cora", "model": "twirls", "cells": {"table2": "TWIRLS-base"},
       "model_cfg": {"steps": 4, "lam": 1.0, "alpha": 1.0, "mlp_before": 2,
                     "input_dropout": 0.5, "dropout": 0.5},
       "train_cfg": {"epochs": 6, "lr": 0.05, "weight_decay": 5.0e-4}}
ENTRY = train_entry(RAW)  # as the stage completes it (Cora's defaults)
TOY = {**RAW, "dataset": "toy"}  # both splits of toy_data: the first run is split "a", seed 0


def first_run_directly(exp, data):
    """The first run (seed 0, first split), trained here step by step."""
    inp = run_inputs(exp, data, CPU, progress=False)
    return inp, seed_model_run(inp.build, inp.ops, inp.x, data.labels,
                               data.splits[inp.splits[0]], inp.cfg, 0)


@pytest.mark.parametrize("jobs", [1, 2])
def test_kept_model_is_the_first_runs_and_changes_no_score(jobs):
    torch.set_num_threads(1)
    data = toy_data()
    plain = run_experiment(TOY, data, 2, CPU, progress=False, jobs=jobs)
    kept = run_experiment(TOY, data, 2, CPU, progress=False, jobs=jobs, keep_first_model=True)
    assert plain.first_model is None
    assert [(r.seed, r.best_epoch, r.test, r.history) for r in kept.runs] == \
        [(r.seed, r.best_epoch, r.test, r.history) for r in plain.runs]
    _, (model, run) = first_run_directly(TOY, data)
    assert (run.best_epoch, run.test, run.history) == \
        (kept.runs[0].best_epoch, kept.runs[0].test, kept.runs[0].history)
    direct = model.state_dict()
    assert kept.first_model.keys() == direct.keys()
    assert all(torch.equal(kept.first_model[k], direct[k]) for k in direct)
    # the weights moved in training: equal to the direct run, unequal to a fresh model
    torch.manual_seed(0)
    fresh = run_inputs(TOY, data, CPU, progress=False).build().state_dict()
    assert not all(torch.equal(fresh[k], direct[k]) for k in direct)


def test_same_weights_same_bytes_and_a_faithful_round_trip(tmp_path):
    weights = {"w": torch.randn(5, 3, generator=torch.Generator().manual_seed(1))}
    run = {"seed": 0, "epochs": 3, "best_epoch": 1, "val_at_best": 0.5}
    for name in ("a.pt", "b.pt"):
        save_checkpoint(tmp_path / name, "table2.x", ENTRY, run=run, device="cpu",
                        state_dict=weights)
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "b.pt").read_bytes()
    assert not list(tmp_path.glob("*.part"))
    saved = load_checkpoint(tmp_path / "a.pt", "table2.x", ENTRY)
    assert (saved.run, saved.device, saved.entry) == (run, "cpu", ENTRY)
    assert torch.equal(saved.state_dict["w"], weights["w"])


def test_unusable_files_are_one_line_with_the_command_that_remakes_them(tmp_path):
    path = tmp_path / "m.pt"
    remake = "run `dvc repro table2@x` to save it"
    with pytest.raises(ValueError, match="no saved model of table2.x; " + remake):
        load_checkpoint(path, "table2.x", ENTRY)
    path.write_bytes(b"garbage")
    with pytest.raises(ValueError, match="not a readable model file .*" + remake) as err:
        load_checkpoint(path, "table2.x", ENTRY)
    assert "\n" not in str(err.value)  # torch >= 2.6 explains weights_only over many lines
    torch.save({"something": "else"}, path)
    with pytest.raises(ValueError, match=f"not a {FORMAT} file"):
        load_checkpoint(path, "table2.x", ENTRY)
    save_checkpoint(path, "table2.x", ENTRY, run={"seed": 0}, device="cpu",
                    state_dict={"w": torch.zeros(2)})
    other = {**ENTRY, "train_cfg": {**ENTRY["train_cfg"], "lr": 0.1}}
    with pytest.raises(ValueError, match="with other params than table2.x has now; " + remake):
        load_checkpoint(path, "table2.x", other)
    with pytest.raises(ValueError, match="saved by table2.x with other params than table2.y"):
        load_checkpoint(path, "table2.y", ENTRY)
    gcn = {**ENTRY, "model": "gcn"}
    save_checkpoint(path, "table2.x", gcn, run={"seed": 0}, device="cpu")
    with pytest.raises(ValueError, match=r"table2.x saved no model \(only the weights of twirls"):
        load_checkpoint(path, "table2.x", gcn)
    save_checkpoint(path, "table2.x", ENTRY, reason="no mirror")
    with pytest.raises(ValueError, match=r"table2.x saved no model \(no mirror\)"):
        load_checkpoint(path, "table2.x", ENTRY)
    with pytest.raises(ValueError, match="needs its state_dict"):
        save_checkpoint(path, "table2.x", ENTRY, run={"seed": 0})


def test_train_stage_saves_the_model_energy_measures(tmp_path, monkeypatch):
    """``table2@`` with ``--save-model`` (as dvc.yaml runs it, two workers) writes the model of
    its first run; ``f(X; W)`` from that file is the trained model's ``mlp_before(X)``; a
    second run writes the same bytes; without the flag no model is written."""
    torch.set_num_threads(1)
    folder = tmp_path / "raw" / "cora"
    write_planetoid(folder, "cora", num_features=40, num_unlabelled=600, num_test=300)
    (folder / "FETCH.json").write_text(json.dumps({"dataset": "cora", "status": "ok"}))
    entry = dict(RAW)
    params = {"table2": {"tiny": entry}, "train": {"seeds": 2}, "device": "cpu", "threads": 1,
              "jobs": 2, "budget_hours": 12}
    monkeypatch.setattr(train, "open_stage", lambda stage: params)
    argv = ["table2", "tiny", "--raw", str(tmp_path / "raw"), "--out", str(tmp_path)]
    model_file = tmp_path / "models" / "table2" / "tiny.pt"
    assert train.main(argv) == 0 and not model_file.exists()
    assert train.main([*argv, "--save-model"]) == 0
    first = model_file.read_bytes()
    assert train.main([*argv, "--save-model"]) == 0
    assert model_file.read_bytes() == first  # same computation, same bytes

    from twirls.data.registry import load_dataset

    data = load_dataset("cora", tmp_path / "raw")
    exp = train_entry(entry)
    saved = load_checkpoint(model_file, "table2.tiny", exp)
    inp, (model, run) = first_run_directly(exp, data)
    history = json.loads((tmp_path / "results" / "table2" / "tiny.json").read_text())[0]
    assert saved.run["best_epoch"] == run.best_epoch == history["extra"]["best_epoch_per_run"][0]
    assert saved.run["test_at_best"] == run.test and saved.device == "cpu"
    f, summary = propagation_input(exp, data, saved)
    model.eval()
    with torch.no_grad():
        expected = model.mlp_before(inp.x).to(torch.float64)
    assert torch.equal(f, expected)
    assert (summary["seed"], summary["epochs"]) == (0, 6)
    assert summary["f_shape"] == [data.num_nodes, 3]  # K = 2: the hidden layer -> 3 classes
    with pytest.raises(ValueError, match="TWIRLS"):
        propagation_input({**exp, "model": "gcn"}, data, saved)


def test_other_models_save_their_run_without_weights(tmp_path, monkeypatch):
    folder = tmp_path / "raw" / "cora"
    write_planetoid(folder, "cora", num_features=40, num_unlabelled=600, num_test=300)
    (folder / "FETCH.json").write_text(json.dumps({"dataset": "cora", "status": "ok"}))
    gcn = {**RAW, "model": "gcn", "model_cfg": {"layers": 2, "hidden": 16}}
    params = {"table2": {"g": gcn}, "train": {"seeds": 1}, "device": "cpu", "threads": 1,
              "jobs": 1, "budget_hours": 12}
    monkeypatch.setattr(train, "open_stage", lambda stage: params)
    assert train.main(["table2", "g", "--raw", str(tmp_path / "raw"), "--out", str(tmp_path),
                       "--save-model"]) == 0
    path = tmp_path / "models" / "table2" / "g.pt"
    saved = torch.load(path, weights_only=True)
    assert saved["status"] == "not-kept" and "state_dict" not in saved
    assert saved["run"]["epochs"] == 6 and path.stat().st_size < 4000


def test_a_stage_without_data_saves_why(tmp_path, monkeypatch):
    (tmp_path / "raw" / "cora").mkdir(parents=True)
    (tmp_path / "raw" / "cora" / "FETCH.json").write_text(
        json.dumps({"dataset": "cora", "status": "missing", "reason": "no mirror"}))
    params = {"table2": {"tiny": dict(RAW)},
              "train": {"seeds": 1}, "device": "cpu", "threads": 1, "jobs": 1,
              "budget_hours": 12}
    monkeypatch.setattr(train, "open_stage", lambda stage: params)
    assert train.main(["table2", "tiny", "--raw", str(tmp_path / "raw"), "--out",
                       str(tmp_path), "--save-model"]) == 0
    path: Path = tmp_path / "models" / "table2" / "tiny.pt"
    with pytest.raises(ValueError, match="saved no model .*no mirror"):
        load_checkpoint(path, "table2.tiny", train_entry(params["table2"]["tiny"]))
