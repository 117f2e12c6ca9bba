"""End to end: the real `dvc repro` on a temporary copy of the repo with the smoke profile."""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest
import yaml

from e2e import MIRROR, REPO, copy_repo, dvc, run_dvc
from e2e import env as e2e_env
from requires import needs

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no offline mirror at {MIRROR}"),
              needs("dvc", "the dvc CLI runs the pipeline"),
              needs("deeprobust", "the smoke profile's robust stage trains DeepRobust's "
                    "GCN-Jaccard")]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    smoke = yaml.safe_load((REPO / "tests" / "smoke_params.yaml").read_text())
    path = copy_repo(tmp_path_factory.mktemp("repo"), smoke)
    dvc(path, "repro")
    return path


def test_dag_shows_the_stages(repo):
    dag = dvc(repo, "dag").stdout
    for stage in ("check-params", "fetch@cora", "fetch@pubmed", "table5", "table3@texas-twirls",
                  "table4@nettack-cora-fast-gcn-jaccard", "table4-twirls@nettack-cora",
                  "table4-twirls-extra@nettack-cora",
                  "table8-extra@table8-paper-k1", "table9@nettack-cora", "report"):
        assert stage in dag


def test_datasets_table_and_missing_data_reported(repo):
    table = pd.read_csv(repo / "reports" / "datasets.csv")
    by_name = table.set_index("dataset")
    assert by_name.loc["cora", "nodes"] == 2708 and by_name.loc["texas", "nodes"] == 183
    assert 0 < by_name.loc["texas", "homophily"] < 0.2 and "paper_nodes" not in table
    assert by_name.loc["pubmed", "status"] == "no-data"
    nodes = {c["dataset"]: c["mean"] for c in json.loads((repo / "results" / "table5.json")
                                                         .read_text()) if c["metric"] == "nodes"}
    assert nodes["cora"] == 2708 and nodes["texas"] == 183  # Table 5's cells
    assert "ind.pubmed.allx" in by_name.loc["pubmed", "note"]
    status = json.loads((repo / "data" / "raw" / "pubmed" / "FETCH.json").read_text())
    assert status["status"] == "missing"


def test_results_and_index(repo):
    results = pd.read_csv(repo / "reports" / "results.csv")
    assert results.columns.tolist() == ["table", "dataset", "model", "metric", "mean", "std",
                                        "runs", "paper_mean", "paper_std", "delta", "status"]
    stats = results[results.table == "table5"].set_index(["dataset", "metric"])
    assert stats.loc[("cora", "nodes"), "status"] == "reproduced"
    assert stats.loc[("pubmed", "nodes"), "status"] == "no-data"
    assert stats.loc[("ogbn-arxiv", "nodes"), "status"] == "paper-only"
    index = (repo / "reports" / "README.md").read_text()
    assert "Table 5: Dataset statistics" in index
    bench = results[results.table == "table2"].set_index(["dataset", "model"])
    assert bench.loc[("cora", "TWIRLS-base"), "runs"] == 2
    assert 0 < bench.loc[("cora", "TWIRLS-base"), "mean"] <= 100
    assert bench.loc[("pubmed", "GCN"), "status"] == "no-data"
    het = results[results.table == "table3"].set_index(["dataset", "model"])
    assert het.loc[("texas", "TWIRLS"), "runs"] == 10  # one run on each of the ten splits
    extra = results[results.table == "table8-paper-k1"]  # stage table8-extra@table8-paper-k1
    assert extra["runs"].tolist() == [2] and 0 < extra["mean"].iloc[0] <= 100


def test_every_experiment_stage_writes_the_runs_behind_its_cells(repo):
    """Each stage's ``results/<...>.csv`` (one row per run) gives every cell of its
    ``results/<...>.json`` (same runs, same mean), for every kind of experiment stage."""
    from twirls.reports.runs import read_runs, unmatched_cells

    not_runs = {"params-check.json", "table5.json"}
    # the smoke run's stages only: the copy keeps the committed files (and lock entries) of
    # stages its params removed
    stages = set(dvc(repo, "stage", "list", "--name-only").stdout.split())
    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    outs = {o["path"] for name, stage in lock.items() if name in stages
            for o in stage.get("outs", [])}
    kinds = set()
    for out in sorted(outs):
        cells_file = repo / out
        if (not out.startswith("results/") or cells_file.suffix != ".json"
                or cells_file.name in not_runs or cells_file.parent.name == "energy"):
            continue
        rows_file = cells_file.with_suffix(".csv")
        assert rows_file.exists(), f"{cells_file} has no rows file"
        rows = read_runs(rows_file)
        cells = json.loads(cells_file.read_text())
        assert unmatched_cells(cells, rows) == [], cells_file
        if rows:
            kinds.add(cells_file.parent.name if cells_file.parent.name != "results"
                      else cells_file.stem)
    assert {"table2", "table3", "table8", "table8-extra", "chains", "table11"} <= kinds, kinds


