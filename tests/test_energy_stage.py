"""Stage ``energy``: energy traces of eq. 1 / eq. 12 (Lemma 3.3), on a small graph and on real Cora.

The measurement (:mod:`twirls.reports.energy_measure`) is checked on random graphs; the params
(:func:`twirls.config.schema.check_energy`, :func:`~twirls.config.schema.check_energy_entry`)
on the committed ones with one value changed; the stage on real Cora, whose Planetoid files come
from the offline mirror (``TWIRLS_DATA_MIRROR``, default ``<repo>/../shared/datasets``; the tests
skip with the reason if it is absent).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from twirls.config.entries import train_entry
from twirls.config.schema import ConfigError, check_params
from twirls.data.graph import undirected_graph
from twirls.data.registry import load_dataset
from twirls.models.energy import closed_form, energy, jacobi_alpha_limit
from twirls.models.graph_ops import GraphOps
from twirls.params import read_all
from twirls.reports.energy_measure import max_relative_increase, measure
from twirls.reports.propagation_input import propagation_input
from twirls.stages import energy as stage
from twirls.stages import skeleton
from twirls.train.checkpoint import load_checkpoint
from twirls.train.experiment import run_experiment

from fixtures import MIRROR, PLANETOID, REPO

ATTENTION = {"p": 0.1, "tau": 0.2, "T": 2.0}  # paper Table 7 (ATK-Cora)
CPU = torch.device("cpu")
TINY = {"dataset": "cora", "model": "twirls", "cells": {"table2": "TWIRLS-base"},
        "model_cfg": {"steps": 4, "lam": 1.0, "alpha": 1.0, "mlp_before": 2,
                      "input_dropout": 0.8, "dropout": 0.8},
        "train_cfg": {"epochs": 3, "lr": 0.1, "weight_decay": 5.0e-4}}


def small_graph(seed: int = 0, n: int = 40, m: int = 120) -> tuple[GraphOps, torch.Tensor]:
    """A random graph and ``f`` whose edge distances ``z²`` (mean ~0.7) straddle both
    thresholds of :data:`ATTENTION` (``τ̄² ≈ 0.18``, ``T̄² ≈ 2.1``): some edges get weight
    ``1/τ``, some ``z^(p-2)``, some 0."""
    gen = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, n, (m,), generator=gen), torch.randint(0, n, (m,), generator=gen)
    ops = GraphOps.from_graph(undirected_graph(src, dst, n), dtype=torch.float64)
    return ops, 0.3 * torch.randn(n, 4, dtype=torch.float64, generator=gen)


def stage_params(**energy) -> dict:
    """What ``open_stage("energy")`` reads: the declared params, with the tiny entry."""
    section = {"group": "table2", "entry": "cora-tiny", "dataset": "cora", "steps": 64,
               "alpha": 1.0, "attention": ATTENTION, **energy}
    return {"threads": 1, "energy": section,
            "table2": {"cora-tiny": TINY}}


def with_value(path: str, value) -> dict:
    """The committed params with ``energy.<path>`` (or a deeper path) set to ``value``."""
    params = copy.deepcopy(read_all(REPO))
    *parents, last = path.split(".")
    node = params
    for key in parents:
        node = node[key]
    node[last] = value
    return params


# ------------------------------------------------------------------ measurement, small graph
def test_base_trace_descends_to_the_closed_form_minimum():
    ops, f = small_graph()
    few = measure(ops, f, lam=1.0, alpha=1.0, steps=2, attention=ATTENTION)
    many = measure(ops, f, lam=1.0, alpha=1.0, steps=150, attention=ATTENTION)
    for result in (few, many):
        base = result["curves"]["twirls-base"]
        assert base["monotone"] and base["max_relative_increase"] <= 1e-12
        assert base["final"] >= result["closed_form"]["energy"] * (1 - 1e-12)  # it is the min
    assert few["closed_form"]["final_relative_gap"] > 1e-4  # two steps are not enough ...
    assert many["closed_form"]["final_relative_gap"] < 1e-4  # ... enough steps reach eq. 2
    assert many["closed_form"]["y_relative_distance"] < 1e-3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_eq1_trace_converges_to_the_closed_form_minimum(seed):
    """At convergence the eq. 1 trace equals ``ℓ_Y(Y*)``, ``Y* = (I + λL)⁻¹ f`` (eq. 2), to
    float64 rounding, and no iterate is ever below that minimum."""
    ops, f = small_graph(seed)
    lam = 0.5 + seed
    result = measure(ops, f, lam=lam, alpha=1.0, steps=1500, attention=ATTENTION)
    base, minimum = result["curves"]["twirls-base"], result["closed_form"]["energy"]
    assert minimum == pytest.approx(float(energy(ops, closed_form(ops, f, lam), f, lam)),
                                    rel=1e-14)
    assert base["final"] == pytest.approx(minimum, rel=1e-10)
    assert min(base["trace"]) >= minimum * (1 - 1e-12)
    assert result["closed_form"]["y_relative_distance"] < 1e-6


def test_irls_every_step_never_increases_eq12_and_middle_keeps_its_bound():
    ops, f = small_graph(seed=3)
    result = measure(ops, f, lam=2.0, alpha=1.0, steps=30, attention=ATTENTION)
    every, middle = result["curves"]["irls-every"], result["curves"]["twirls-middle"]
    assert every["monotone"] and every["max_relative_increase"] <= result["monotone_rtol"]
    assert every["final"] < 0.9 * every["initial"]  # it moves: the check is not vacuous
    assert middle["attention_after_step"] == 15
    assert middle["never_above_attention_value"]  # MM bound after the attention layer
    # before it, plain eq. 6 steps are not descent steps on eq. 12: here eq. 12 does go up
    assert middle["max_relative_increase_before_attention"] > 1e-3
    assert len(every["trace"]) == len(middle["trace"]) == 31


@pytest.mark.parametrize(("seed", "lam", "alpha"), [(4, 1.0, 1.0), (5, 3.0, 1.0), (6, 0.5, 0.5),
                                                    (7, 10.0, 1.0)])
def test_irls_trace_never_increases(seed, lam, alpha):
    """Lemma 3.3: eq. 20 then eq. 21 before every step never increases eq. 12 (here with the
    Jacobi preconditioner and α up to 1, below its limit)."""
    ops, f = small_graph(seed)
    result = measure(ops, f, lam=lam, alpha=alpha, steps=80, attention=ATTENTION)
    every = result["curves"]["irls-every"]
    assert max_relative_increase(every["trace"]) <= 1e-12
    assert all(after <= before * (1 + 1e-12)
               for before, after in zip(every["trace"], every["trace"][1:], strict=False))
    assert every["final"] < every["initial"]


def test_checks_detect_increases_and_step_size_limits():
    assert max_relative_increase([3.0, 2.0, 2.5, 1.0]) == pytest.approx(0.25)
    assert max_relative_increase([3.0, 3.0, 1.0]) == 0.0
    assert max_relative_increase([3.0, float("nan")]) == float("inf")
    ops, f = small_graph(seed=5)
    limit = jacobi_alpha_limit(ops, 1.0)
    assert 1.0 < limit <= 2.0
    # beyond the Jacobi-preconditioned limit eq. 6 diverges: the monotone check must catch it
    bad = measure(ops, f, lam=1.0, alpha=limit + 0.3, steps=60, attention=ATTENTION)
    assert not bad["curves"]["twirls-base"]["monotone"]
    lem = bad["lemma33"]
    assert lem["bound_gamma_max"] < lem["bound_unweighted"] < 1.0  # Γ = I/τ, τ < 1: tighter
    assert not lem["alpha_within_bound_unweighted"]
    assert 1.0 < lem["jacobi_alpha_limit_gamma_max"] <= 2.0
    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        measure(ops, f, lam=1.0, alpha=1.0, steps=0, attention=ATTENTION)


# ------------------------------------------------------------------ params
@pytest.mark.parametrize(("path", "value", "message"), [
    ("energy.stpes", 3, "energy.stpes = 'stpes': unknown key (did you mean 'steps'?)"),
    ("energy.steps", 0, "energy.steps = 0: expected an integer >= 1"),
    ("energy.alpha", 0, "energy.alpha = 0: expected a number > 0"),
    ("energy.monotone_rtol", "1e-10", "(PyYAML reads 1e-3 as a string: write 1.0e-3)"),
    ("energy.group", "tabel2", "energy.group = 'tabel2': unknown model-saving group (did you "
                               "mean 'table2'?); allowed: table2"),
    ("energy.group", "table3", "energy.group = 'table3': unknown model-saving group"),
    ("energy.entry", "cora-twirls-base-k3", "energy.entry = 'cora-twirls-base-k3': no entry "
     "'cora-twirls-base-k3' in params/table2.yaml (did you mean 'cora-twirls-base-k2'?)"),
    ("energy.entry", "cora-gcn", "table2.cora-gcn must be TWIRLS-base"),
    ("energy.dataset", "citeseer", "energy.dataset = 'citeseer': must be the dataset of "
                                   "table2.cora-twirls-base-k2 ('cora')"),
    ("table2.cora-twirls-base-k2.model_cfg.variant", "reference", "must use the paper's eq. 6"),
    ("table2.cora-twirls-base-k2.model_cfg.attention", ATTENTION, "must be TWIRLS-base"),
])
def test_bad_energy_params_are_one_line_naming_key_value_and_what_is_allowed(path, value,
                                                                             message):
    with pytest.raises(ConfigError) as err:
        check_params(with_value(path, value))
    text = str(err.value)
    assert message in text and "\n" not in text
    assert text.startswith(("params/energy.yaml: ", "params/table2.yaml: ")), text


def test_missing_key_and_the_committed_section_copies_no_hyperparameters():
    params = read_all(REPO)
    del params["energy"]["group"]
    with pytest.raises(ConfigError, match="missing key 'group'"):
        check_params(params)
    section = read_all(REPO)["energy"]
    assert not {"model_cfg", "train_cfg", "seed", "split"} & set(section)


def test_bad_params_fail_the_stage_with_one_line(monkeypatch, capsys):
    monkeypatch.setattr(skeleton, "load_params", lambda name: stage_params(steps=0))
    assert stage.main([]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: energy: params/energy.yaml: energy.steps = 0: expected an integer "
                   ">= 1"]


# ------------------------------------------------------------------ real Cora
@pytest.fixture(scope="module")
def cora_raw(tmp_path_factory) -> Path:
    if not (MIRROR / PLANETOID).is_dir():
        pytest.skip(f"dataset mirror not found at {MIRROR} (set TWIRLS_DATA_MIRROR)")
    raw = tmp_path_factory.mktemp("raw")
    folder = raw / "cora"
    folder.mkdir()
    for src in sorted((MIRROR / PLANETOID).glob("ind.cora.*")):
        (folder / src.name).symlink_to(src)
    (folder / "FETCH.json").write_text(json.dumps({"dataset": "cora", "status": "ok"}))
    return raw


def outputs(out: Path) -> dict[str, Path]:
    return {"results": out / "results" / "energy" / "cora.json",
            "metrics": out / "metrics" / "energy" / "cora.json",
            "figure": out / "reports" / "figures" / "energy-per-step-cora.png"}


@pytest.fixture(scope="module")
def trained_root(cora_raw, tmp_path_factory) -> Path:
    """A root with ``models/`` as stage ``table2@cora-tiny`` leaves it (``--save-model``, two
    seeds)."""
    from twirls.stages import train

    out = tmp_path_factory.mktemp("train")
    params = {**stage_params(), "train": {"seeds": 2}, "device": "cpu", "jobs": 1,
              "budget_hours": 12}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(train, "open_stage", lambda name: params)
        assert train.main(["table2", "cora-tiny", "--save-model", "--raw", str(cora_raw),
                           "--out", str(out)]) == 0
    return out


def test_the_model_is_the_first_run_of_the_train_stage(cora_raw, trained_root):
    """``f(X; W)`` comes from the model that ``train@`` saved from its first run (seed 0,
    sparse CSR features): same best epoch and scores, bit for bit."""
    exp, data = train_entry(TINY), load_dataset("cora", cora_raw)
    trained = run_experiment(exp, data, 2, CPU, progress=False).runs[0]
    path = trained_root / "models" / "table2" / "cora-tiny.pt"
    saved = load_checkpoint(path, "table2.cora-tiny", exp)
    f, run = propagation_input(exp, data, saved)
    assert (run["seed"], run["split"], run["features"]) == (0, "public", "sparse CSR")
    assert (run["best_epoch"], run["val_at_best"], run["test_at_best"]) == (
        trained.best_epoch, trained.val, trained.test)
    assert run["epochs"] == len(trained.history) == 3
    assert f.dtype == torch.float64 and tuple(f.shape) == (2708, 7)


def test_cora_traces_and_outputs(cora_raw, trained_root, tmp_path, monkeypatch):
    monkeypatch.setattr(skeleton, "load_params", lambda name: stage_params())
    argv = ["--raw", str(cora_raw), "--out", str(tmp_path), "--trained", str(trained_root)]
    assert stage.main(argv) == 0
    paths = outputs(tmp_path)
    result = json.loads(paths["results"].read_text())
    metrics = json.loads(paths["metrics"].read_text())
    assert result["status"] == "ok"
    assert (result["num_nodes"], result["num_undirected_edges"]) == (2708, 5278)
    model = result["model"]
    assert model["experiment"] == "table2.cora-tiny" and model["model_cfg"] == TINY["model_cfg"]
    assert model["f_shape"] == [2708, 7]  # K = 2: hidden 128 -> 7 classes
    assert result["propagation"]["lam"] == TINY["model_cfg"]["lam"]  # the model's λ
    base, every = result["curves"]["twirls-base"], result["curves"]["irls-every"]
    assert len(base["trace"]) == 65
    assert base["monotone"] and every["monotone"]
    assert result["closed_form"]["final_relative_gap"] < 1e-4
    assert base["final"] == pytest.approx(result["closed_form"]["energy"], rel=1e-4)
    assert not result["lemma33"]["alpha_within_bound_unweighted"]  # α = 1 >> 1/(1 + λ·169)
    assert result["lemma33"]["bound_unweighted"] == pytest.approx(1 / (1 + 169), rel=0.05)
    assert metrics["status"] == "ok" and metrics["device"] == "cpu"
    assert metrics["base_monotone"] == 1 and metrics["every_monotone"] == 1
    assert metrics["middle_monotone"] in (0, 1)
    assert metrics["base_final_energy"] == base["final"]
    assert paths["figure"].read_bytes()[:4] == b"\x89PNG" and paths["figure"].stat().st_size > 5000
    assert not list(tmp_path.rglob("*.part*"))  # temp files were renamed
    assert "seconds" not in result and "seconds" not in model  # timings: metrics only
    assert metrics["seconds_measure"] > 0
    first = paths["results"].read_bytes()
    assert stage.main(argv) == 0
    assert paths["results"].read_bytes() == first  # same computation, same bytes


def test_a_missing_or_stale_model_fails_the_stage_with_one_line(cora_raw, trained_root,
                                                                tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(skeleton, "load_params", lambda name: stage_params())
    assert stage.main(["--raw", str(cora_raw), "--out", str(tmp_path),
                       "--trained", str(tmp_path / "none")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    missing = tmp_path / "none" / "models" / "table2" / "cora-tiny.pt"
    assert err == [f"error: energy: {missing}: no saved "
                   "model of table2.cora-tiny; run `dvc repro table2@cora-tiny` to save it"]
    changed = stage_params()
    changed["table2"]["cora-tiny"] = {**TINY, "train_cfg": {**TINY["train_cfg"], "lr": 0.2}}
    monkeypatch.setattr(skeleton, "load_params", lambda name: changed)
    assert stage.main(["--raw", str(cora_raw), "--out", str(tmp_path),
                       "--trained", str(trained_root)]) == 1
    assert "with other params than table2.cora-tiny has now" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()  # nothing written


@pytest.mark.parametrize("fetch_status", [None, {"status": "missing", "reason": "no mirror"}])
def test_unavailable_data_writes_no_data_outputs(tmp_path, monkeypatch, fetch_status):
    raw = tmp_path / "raw"
    (raw / "cora").mkdir(parents=True)
    if fetch_status is not None:
        (raw / "cora" / "FETCH.json").write_text(json.dumps(fetch_status))
    monkeypatch.setattr(skeleton, "load_params", lambda name: stage_params())
    assert stage.main(["--raw", str(raw), "--out", str(tmp_path / "out")]) == 0
    paths = outputs(tmp_path / "out")
    written = json.loads(paths["results"].read_text())
    metrics = json.loads(paths["metrics"].read_text())
    assert written["status"] == metrics["status"] == "no-data"
    expected = "no mirror" if fetch_status else "FETCH.json not found"
    assert expected in written["reason"] and expected in metrics["reason"]
    assert paths["figure"].read_bytes()[:4] == b"\x89PNG"
