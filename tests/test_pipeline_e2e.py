"""End to end: the real `dvc repro` on a temporary copy of the repo with the smoke profile."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from e2e import MIRROR, REPO, copy_repo, dvc

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no offline mirror at {MIRROR}")]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    smoke = yaml.safe_load((REPO / "tests" / "smoke_params.yaml").read_text())
    path = copy_repo(tmp_path_factory.mktemp("repo"), smoke)
    dvc(path, "repro")
    return path


def test_dag_shows_the_stages(repo):
    dag = dvc(repo, "dag").stdout
    for stage in ("fetch@cora", "fetch@pubmed", "datasets", "report"):
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


def test_second_repro_is_a_no_op_except_fetch_checks(repo):
    out = dvc(repo, "repro").stdout
    assert "Running stage 'datasets'" not in out and "Running stage 'report'" not in out
