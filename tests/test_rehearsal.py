"""The full-size rehearsal (twirls.rehearsal): generated files in the real formats, read back by
the real loaders with the intended sizes; the budget params; the extrapolation; and one tiny
run of the runner through the real stage code, which must not touch reports/."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from twirls.config.schema import TRAIN_GROUPS, check_params
from twirls.cws.protocols import PAPER, choose_protocol, load_cws
from twirls.data import pku as pku_data
from twirls.data.fetch import entries_for, fetch_file
from twirls.data.registry import STATUS_FILE, load_dataset
from twirls.params import read_all, write_all
from twirls.rehearsal import generate as gen
from twirls.rehearsal.estimate import stage_record
from twirls.rehearsal.graphs import scaled
from twirls.rehearsal.measure import run_measured
from twirls.rehearsal.plan import StagePlan, all_plans, select, sweep_plans
from twirls.rehearsal.run import check_out_path, child_env, make_workspace
from twirls.rehearsal.run import main as rehearsal_main
from twirls.rehearsal.sizes import AMAZON, ARXIV, PKU, PUBMED
from twirls.rehearsal.textio import format_floats, row_seps, table_text
from twirls.reports.results import read_paper
from twirls.train.experiment import SPARSE_BELOW

REPO = Path(__file__).resolve().parents[1]
SCALE = 0.01


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("rehearsal-raw")
    return root, gen.generate(root, scale=SCALE, seed=0)


def test_number_text_round_trips_through_pandas():
    ints = np.array([[0, -1, 1234567], [9, 10, -99]])
    assert table_text(ints) == b"0,-1,1234567\n9,10,-99\n"
    floats = np.round(np.random.RandomState(0).randn(200, 7) * 3, 6)
    floats[0, :3] = [0.0, -0.0000004, 9.9999996]
    text = format_floats(floats, row_seps(*floats.shape), 6)
    back = pd.read_csv(io.BytesIO(text), header=None).to_numpy()
    np.testing.assert_allclose(back, np.round(floats, 6), atol=5e-7)
    assert b"-0.000000" not in text and text.count(b"\n") == 200


def test_full_sizes_are_the_papers_table_5():
    paper = read_paper()
    paper = paper[paper["table"] == "table5"]
    for name, sizes in (("pubmed", PUBMED), ("ogbn-arxiv", ARXIV), ("amazon", AMAZON)):
        rows = {r.metric: r.mean for r in paper[paper["dataset"] == name].itertuples()}
        assert rows, name
        for metric, value in rows.items():
            assert sizes[metric] == value, (name, metric)
    assert ARXIV["train"] + ARXIV["valid"] + ARXIV["test"] == ARXIV["nodes"]
    assert 18_000 < PKU["train_sentences"] < 20_000


def test_pubmed_planetoid_pickles(raw):
    root, sizes = raw
    data = load_dataset("pubmed", root)
    n = sizes["pubmed"]["nodes"]
    assert n == scaled(PUBMED["nodes"] - PUBMED["test"], SCALE, 561) + scaled(1000, SCALE, 20)
    assert (data.num_nodes, data.num_features, data.num_classes) == (n, 500, 3)
    assert data.num_undirected_edges == scaled(PUBMED["edges"], SCALE) == sizes["pubmed"]["edges"]
    assert data.splits["public"].sizes() == (60, 500, sizes["pubmed"]["test"])
    assert torch.equal(torch.bincount(data.labels[:60]), torch.full((3,), 20))
    density = float((data.features != 0).float().mean())
    assert density == pytest.approx(PUBMED["density"], abs=2e-4)
    assert density >= SPARSE_BELOW  # like real Pubmed, the models get dense features
    allx = (root / "pubmed" / "ind.pubmed.allx").read_bytes()
    assert b"_codecs" not in allx and allx[:2] == b"\x80\x02"  # Python 2's protocol-2 str


def test_ogbn_arxiv_zip_and_time_split(raw):
    root, sizes = raw
    with zipfile.ZipFile(root / "ogbn-arxiv" / "arxiv.zip") as zf:
        names = set(zf.namelist())
    assert {"arxiv/raw/edge.csv.gz", "arxiv/split/time/train.csv.gz",
            "arxiv/RELEASE_v1.txt"} <= names
    data = load_dataset("ogbn-arxiv", root)
    n, m = scaled(ARXIV["nodes"], SCALE), scaled(ARXIV["edges"], SCALE)
    assert (data.num_nodes, data.num_undirected_edges) == (n, m) == (
        sizes["ogbn-arxiv"]["nodes"], sizes["ogbn-arxiv"]["edges"])
    assert (data.num_features, data.num_classes) == (128, 40)
    assert data.meta["raw_directed_edges"] == m
    split, year = data.splits["time"], data.meta["year"]
    valid, test = scaled(ARXIV["valid"], SCALE), scaled(ARXIV["test"], SCALE)
    assert split.sizes() == (n - valid - test, valid, test)
    assert int(year[split.train].max()) <= 2017 and bool((year[split.val] == 2018).all())
    assert int(year[split.test].min()) >= 2019
    assert bool((data.features < 0).any())  # signed, word2vec-like: feature_norm none


def test_amazon_ignn_folder_and_label_ratios(raw):
    root, sizes = raw
    data = load_dataset("amazon", root)
    n = scaled(AMAZON["nodes"], SCALE)
    assert (data.num_nodes, data.num_undirected_edges) == (n, scaled(AMAZON["edges"], SCALE))
    assert data.features is None and data.labels.shape == (n, 58)
    assert data.meta["degree_field_mismatches"] == 0
    assert sorted(data.splits) == list(AMAZON["ratios"])
    test = set(data.splits["0.05"].test.tolist())
    assert len(test) == round(0.1 * n)
    for ratio, split in data.splits.items():
        assert len(split.train) == int(float(ratio) * n)
        assert split.val.numel() == 0 and not test & set(split.train.tolist())
        assert bool((data.labels[split.train].sum(1) > 0).all())


def test_pku_sentences(raw):
    root, sizes = raw
    data = load_dataset("pku", root)
    counts = data.meta["num_sentences"]
    assert counts["train"] + counts["val"] == scaled(PKU["train_sentences"], SCALE)
    assert counts["test"] == scaled(PKU["test_sentences"], SCALE)
    assert data.num_nodes == sizes["pku"]["nodes"]
    assert data.num_undirected_edges == sizes["pku"]["edges"]
    assert set(data.labels.unique().tolist()) == {0, 1, 2, 3}
    assert b"\r\n" in (root / "pku" / "pku_training.utf8").read_bytes()[:20000]


def test_pku_embedding_gives_the_paper_protocol(raw, tmp_path):
    root, sizes = raw
    folder = root / "pku"
    path = pku_data.embedding_file(folder)  # unpacked from the zip by the fetch code
    assert path is not None and path.parent == folder / pku_data.EMBEDDING_DIR
    chars, vectors = pku_data.read_char_embedding(path)
    assert vectors.shape == (PKU["characters"], pku_data.EMBEDDING_DIM) == (
        sizes["pku"]["embedding_characters"], sizes["pku"]["embedding_dim"])
    assert all(len(c) == 1 for c in chars) and len(set(chars)) == len(chars)
    text = (folder / pku_data.TRAIN_FILE).read_text(encoding="utf-8")
    assert set(text) - {" ", "\r", "\n"} <= set(chars)  # every generated character has a vector
    protocol = choose_protocol(folder)
    assert protocol.name == PAPER and protocol.embedding == path
    data = load_cws(folder, protocol, 0.8)
    assert data.embedding.shape == (data.vocab_size, 100)
    assert data.facts["embedding_hits"] == data.vocab_size - 1  # all but the unknown row
    status = json.loads((folder / STATUS_FILE).read_text())
    assert status["status"] == "ok" and "synthetic" in status["note"]
    assert gen.EMBEDDING_ZIP in status["files"]
    entry = next(e for e in entries_for("pku") if e.file == gen.EMBEDDING_ZIP)
    assert not entry.checksum  # so a fetch keeps the generated archive as it is
    assert fetch_file(entry, folder, None, tmp_path / "pins.tsv") == "present (unpinned)"


def test_generation_is_deterministic(tmp_path):
    def digest(root: Path) -> dict[str, str]:
        return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(root.rglob("*")) if p.is_file() and p.name != gen.MARKER}

    for name in ("a", "b"):
        gen.generate(tmp_path / name, scale=0.002, seed=3, datasets=["amazon", "pku"])
    assert digest(tmp_path / "a") == digest(tmp_path / "b")


def test_budget_params_change_only_the_budget():
    real = read_all(REPO)
    plans = {p.stage: p for p in all_plans(real)}
    wanted = {f"{group}@{k}" for group in TRAIN_GROUPS for k, e in real[group].items()
              if e["dataset"] in ("pubmed", "ogbn-arxiv")}
    assert {"table2@ogbn-arxiv-gcn", "table2@pubmed-gcn", "table10@pubmed-twirls-base-k2"} <= wanted
    assert wanted <= set(plans)
    curves = list(real["figure3"]["curves"])  # TWIRLS-base, IGNN, SGC, GCN, GAT
    assert {"table11", "table5[pku]", "table5[ogbn-arxiv]"} | {
        f"figure3[{c}]" for c in curves} <= set(plans)
    assert not [s for s in plans if s.startswith(("train@", "sweep@", "timing", "datasets"))]
    assert plans["figure3[IGNN]"].argv("RAW", "OUT")[:2] == ["twirls.stages.sweep", "figure3"]
    table8 = {p.stage: p for p in sweep_plans(real, ("citeseer",))}  # an extra curve: its stage
    assert table8["table8[paper-k2]"].argv("RAW", "OUT") == [
        "twirls.stages.sweep", "table8", "--extra", "table8-paper-k2", "--raw", "RAW"]
    assert table8["table8[TWIRLS-base]"].argv("RAW", "OUT") == [
        "twirls.stages.sweep", "table8", "--raw", "RAW"]
    assert plans["table2@ogbn-arxiv-gcn"].argv("RAW", "OUT")[:3] == [
        "twirls.stages.train", "table2", "ogbn-arxiv-gcn"]
    plan = plans["table2@ogbn-arxiv-gcn"]
    p = plan.params(real, 2)
    assert p["table2"]["ogbn-arxiv-gcn"]["train_cfg"]["epochs"] == 2
    assert p["table2"]["ogbn-arxiv-gcn"]["seeds"] == 1 and p["train"]["seeds"] == 1
    back = copy.deepcopy(p)
    back["table2"]["ogbn-arxiv-gcn"] = real["table2"]["ogbn-arxiv-gcn"]
    back["train"] = real["train"]
    assert back == real
    assert plan.full == {"epochs": 500, "seeds": 10, "grid_points": 1, "runs": 10,
                         "patience": None}
    assert plans["table2@pubmed-gcnii"].full["seeds"] == 3  # the entry's own seeds
    ignn = plans["figure3[IGNN]"]  # one curve alone, with its own epochs
    assert ignn.runs_per_epoch == 1 and ignn.full["runs"] == 15
    assert ignn.full["epochs"] == real["figure3"]["curves"]["IGNN"]["train_cfg"]["epochs"]
    assert ignn.full["grid_points"] == len(real["figure3"]["data_grid"]["split"])
    budget = ignn.params(real, 1)["figure3"]
    assert budget["data_grid"] == {"split": [0.05]} and list(budget["curves"]) == ["IGNN"]
    assert budget["curves"]["IGNN"]["train_cfg"]["epochs"] == 1
    assert plans["table11"].params(real, 1)["table11"]["warmup"] == 0
    assert plans["table5[pku]"].params(real, 1)["table5"]["datasets"] == ["pku"]
    for stage in ("table2@ogbn-arxiv-gcn", "figure3[GAT]", "table11", "table5[pku]", "table12"):
        check_params(plans[stage].params(real, 1))  # the schema accepts the budget params


def test_sse_figure3_curve_is_rehearsed_alone_at_full_size():
    """Figure 3's SSE curve gets its own plan like the other curves: its 5000 steps, 5 ratios x
    3 seeds in the real run, one step on the first ratio in the rehearsal (schema-valid)."""
    real = read_all(REPO)
    plan = {p.stage: p for p in all_plans(real)}["figure3[SSE]"]
    assert (plan.kind, plan.dataset, plan.name) == ("sweep", "amazon", "SSE")
    assert plan.full["epochs"] == real["figure3"]["curves"]["SSE"]["train_cfg"]["epochs"]
    assert plan.full["runs"] == 15 and plan.runs_per_epoch == 1
    budget = plan.params(real, 1)
    assert list(budget["figure3"]["curves"]) == ["SSE"]
    assert budget["figure3"]["curves"]["SSE"]["model_cfg"] == \
        real["figure3"]["curves"]["SSE"]["model_cfg"]
    check_params(budget)


def test_table12_plan_budget():
    real = read_all(REPO)
    plan = {p.stage: p for p in all_plans(real)}["table12"]
    assert (plan.kind, plan.group, plan.dataset) == ("cws", "table12", "pku")
    assert plan.argv("RAW", "OUT") == ["twirls.stages.table12", "--raw", "RAW", "--out", "OUT"]
    p = plan.params(real, 2)
    assert p["table12"]["epochs"] == {"paper": 2, "stand-in": 2}  # every model's epochs
    assert p["table12"]["seeds"] == 1
    back = copy.deepcopy(p)
    back["table12"]["epochs"] = real["table12"]["epochs"]
    back["table12"]["seeds"] = real["table12"]["seeds"]
    assert back == real
    models, seeds = len(real["table12"]["models"]), real["table12"]["seeds"]
    assert plan.runs_per_epoch == models
    assert plan.full["epochs"] == real["table12"]["epochs"]["paper"]
    assert plan.full["seeds"] == seeds and plan.full["runs"] == seeds * models
    rec = stage_record(plan, {1: 40.0, 2: 60.0},
                       {b: {"models": {m: {"seconds_mean": 3.0 * b} for m in range(models)}}
                        for b in (1, 2)})
    assert rec["seconds_per_epoch"] == pytest.approx(3.0)  # one model's epoch
    assert rec["overhead_seconds"] == pytest.approx(60.0 - 3.0 * 2 * models)
    assert rec["full_run"]["estimated_seconds"] == pytest.approx(
        60.0 - 6.0 * models + 3.0 * plan.full["epochs"] * seeds * models, abs=0.1)


def test_extrapolation():
    plan = StagePlan("table2@x", "train", "x", "pubmed", 1,
                     {"epochs": 100, "seeds": 10, "grid_points": 1, "runs": 10})
    rec = stage_record(plan, {1: 12.0, 3: 16.5}, {1: {"seconds_mean": 2.5},
                                                  3: {"seconds_mean": 6.5}})
    assert rec["seconds_per_epoch"] == pytest.approx(2.0)
    assert rec["seconds_per_epoch_wall"] == pytest.approx(2.25)
    assert rec["overhead_seconds"] == pytest.approx(16.5 - 3 * 2.0)
    assert rec["full_run"]["estimated_seconds"] == pytest.approx(10.5 + 2.0 * 100 * 10)
    assert "estimated_cpu_seconds" not in rec["full_run"]
    rec = stage_record(plan, {1: 12.0, 3: 16.5}, {1: {"seconds_mean": 2.5},
                                                  3: {"seconds_mean": 6.5}}, {1: 8.0, 3: 11.0})
    assert rec["cpu_seconds_per_epoch"] == pytest.approx(1.5)  # a loaded machine: cpu < wall
    assert rec["full_run"]["estimated_cpu_seconds"] == pytest.approx(6.5 + 1.5 * 100 * 10)
    cheap = stage_record(plan, {1: 8.0, 3: 8.4}, {1: {"seconds_mean": 0.1},
                                                  3: {"seconds_mean": 0.3}}, {1: 5.0, 3: 6.0})
    assert cheap["seconds_per_epoch"] == pytest.approx(0.1)  # start-up noise: the share rule
    assert cheap["cpu_seconds_per_epoch"] == pytest.approx(0.1 * 6.0 / 8.4, abs=1e-4)
    sweep = StagePlan("figure3", "sweep", "figure3", "amazon", 5,
                      {"epochs": 500, "seeds": 3, "grid_points": 5, "runs": 15})
    rec = stage_record(sweep, {1: 30.0, 2: 40.0}, {1: {}, 2: {}})
    assert rec["seconds_per_epoch"] == pytest.approx(2.0)  # 10 s / 5 runs
    assert rec["full_run"]["estimated_seconds"] == pytest.approx(20.0 + 2.0 * 500 * 15)
    with pytest.raises(SystemExit):
        check_out_path(REPO / "reports" / "tables" / "rehearsal.json")


def test_peak_rss_is_the_childs_own(tmp_path):
    ballast = np.ones(300 * 2**20, dtype=np.uint8)  # this process: > 300 MB resident
    small = run_measured([sys.executable, "-c", "print(1)"], tmp_path, dict(os.environ),
                         tmp_path / "small.log")
    big = run_measured([sys.executable, "-c", "import numpy as np; "
                        "print(np.ones(200 * 2**20, dtype=np.uint8).sum())"],
                       tmp_path, dict(os.environ), tmp_path / "big.log")
    assert ballast.sum() > 0 and small.ok and big.ok
    assert small.peak_rss_bytes < 100 * 2**20  # the parent's 300 MB does not leak in
    assert 200 * 2**20 < big.peak_rss_bytes < 350 * 2**20
    assert big.log_tail().strip() == str(200 * 2**20)
    failed = run_measured([sys.executable, "-c", "import sys; sys.exit(3)"], tmp_path,
                          dict(os.environ), tmp_path / "failed.log")
    assert failed.returncode == 3 and not failed.ok


def _snapshot() -> dict[str, float]:
    """mtimes of reports/results.csv and everything under reports/tables."""
    paths = [*(REPO / "reports" / "tables").rglob("*"), REPO / "reports" / "results.csv"]
    return {str(p): p.stat().st_mtime for p in paths if p.is_file()}


def test_runner_tiny_scale_real_stages(tmp_path):
    before = _snapshot()
    out = tmp_path / "rehearsal.json"
    kept = {"status": "ok", "peak_rss_gb": 1.0, "full_run": {"estimated_seconds": 1.0}}
    out.write_text(json.dumps({"scale": SCALE, "stages": [  # an earlier --only run's report
        {**kept, "stage": "table11"}, {**kept, "stage": "timing"},  # the old name: dropped
        {**kept, "stage": "table2@pubmed-sgc", "peak_rss_gb": 99.0}]}))  # re-measured
    code = rehearsal_main(["--scale", str(SCALE), "--only", "table2@pubmed-sgc",
                           "--only", "table5[pku]", "--out", str(out), "--repo", str(REPO),
                           "--budgets", "1,2"])
    report = json.loads(out.read_text())
    assert code == 0 and report["complete"] and report["synthetic_data"]
    assert report["check_max_peak_rss_gb_lt_16"] and report["all_stages_ok"]
    stages = {s["stage"]: s for s in report["stages"]}
    assert set(stages) == {"table2@pubmed-sgc", "table5[pku]", "table11"}
    # kept as measured, naming the GPU that ran it (none: this report's machine had none)
    assert len(report["stages"]) == 3
    assert stages["table11"] == {**kept, "stage": "table11", "gpu": None}
    sgc = stages["table2@pubmed-sgc"]
    assert sgc["status"] == "ok" and sgc["epochs_measured"] == [1, 2]
    assert set(sgc["wall_seconds"]) == {"1", "2"} and sgc["device"] == "cpu"
    assert sgc["gpu_peak_gb"] is None and sgc["gpu_note"]
    assert 0.05 < sgc["peak_rss_gb"] < 16 and sgc["seconds_per_epoch"] > 0
    assert "metrics/table2/pubmed-sgc.json" in sgc["per_epoch_method"]
    assert sgc["full_run"]["epochs"] == 100
    assert sgc["full_run"]["seeds"] == read_all(REPO)["train"]["seeds"]  # the real run's
    assert sgc["full_run"]["estimated_seconds"] >= sgc["overhead_seconds"]
    assert sgc["sizes"]["nodes"] == report["generation"]["datasets"]["pubmed"]["nodes"]
    pku = stages["table5[pku]"]
    assert pku["loaded"]["nodes"] == report["generation"]["datasets"]["pku"]["nodes"]
    assert report["machine"]["cpu_count"] >= 1 and report["machine"]["torch"]
    assert report["not_run"] == []  # table12 trains on PKU
    assert _snapshot() == before  # nothing written to reports/tables or results.csv


@pytest.mark.parametrize("git", [True, False])
def test_workspace_gives_stages_their_params_with_or_without_git(tmp_path, git):
    """Without git (a bare GPU image) the workspace is a no-SCM DVC project; a stage's child
    process, with no git on its PATH, still reads exactly the params it declares."""
    work = make_workspace(REPO, tmp_path / "work", git=git)
    write_all(work, read_all(REPO))
    assert (work / ".git").is_dir() == git
    env = child_env(REPO)
    if not git:
        env["PATH"] = str(Path(sys.executable).parent)  # no git to fall back on
    code = "from twirls.params import load_params; print(sorted(load_params('table11')))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "['device', 'table11']"  # what dvc.yaml declares for it


def test_runner_tiny_scale_table12_paper_protocol(tmp_path):
    before = _snapshot()
    out = tmp_path / "rehearsal.json"
    code = rehearsal_main(["--scale", str(SCALE), "--only", "table12", "--out", str(out),
                           "--repo", str(REPO), "--budgets", "1"])
    report = json.loads(out.read_text())
    assert code == 0 and report["all_stages_ok"] and report["check_max_peak_rss_gb_lt_16"]
    (cws,) = report["stages"]
    assert cws["stage"] == "table12" and cws["status"] == "ok" and cws["epochs_measured"] == [1]
    assert cws["runs_per_epoch"] == len(read_all(REPO)["table12"]["models"])
    assert cws["seconds_per_epoch"] > 0 and "metrics/table12.json" in cws["per_epoch_method"]
    assert cws["full_run"]["protocol"] == "paper"
    assert cws["full_run"]["estimated_seconds"] >= cws["overhead_seconds"]
    assert _snapshot() == before


def test_only_orders_the_stages_by_priority():
    plans = all_plans(read_all(REPO))
    chosen = [p.stage for p in select(plans, ["table12", "figure3[IGNN", "table2@pubmed-"])]
    pubmed = [p.stage for p in plans if p.stage.startswith("table2@pubmed-")]
    assert chosen == ["table12", "figure3[IGNN]", *pubmed] and len(pubmed) > 1
    assert [p.stage for p in select(plans, ["pubmed-sgc", "table2@pubmed-"])][0] == \
        "table2@pubmed-sgc"  # matched by two entries: listed once, at the first
    assert select(plans, []) == plans


def test_deadline_lists_the_stages_it_left_out(tmp_path):
    """Under ``--deadline`` no stage starts without time left: here none (the generation alone
    takes longer), and the report says which, in ``--only`` order, and that it is incomplete."""
    out = tmp_path / "rehearsal.json"
    code = rehearsal_main(["--scale", str(SCALE), "--only", "table2@pubmed-sgc",
                           "--only", "table5[pku]", "--out", str(out), "--repo", str(REPO),
                           "--deadline", "0.001"])
    report = json.loads(out.read_text())
    assert report["out_of_time"] == ["table2@pubmed-sgc", "table5[pku]"]
    assert report["stages"] == [] and not report["complete"] and code == 1
    assert report["deadline_seconds"] == 0.001


def test_skip_done_keeps_what_an_earlier_call_measured(tmp_path):
    out = tmp_path / "rehearsal.json"
    args = ["--scale", str(SCALE), "--out", str(out), "--repo", str(REPO),
            "--data", str(tmp_path / "data")]
    assert rehearsal_main([*args, "--only", "table5[pku]"]) == 0
    first = json.loads(out.read_text())["stages"]
    assert rehearsal_main([*args, "--only", "table5[pku]", "--skip-done"]) == 0  # nothing to do
    assert json.loads(out.read_text())["stages"] == first
    assert rehearsal_main([*args, "--only", "table5[pku]", "--only", "table5[pubmed]",
                           "--skip-done"]) == 0
    stages = json.loads(out.read_text())["stages"]
    assert [s["stage"] for s in stages] == ["table5[pku]", "table5[pubmed]"]
    assert stages[0] == first[0]  # kept as it was, not measured again


def test_a_run_past_its_time_limit_is_stopped_and_says_so(tmp_path):
    out = tmp_path / "rehearsal.json"
    code = rehearsal_main(["--scale", str(SCALE), "--only", "table2@pubmed-sgc", "--out",
                           str(out), "--repo", str(REPO), "--stage-timeout", "0.5"])
    (stage,) = json.loads(out.read_text())["stages"]
    assert code == 1 and stage["status"] == "failed" and len(stage["runs"]) == 1
    assert stage["error"].startswith("stopped at its time limit, 0.5 s (--stage-timeout")
    assert stage["runs"][0]["returncode"] < 0


def test_committed_rehearsal_covers_every_large_data_stage_under_16_gb():
    """``reports/benchmarks/rehearsal.json`` must be rerun (``make rehearsal``) whenever a stage
    that reads Pubmed, ogbn-arxiv, Amazon or PKU is added or renamed."""
    report = json.loads((REPO / "reports" / "benchmarks" / "rehearsal.json").read_text())
    planned = {p.stage for p in all_plans(read_all(REPO))}
    recorded = {s["stage"]: s for s in report["stages"]}
    assert planned == set(recorded), (planned ^ set(recorded))
    assert report["complete"] and report["scale"] == 1.0 and not report["not_run"]
    assert all(s["status"] == "ok" for s in recorded.values())
    assert max(s["peak_rss_gb"] for s in recorded.values()) < 16.0


def test_committed_rehearsal_estimates_the_runs_params_yaml_asks_for():
    """Each stage's estimate in ``rehearsal.json`` counts the epochs, seeds and runs of today's
    params: a change of seeds (``train.seeds: 100``) or epochs makes it stale, and
    ``python -m twirls.rehearsal.run --only <stage>`` must measure that stage again."""
    report = json.loads((REPO / "reports" / "benchmarks" / "rehearsal.json").read_text())
    recorded = {s["stage"]: s["full_run"] for s in report["stages"]}
    size = ("epochs", "seeds", "grid_points", "runs")
    stale = {p.stage: (f"recorded {[recorded[p.stage].get(k) for k in size]}, "
                       f"params {[p.full.get(k) for k in size]} ({', '.join(size)})")
             for p in all_plans(read_all(REPO)) if p.full and p.stage in recorded
             and any(recorded[p.stage].get(k) != p.full.get(k) for k in size)}
    assert not stale, stale


def test_a_curves_own_seeds_size_its_real_run_and_its_rehearsal_runs_one():
    real = read_all(REPO)
    real["figure3"]["curves"]["GCN"]["seeds"] = 7
    plans = {p.stage: p for p in all_plans(real)}
    points = len(real["figure3"]["data_grid"]["split"])
    assert plans["figure3[GCN]"].full["seeds"] == 7
    assert plans["figure3[GCN]"].full["runs"] == 7 * points
    assert plans["figure3[SGC]"].full["seeds"] == real["figure3"]["seeds"]
    budget = plans["figure3[GCN]"].params(real, 1)
    assert budget["figure3"]["curves"]["GCN"]["seeds"] == 1
    check_params(budget)


@pytest.mark.parametrize(("gpu_peak", "device"), [(1.58, "cuda"), (None, "unknown")])
def test_a_stage_stopped_before_its_metrics_says_where_it_ran(gpu_peak, device):
    """A stage killed at its time limit writes no metrics: nvidia-smi's samples of its process
    say it ran on the GPU (seen on the H200: ``table12`` stopped by the deadline was recorded
    as run on the CPU); without them, where it ran is unknown, not "cpu"."""
    from twirls.rehearsal.run import assemble

    real = read_all(REPO)
    plan = {p.stage: p for p in all_plans(real)}["table12"]
    runs = [{"epochs": 1, "wall_seconds": 23.5, "cpu_seconds": 25.1, "load_average_1min": 1.0,
             "peak_rss_gb": 1.66, "gpu_peak_gb": gpu_peak, "returncode": -9}]
    record = assemble(plan, real, {1: 23.5}, {1: 25.1}, {}, runs, "stopped at its time limit")
    assert record["status"] == "failed"
    assert record["device"] == device and record["gpu_peak_gb"] == gpu_peak
    assert "CPU" not in record["gpu_note"]