def test_sweep_draws_its_figure(repo):
    assert (repo / "reports" / "figures" / "figure2.png").stat().st_size > 1000
    index = (repo / "reports" / "README.md").read_text()
    assert "[figure2.png](figures/figure2.png)" in index


def test_sweep_over_a_data_grid_makes_one_point_per_chain_length(repo):
    metrics = json.loads((repo / "metrics" / "chains.json").read_text())
    assert metrics["status"] == "ok"
    assert sorted(metrics["points"]["TWIRLS*-base"]) == ["length=10", "length=12"]
    assert (repo / "reports" / "figures" / "chains.png").stat().st_size > 1000


def test_timing_stage_fills_table_11(repo):
    results = pd.read_csv(repo / "reports" / "results.csv")
    timing = results[results.table == "table11"].set_index(["model", "metric"])
    assert timing.loc[("GCN", "train_seconds"), "runs"] == 2
    # the smoke run has no ogbn-arxiv: its random graph is a substitute, never judged
    assert timing.loc[("GCN", "parameters"), "status"] == "stand-in"
    assert timing.loc[("GCN", "train_seconds"), "status"] == "stand-in"
    assert timing.loc[("MLP", "parameters"), "status"] == "paper-only"  # not in the smoke run
    assert "Table 11" in (repo / "reports" / "tables" / "table11.md").read_text()


def test_energy_stage_traces_and_figure(repo):
    result = json.loads((repo / "results" / "energy" / "cora.json").read_text())
    assert result["status"] == "ok" and len(result["curves"]["twirls-base"]["trace"]) == 9
    assert result["curves"]["twirls-base"]["monotone"]
    metrics = json.loads((repo / "metrics" / "energy" / "cora.json").read_text())
    assert metrics["base_monotone"] == 1 and metrics["every_monotone"] == 1
    assert (repo / "reports" / "figures" / "energy-per-step-cora.png").stat().st_size > 1000
    index = (repo / "reports" / "README.md").read_text()
    assert "[energy-per-step-cora.png](figures/energy-per-step-cora.png)" in index


def test_metrics_and_plots_for_dvc(repo):
    metrics = json.loads((repo / "metrics" / "table2" / "cora-twirls-base-k2.json").read_text())
    assert metrics["status"] == "ok" and metrics["runs"] == 2
    shown = dvc(repo, "metrics", "show").stdout  # the headline only: readable at 120 columns
    assert "reports/headline.json" in shown and "metrics/table2" not in shown
    assert max(map(len, shown.splitlines())) <= 120
    history = pd.read_csv(repo / "plots" / "table2" / "cora-twirls-base-k2.csv")
    assert history["epoch"].tolist() == list(range(15))
    assert {"loss", "train", "val", "test"} <= set(history.columns)


def test_every_metrics_file_names_the_stack_of_its_run(repo):
    """``stack``: the Python, torch and NumPy of the run that wrote each metrics file."""
    import numpy
    import torch

    copied = int(subprocess.run(["git", "log", "-1", "--format=%ct"], cwd=repo, check=True,
                                capture_output=True, text=True).stdout)  # the copy's commit
    files = sorted(p for p in (repo / "metrics").rglob("*.json")
                   if p.stat().st_mtime >= copied)  # written by this run, not copied
    assert len(files) >= 5
    for path in files:
        assert json.loads(path.read_text()).get("stack") == {
            "python": platform.python_version(), "torch": torch.__version__,
            "numpy": numpy.__version__}, path


def test_second_repro_is_a_no_op(repo):
    out = dvc(repo, "repro").stdout
    assert "Running stage" not in out, out  # fetch too: its outputs' hashes vouch for the files


