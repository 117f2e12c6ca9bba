"""``twirls.bench.components``: an epoch on the components it reads against the whole graph,
timed side by side, and full runs both ways compared."""

from __future__ import annotations

import json

import pytest

from twirls.bench import components

from fixtures import toy_data

EXP = {"dataset": "toy", "model": "gcn", "split": "a", "seeds": 2,
       "model_cfg": {"hidden": 8, "dropout": 0.5}, "train_cfg": {"epochs": 6, "lr": 0.05}}


@pytest.fixture
def toy(monkeypatch):
    """Every configuration is a GCN on the toy graph (its training nodes' components: 146 of
    its 150 nodes)."""
    monkeypatch.setattr(components, "config_inputs", lambda name, args, params: (
        dict(EXP), toy_data()))
    monkeypatch.setattr(components, "config_problem", lambda name, params: "")
    monkeypatch.setattr(components, "reference_seconds", lambda: {"python": 0.2})


def test_a_record_times_both_ways_and_compares_full_runs(toy, tmp_path):
    out = tmp_path / "components.json"
    assert components.main(["--configs", "toy-gcn", "--agree", "toy-gcn", "--epochs", "2",
                            "--rounds", "2", "--agree-seeds", "4", "--batch", "2",
                            "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    (timing,) = record["timings"]
    assert timing["rows"] == {"nodes": 150, "train_step": 146, "eval": 150}
    assert len(timing["rounds"]["whole"]) == len(timing["rounds"]["components"]) == 2
    best = timing["ms_per_seed_epoch"]
    assert all(best[way] in timing["rounds"][way] for way in best)
    assert timing["speedup"] == pytest.approx(
        sum(best["whole"].values()) / sum(best["components"].values()), abs=0.01)
    (agree,) = record["agreement"]
    assert agree["seeds"] == 4 and agree["test_whole"] != agree["test_components"]  # other masks
    assert agree["within_two_standard_errors"] == (
        abs(agree["difference_points"]) < 2 * agree["standard_error_points"] + 0.01)
    assert record["reference_s"] == {"python": 0.2} and record["threads"] == 1


def test_unknown_configurations_are_one_message(capsys):
    with pytest.raises(SystemExit) as exc:
        components.main(["--configs", "cora-nothing", "--agree"])
    assert exc.value.code == 2 and "cora-nothing" in capsys.readouterr().err
