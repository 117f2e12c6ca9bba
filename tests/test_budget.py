"""A stage times one epoch before its runs and skips them when its estimate is over
``budget_hours`` (twirls.stages.budget): the estimate's arithmetic, the message, that the probe
changes no result, and the CPU user's path through the real stages on the rehearsal's generated
ogbn-arxiv and Amazon files."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
import torch

from twirls.data.registry import load_dataset
from twirls.params import read_all, write_all
from twirls.rehearsal import generate as gen
from twirls.rehearsal.run import child_env, make_workspace
from twirls.stages.budget import OverBudget, check_budget, estimate, probe_seconds
from twirls.train.experiment import experiment_runs
from twirls.train.loop import TrainConfig, seed_run

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("budget-raw")
    gen.generate(root, scale=0.005, seed=0, datasets=["ogbn-arxiv", "amazon"])
    return root


def fake_runs(epochs: list[int], builds: list[object]) -> list[partial]:
    """``seed_run`` partials as the stages plan them (only the builder and config matter)."""
    return [partial(seed_run, build, None, None, None, None, TrainConfig(epochs=e), seed)
            for seed, (e, build) in enumerate(zip(epochs, builds, strict=True))]


def test_estimate_probes_each_configuration_once_and_shares_the_workers():
    a, b = partial(dict, kind="a"), partial(dict, kind="b")
    runs = fake_runs([100, 100, 100, 50], [a, a, a, b])  # 3 seeds of a, 1 of b
    probed = []

    def probe(run: partial) -> float:
        probed.append(run.args[0])
        return {"a": 2.0, "b": 10.0}[run.args[0].keywords["kind"]]

    est = estimate(runs, jobs=2, probe=probe)
    assert probed == [a, b]
    assert est.hours == pytest.approx((3 * 100 * 2.0 + 50 * 10.0) / 2 / 3600)
    assert (est.runs, est.max_epochs) == (4, 100)
    assert estimate(runs, jobs=16, probe=probe).hours == pytest.approx(1100 / 4 / 3600)


def test_over_budget_says_the_estimate_and_how_to_run_it(capsys):
    runs = fake_runs([2000] * 10, [partial(dict)] * 10)
    with pytest.raises(OverBudget) as info:
        check_budget("table2@ogbn-arxiv-gcnii", runs, 2, torch.device("cpu"), 12.0,
                     probe=lambda run: 50.0)
    text = str(info.value)
    assert text.startswith("skipped: table2@ogbn-arxiv-gcnii would take ~139 h on this CPU")
    assert "10 runs of up to 2000 epochs, 50 s per epoch" in text
    assert "budget_hours = 12" in text and "docs/gpu.md" in text
    assert "dvc exp run -S budget_hours=167" in text  # 1.2 x the estimate: enough to run it
    assert "dvc repro -f -s table2@ogbn-arxiv-gcnii" in text
    est = check_budget("s", runs, 2, torch.device("cpu"), 200.0, probe=lambda run: 50.0)
    assert est.hours == pytest.approx(138.9, abs=0.1)
    assert capsys.readouterr().err.startswith("s: ~139 h estimated on this CPU (10 runs")
    check_budget("s", runs, 2, torch.device("cpu"), 200.0, probe=lambda run: 0.01)
    assert capsys.readouterr().err == ""  # a few minutes: nothing to say


def test_the_probe_does_not_count_a_first_calls_one_time_cost():
    """The first run of a process pays lazy imports (~2 s on the CPU here); a probe that counted
    them estimated Geom-GCN's 5,000 epochs on Wisconsin at 12.8 h for a stage of under 3 min."""
    calls = []

    def run_once(*args, **kwargs) -> None:
        calls.append(args[5].epochs)
        time.sleep(0.3 if len(calls) == 1 else 0.0)

    run = fake_runs([5000], [partial(dict)])[0]
    seconds = probe_seconds(partial(run_once, *run.args))
    assert calls == [1, 1] and seconds < 0.1
    assert probe_seconds(partial(run_once, *run.args), tries=1) < 0.1  # warm: one try is enough
    assert calls == [1, 1, 1]


