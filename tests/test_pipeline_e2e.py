"""End to end: the real `dvc repro` on a temporary copy of the repo with the smoke profile."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from e2e import MIRROR, REPO, copy_repo, dvc
from requires import needs

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no offline mirror at {MIRROR}"),
              needs("dvc", "the dvc CLI runs the pipeline"),
              needs("dgl", "the smoke profile's timing stage times GAT, on DGL's layers"),
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
    for stage in ("fetch@cora", "fetch@pubmed", "datasets", "train@texas-twirls", "report"):
        assert stage in dag


def test_datasets_table_and_missing_data_reported(repo):
    table = pd.read_csv(repo / "reports" / "tables" / "datasets.csv")
    by_name = table.set_index("dataset")
    assert by_name.loc["cora", "nodes"] == 2708 and by_name.loc["texas", "nodes"] == 183
    assert by_name.loc["pubmed", "status"] == "no-data"
    assert "ind.pubmed.allx" in by_name.loc["pubmed", "note"]
    status = json.loads((repo / "data" / "raw" / "pubmed" / "FETCH.json").read_text())
    assert status["status"] == "missing"


def test_results_and_index(repo):
    results = pd.read_csv(repo / "reports" / "results.csv")
    assert results.columns.tolist() == ["table", "dataset", "model", "metric", "mean", "std",
                                        "runs", "paper_mean", "paper_std", "delta", "status"]
    stats = results[results.table == "dataset-statistics"].set_index(["dataset", "metric"])
    assert stats.loc[("cora", "nodes"), "status"] == "reproduced"
    assert stats.loc[("pubmed", "nodes"), "status"] == "no-data"
    assert stats.loc[("ogbn-arxiv", "nodes"), "status"] == "paper-only"
    index = (repo / "reports" / "README.md").read_text()
    assert "Table 5: Dataset statistics" in index
    bench = results[results.table == "standard-benchmarks"].set_index(["dataset", "model"])
    assert bench.loc[("cora", "TWIRLS-base"), "runs"] == 2
    assert 0 < bench.loc[("cora", "TWIRLS-base"), "mean"] <= 100
    assert bench.loc[("pubmed", "GCN"), "status"] == "no-data"
    het = results[results.table == "heterophily"].set_index(["dataset", "model"])
    assert het.loc[("texas", "TWIRLS"), "runs"] == 10  # one run on each of the ten splits


def test_sweep_draws_its_figure(repo):
    assert (repo / "reports" / "figures" / "propagation-steps-cora.png").stat().st_size > 1000
    index = (repo / "reports" / "README.md").read_text()
    assert "[propagation-steps-cora.png](figures/propagation-steps-cora.png)" in index


def test_sweep_over_a_data_grid_makes_one_point_per_chain_length(repo):
    metrics = json.loads((repo / "metrics" / "sweep" / "chains.json").read_text())
    assert metrics["status"] == "ok"
    assert sorted(metrics["points"]) == ["TWIRLS*-base {'length': 10}",
                                         "TWIRLS*-base {'length': 12}"]
    assert (repo / "reports" / "figures" / "chains.png").stat().st_size > 1000


def test_timing_stage_fills_table_11(repo):
    results = pd.read_csv(repo / "reports" / "results.csv")
    timing = results[results.table == "running-time"].set_index(["model", "metric"])
    assert timing.loc[("GCN", "train_seconds"), "runs"] == 2
    assert timing.loc[("GCN", "parameters"), "status"] == "differs"  # 16 hidden, not 512
    assert timing.loc[("MLP", "parameters"), "status"] == "paper-only"  # not in the smoke run
    assert "Table 11" in (repo / "reports" / "tables" / "running-time.md").read_text()


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
    metrics = json.loads((repo / "metrics" / "train" / "cora-twirls-base-k2.json").read_text())
    assert metrics["status"] == "ok" and metrics["runs"] == 2
    assert "metrics/train/cora-twirls-base-k2.json" in dvc(repo, "metrics", "show").stdout
    history = pd.read_csv(repo / "plots" / "train" / "cora-twirls-base-k2.csv")
    assert history["epoch"].tolist() == list(range(15))
    assert {"loss", "train", "val", "test"} <= set(history.columns)


def test_second_repro_is_a_no_op_except_fetch_checks(repo):
    out = dvc(repo, "repro").stdout
    assert "Running stage 'datasets'" not in out and "Running stage 'report'" not in out


def test_attention_experiment_reruns_only_attention_stages(repo):
    out = dvc(repo, "exp", "run", "-S", "attention.p=0.2").stdout
    ran = {line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage")}
    ran = {s for s in ran if not s.startswith("fetch@")}  # fetch only re-verifies checksums
    # exactly the stages that declare `attention` (and the report, which reads their results)
    assert ran == {"robust-attn@nettack-cora-fast-twirls", "attention-figures", "energy",
                   "report"}
    shown = dvc(repo, "exp", "show", "--csv").stdout
    assert "attention.p" in shown and "0.2" in shown