def test_attention_experiment_reruns_only_attention_stages(repo):
    out = dvc(repo, "exp", "run", "-S", "attention.p=0.2").stdout
    ran = {line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage")}
    # check-params rechecks the params (a second)
    ran = {s for s in ran if s != "check-params"}
    # exactly the stages that declare `attention` (and the report, which reads their results);
    # Table 9, Table 4's extra tables (table4-twirls-extra@, the clean graph here) and the
    # energy figure pin their own attention, so they are not among them
    assert ran == {"table4-twirls@nettack-cora", "attention-figures", "report"}
    shown = dvc(repo, "exp", "show", "--csv").stdout
    assert "attention.p" in shown and "0.2" in shown


def test_bad_param_fails_before_any_fetch_with_one_line(repo):
    params = repo / "params.yaml"
    good = params.read_text()
    try:
        params.write_text(good.replace("  p: 0.2\n", "  p: abc\n").replace("  p: 0.1\n",
                                                                          "  p: abc\n"))
        proc = run_dvc(repo, "repro")
    finally:
        params.write_text(good)
    assert proc.returncode != 0
    assert "Running stage 'fetch@" not in proc.stdout  # nothing expensive ran first
    assert "error: params.yaml: attention.p = 'abc': expected a number >= 0 and <= 2" in (
        proc.stderr + proc.stdout)
    assert "git checkout -- params.yaml params" in proc.stderr + proc.stdout  # the way back
    assert "Traceback" not in proc.stderr + proc.stdout
    # the check's committed output survives the failed check (persist): nothing to restore
    assert json.loads((repo / "results" / "params-check.json").read_text())["status"] == "ok"


def test_damaged_file_is_repaired_and_nothing_reruns(repo):
    x = repo / "data" / "raw" / "cora" / "ind.cora.x"
    good = x.read_bytes()
    x.write_bytes(good + b"garbage")
    proc = run_dvc(repo, "repro", "fetch@cora")
    assert proc.returncode == 0, proc.stderr
    assert x.read_bytes() == good
    assert "ind.cora.x" in proc.stderr + proc.stdout  # one line says what was repaired
    status = run_dvc(repo, "status", "table2@cora-twirls-base-k2").stdout
    assert "changed" not in status


def test_unrepairable_file_fails_loudly_and_keeps_the_measured_result(repo, tmp_path):
    x = repo / "data" / "raw" / "cora" / "ind.cora.x"
    result = repo / "results" / "table2" / "cora-twirls-base-k2.json"
    before = result.read_bytes()
    good = x.read_bytes()
    x.write_bytes(good + b"garbage")
    try:
        proc = run_dvc(repo, "repro", "fetch@cora", mirror=tmp_path)  # an empty mirror
        assert proc.returncode != 0
        assert "damaged" in proc.stderr + proc.stdout
        proc = run_dvc(repo, "repro", "-s", "table2@cora-twirls-base-k2", mirror=tmp_path)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr
        assert not result.exists() or result.read_bytes() == before
        assert "no-data" not in (result.read_text() if result.exists() else "")
    finally:
        x.write_bytes(good)
        run_dvc(repo, "repro", "fetch@cora")


def training(output: str) -> bool:
    return "runs (" in output or "seed " in output


def test_ctrl_c_in_a_running_stage_prints_one_line(repo):
    """A real SIGINT to the process group of ``dvc repro`` (what Ctrl-C sends) while a stage
    trains: one line from the stage saying how to go on or go back, no traceback, no worker
    left running. Runs last: the interrupted stage's outputs are gone afterwards."""
    table2, shared = repo / "params" / "table2.yaml", repo / "params.yaml"
    good, good_shared = table2.read_text(), shared.read_text()
    params = yaml.safe_load(good)
    params["table2"]["cora-twirls-base-k2"]["train_cfg"].update(epochs=10**6, patience=10**6)
    table2.write_text(yaml.safe_dump(params))
    # a million epochs is over any budget: let the stage start them (budget_hours)
    shared.write_text(yaml.safe_dump({**yaml.safe_load(good_shared), "budget_hours": 10**9}))
    proc = subprocess.Popen([sys.executable, "-m", "dvc", "repro", "table2@cora-twirls-base-k2"],
                            cwd=repo, env=e2e_env(repo), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(lambda: proc.stdout.read(1), "")))
    reader.start()
    try:
        deadline = time.monotonic() + 300
        while not training("".join(seen)) and time.monotonic() < deadline:
            time.sleep(0.5)  # until the seeds' progress bar shows (workers or one process)
        assert training("".join(seen)), "".join(seen)[-2000:]
        time.sleep(2.0)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
        reader.join(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        table2.write_text(good)
        shared.write_text(good_shared)
    out = "".join(seen)
    assert proc.returncode != 0
    assert "Traceback" not in out, out[-3000:]
    lines = [line for line in out.splitlines() if line.startswith("interrupted: train:")]
    assert len(lines) == 1 and "dvc checkout" in lines[0], out[-3000:]