def test_the_probe_changes_no_result(raw):
    data = load_dataset("ogbn-arxiv", raw)
    exp = {"dataset": "ogbn-arxiv", "model": "gcn", "feature_norm": "none",
           "model_cfg": {"layers": 2, "hidden": 16, "dropout": 0.5},
           "train_cfg": {"epochs": 5, "lr": 0.01}}
    runs = experiment_runs(exp, data, 2, torch.device("cpu"), progress=False)
    before = [run() for run in runs]
    est = check_budget("t", runs, 1, torch.device("cpu"), 1.0)
    after = [run() for run in runs]
    assert est.runs == 2 and len(est.seconds_per_epoch) == 1 and est.hours > 0
    for x, y in zip(before, after, strict=True):
        assert (x.best_epoch, x.train, x.val, x.test) == (y.best_epoch, y.train, y.val, y.test)
        assert x.history == y.history


def run_stage(work: Path, raw: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twirls.stages." + args[0], *args[1:],
                           "--raw", str(raw)], cwd=work, env=child_env(REPO),
                          capture_output=True, text=True, timeout=600)


def test_a_cpu_user_with_every_dataset_is_told_and_the_rest_goes_on(raw, tmp_path):
    """Table 2's ogbn-arxiv GCN and Figure 3 (Amazon) on the generated files: under a budget
    below their estimate they run nothing, exit 0, print the estimate, and leave cells that say
    why; with room in the budget the same commit runs them (as on a GPU machine)."""
    work = make_workspace(REPO, tmp_path / "work")
    params = read_all(REPO)
    params["budget_hours"] = 1e-7
    params["table2"]["ogbn-arxiv-gcn"]["seeds"] = 1
    params["table2"]["ogbn-arxiv-gcn"]["train_cfg"]["epochs"] = 3
    fig3 = params["figure3"]
    fig3["seeds"], fig3["data_grid"]["split"] = 1, fig3["data_grid"]["split"][:1]
    for curve in fig3["curves"].values():
        curve["train_cfg"]["epochs"] = 2
    write_all(work, params)

    proc = run_stage(work, raw, "train", "table2", "ogbn-arxiv-gcn")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "table2@ogbn-arxiv-gcn: skipped: table2@ogbn-arxiv-gcn would take ~" in proc.stderr
    assert "Traceback" not in proc.stderr
    [cell] = json.loads((work / "results/table2/ogbn-arxiv-gcn.json").read_text())
    assert cell["status"] == "no-data" and cell["note"].startswith("skipped: ")
    assert json.loads((work / "metrics/table2/ogbn-arxiv-gcn.json").read_text())[
        "status"] == "no-data"

    proc = run_stage(work, raw, "sweep", "figure3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "figure3: skipped: figure3 would take ~" in proc.stderr
    metrics = json.loads((work / "metrics/figure3.json").read_text())
    assert metrics["status"] == "no-data" and metrics["reason"].startswith("skipped: figure3")
    assert metrics["points"] == {}
    assert (work / "reports/figures/figure3.png").is_file()

    params["budget_hours"] = 12  # the default: a few epochs fit
    write_all(work, params)
    proc = run_stage(work, raw, "train", "table2", "ogbn-arxiv-gcn")
    assert proc.returncode == 0, proc.stderr[-2000:]
    [cell] = json.loads((work / "results/table2/ogbn-arxiv-gcn.json").read_text())
    assert cell["status"] != "no-data" and cell["runs"] == 1


def test_budget_hours_is_checked_by_the_schema():
    from twirls.config.schema import ConfigError, check_params

    for bad in (0, -1, "12h", None):
        with pytest.raises(ConfigError, match="budget_hours"):
            check_params({"budget_hours": bad})
    check_params({"budget_hours": 0.5})


def test_train_config_epochs_drive_the_estimate():
    cfg = TrainConfig(epochs=7, patience=3)
    runs = [partial(seed_run, partial(dict), None, None, None, None, cfg, 0)]
    assert estimate(runs, 1, probe=lambda run: 3600.0).hours == pytest.approx(7.0)
