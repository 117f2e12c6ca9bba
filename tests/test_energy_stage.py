"""Stage ``energy``: energy traces of eq. 1 / eq. 12 (Lemma 3.3), on a small graph and on real Cora.

The Cora tests read the Planetoid files from the offline mirror (``TWIRLS_DATA_MIRROR``, default
``<repo>/../shared/datasets``) and skip with the reason if it is absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from twirls.data.graph import undirected_graph
from twirls.models.energy import jacobi_alpha_limit
from twirls.models.graph_ops import GraphOps
from twirls.stages import energy as stage
from twirls.stages.energy import (
    EnergyConfig,
    max_relative_increase,
    measure,
    run,
)

from fixtures import MIRROR, PLANETOID

ATTENTION = {"p": 0.1, "tau": 0.2, "T": 2.0}  # paper Table 7 (ATK-Cora)
CPU = torch.device("cpu")


def small_graph(seed: int = 0, n: int = 40, m: int = 120) -> tuple[GraphOps, torch.Tensor]:
    """A random graph and ``f`` whose edge distances ``z²`` (mean ~0.7) straddle both
    thresholds of :data:`ATTENTION` (``τ̄² ≈ 0.18``, ``T̄² ≈ 2.1``): some edges get weight
    ``1/τ``, some ``z^(p-2)``, some 0."""
    gen = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, n, (m,), generator=gen), torch.randint(0, n, (m,), generator=gen)
    ops = GraphOps.from_graph(undirected_graph(src, dst, n), dtype=torch.float64)
    return ops, 0.3 * torch.randn(n, 4, dtype=torch.float64, generator=gen)


def section(**over) -> dict:
    base = {"dataset": "cora", "split": "public", "seed": 0, "steps": 64, "alpha": 1.0,
            "model_cfg": {"steps": 4, "lam": 1.0, "alpha": 1.0, "mlp_before": 2,
                          "input_dropout": 0.8, "dropout": 0.8},
            "train_cfg": {"epochs": 3, "lr": 0.1, "weight_decay": 5.0e-4}}
    return {**base, **over}


# ------------------------------------------------------------------ small graph
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


def test_checks_detect_increases_and_step_size_limits():
    assert max_relative_increase([3.0, 2.0, 2.5, 1.0]) == pytest.approx(0.25)
    assert max_relative_increase([3.0, 3.0, 1.0]) == 0.0
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


def test_bad_params_give_one_clear_message(monkeypatch):
    with pytest.raises(ValueError, match="unknown key 'stpes'.*Did you mean 'steps'"):
        EnergyConfig.from_params({**section(), "stpes": 3})
    with pytest.raises(ValueError, match="TWIRLS-base"):
        EnergyConfig.from_params(section(model_cfg={"steps": 2, "lam": 1.0, "alpha": 1.0,
                                                    "attention": ATTENTION}))
    with pytest.raises(ValueError, match="unknown key 'epoch'"):
        EnergyConfig.from_params(section(train_cfg={"epoch": 3}))
    params = {"device": "cpu", "threads": 1, "attention": ATTENTION,
              "energy": {**section(), "steps": 0}}
    monkeypatch.setattr(stage, "load_params", lambda name: params)
    with pytest.raises(SystemExit, match="stage energy: energy config: steps must be"):
        stage.main([])


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


def test_cora_traces_and_outputs(cora_raw, tmp_path):
    cfg = EnergyConfig.from_params(section())
    returned = run(cfg, ATTENTION, cora_raw, tmp_path, CPU)
    paths = outputs(tmp_path)
    result = json.loads(paths["results"].read_text())
    metrics = json.loads(paths["metrics"].read_text())
    assert result["status"] == "ok" and returned["status"] == "ok"
    assert (result["num_nodes"], result["num_undirected_edges"]) == (2708, 5278)
    assert result["model"]["f_shape"] == [2708, 7]  # K = 2: hidden 128 -> 7 classes
    base, every = result["curves"]["twirls-base"], result["curves"]["irls-every"]
    assert len(base["trace"]) == 65
    assert base["monotone"] and every["monotone"]
    assert result["closed_form"]["final_relative_gap"] < 1e-4
    assert base["final"] == pytest.approx(result["closed_form"]["energy"], rel=1e-4)
    assert not result["lemma33"]["alpha_within_bound_unweighted"]  # α = 1 >> 1/(1 + λ·169)
    assert result["lemma33"]["bound_unweighted"] == pytest.approx(1 / (1 + 169), rel=0.05)
    assert metrics["status"] == "ok"
    assert metrics["base_monotone"] == 1 and metrics["every_monotone"] == 1
    assert metrics["middle_monotone"] in (0, 1)
    assert metrics["base_final_energy"] == base["final"]
    assert paths["figure"].read_bytes()[:4] == b"\x89PNG" and paths["figure"].stat().st_size > 5000
    assert not list(tmp_path.rglob("*.part*"))  # temp files were renamed


@pytest.mark.parametrize("fetch_status", [None, {"status": "missing", "reason": "no mirror"}])
def test_unavailable_data_writes_no_data_outputs(tmp_path, fetch_status):
    raw = tmp_path / "raw"
    (raw / "cora").mkdir(parents=True)
    if fetch_status is not None:
        (raw / "cora" / "FETCH.json").write_text(json.dumps(fetch_status))
    result = run(EnergyConfig.from_params(section()), ATTENTION, raw, tmp_path / "out", CPU)
    paths = outputs(tmp_path / "out")
    written = json.loads(paths["results"].read_text())
    metrics = json.loads(paths["metrics"].read_text())
    assert result["status"] == written["status"] == metrics["status"] == "no-data"
    expected = "no mirror" if fetch_status else "FETCH.json not found"
    assert expected in written["reason"] and expected in metrics["reason"]
    assert paths["figure"].read_bytes()[:4] == b"\x89PNG"
