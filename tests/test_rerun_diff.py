"""twirls.bench.rerun_diff: per-run scores of results/ against a git revision."""

from __future__ import annotations

import json
import subprocess

from twirls.bench.rerun_diff import (
    claim_changes,
    compare_cells,
    compare_rows,
    compare_tree,
    current_table,
    status_changes,
    summary,
)
from twirls.cells import runs_text


def cell(model, runs, mean=None, metric="accuracy"):
    return {"table": "t", "dataset": "cora", "model": model, "metric": metric,
            "mean": sum(runs) / len(runs) if mean is None else mean, "std": 0.5,
            "extra": {"test_per_run": runs}}


def test_float32_scores_equal_their_exact_fraction_and_a_moved_run_is_counted():
    old = [cell("GCN", [71.52999997138977, 80.0]), cell("SGC", [70.0, 70.0]),
           cell("MLP", [1.0], metric="train_seconds"), cell("Cora", [5278.0], metric="edges")]
    new = [cell("GCN", [71.53, 80.0]), cell("SGC", [70.0, 71.0]),
           cell("MLP", [2.0], metric="train_seconds"), cell("Cora", [5278.0], metric="edges"),
           cell("new", [1.0])]
    rows = {r["model"]: r for r in compare_cells(old, new)}
    assert set(rows) == {"GCN", "SGC"}  # scores only, and only cells with a past
    assert not rows["GCN"]["moved"] and rows["SGC"]["runs_moved"] == 1
    s = summary(list(rows.values()))
    assert (s["cells"], s["cells_moved"], s["runs_moved"]) == (2, 1, 1)
    assert s["largest_mean_shift"] == 0.5 and s["largest"][0]["model"] == "SGC"


def test_compare_tree_reads_the_committed_file_from_git(tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    results = tmp_path / "results"
    results.mkdir()
    path = results / "a.json"
    path.write_text(json.dumps([cell("GCN", [80.0, 81.0])]))
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    path.write_text(json.dumps([cell("GCN", [80.0, 82.0])]))
    (results / "uncommitted.json").write_text(json.dumps([cell("GCN", [1.0])]))
    rows = compare_tree(results, "HEAD", tmp_path)
    assert [(r["file"], r["runs_moved"]) for r in rows] == [("results/a.json", 1)]
    assert compare_tree(path, "HEAD", tmp_path) == rows  # one file


def sweep_rows(values, metric="accuracy"):
    """A sweep's rows text: two grid points (steps 8, 16) of two seeds each."""
    rows = [{"table": "figure2", "dataset": "cora", "graph": "clean", "model": "TWIRLS-base",
             "variant": "paper", "steps": steps, "split": "public", "seed": seed,
             "metric": metric, "value": v, "best_epoch": 3, "epochs": 9, "seconds": 0.1,
             "device": "cpu"}
            for (steps, seed), v in zip([(8, 0), (8, 1), (16, 0), (16, 1)], values, strict=True)]
    return runs_text(rows)


def test_rows_compare_every_point_of_a_sweep_run_by_run():
    old = sweep_rows([80.0, 81.0, 82.0, 83.0])
    new = sweep_rows([80.0, 81.0, 82.0, 84.0])
    rows = compare_rows(old, new)
    assert [(r["model"], r["runs"], r["runs_moved"]) for r in rows] == [
        ("TWIRLS-base {'steps': '8'}", 2, 0), ("TWIRLS-base {'steps': '16'}", 2, 1)]
    assert rows[1]["mean_before"] == 82.5 and rows[1]["mean_after"] == 83.0
    assert compare_rows(sweep_rows([1.0] * 4, "train_seconds"),
                        sweep_rows([2.0] * 4, "train_seconds")) == []  # scores only


def test_compare_tree_prefers_rows_where_both_sides_have_them(tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "results").mkdir()
    cells, runs = tmp_path / "results" / "figure2.json", tmp_path / "results" / "figure2.csv"
    cells.write_text("[]")  # a sweep without paper cells: only its rows can be compared
    runs.write_text(sweep_rows([80.0, 81.0, 82.0, 83.0]))
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    runs.write_text(sweep_rows([80.0, 81.0, 82.0, 84.0]))
    rows = compare_tree(tmp_path / "results", "HEAD", tmp_path)
    assert [(r["file"], r["runs_moved"]) for r in rows] == [
        ("results/figure2.csv", 0), ("results/figure2.csv", 1)]


def test_runs_that_moved_to_a_new_stage_are_compared_with_the_stage_that_ran_them(tmp_path):
    """A stage split in two (``table4-twirls@`` -> ``+ table4-twirls-extra@``): the new stage's
    rows file has no past of its own, so its runs are matched in every committed rows file."""
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    old_dir, new_dir = tmp_path / "results" / "old", tmp_path / "results" / "new"
    old_dir.mkdir(parents=True)
    (old_dir / "a.json").write_text("[]")
    (old_dir / "a.csv").write_text(sweep_rows([80.0, 81.0, 82.0, 83.0]))
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    new_dir.mkdir()
    (new_dir / "a.json").write_text("[]")
    (new_dir / "a.csv").write_text(sweep_rows([80.0, 81.0, 82.0, 84.0]))  # one run moved
    rows = compare_tree(tmp_path / "results", "HEAD", tmp_path)
    moved = {(r["file"], r["model"]): r["runs_moved"] for r in rows}
    assert moved[("results/new/a.csv", "TWIRLS-base {'steps': '16'}")] == 1
    assert moved[("results/new/a.csv", "TWIRLS-base {'steps': '8'}")] == 0
    assert compare_tree(new_dir / "a.json", "HEAD", tmp_path) == []  # one file: no pool


def test_status_and_claim_changes_between_two_reports():
    head = "table,dataset,model,metric,mean,std,runs,paper_mean,paper_std,delta,status\n"
    old = head + ("t,cora,GCN,accuracy,80.0,1,10,81.5,,-1.5,differs\n"
                  "t,cora,SGC,accuracy,80.0,1,10,80.5,,-0.5,reproduced\n")
    new = head + ("t,cora,GCN,accuracy,80.6,1,10,81.5,,-0.9,reproduced\n"
                  "t,cora,SGC,accuracy,80.1,1,10,80.5,,-0.4,reproduced\n")
    assert status_changes(old, new) == [
        {"table": "t", "dataset": "cora", "model": "GCN", "metric": "accuracy",
         "mean_before": 80.0, "mean_after": 80.6, "paper_mean_after": 81.5,
         "status_before": "differs", "status_after": "reproduced"}]
    table = ("| # | claim (paper) | source | verdict | close calls | on the paper's numbers |\n"
             "|---|---|---|---|---|---|\n"
             "| 5 | “x” | Table 3 | **{}** | {} | holds |\n")
    assert claim_changes(table.format("holds", "texas"), table.format("holds", "texas")) == []
    assert claim_changes(table.format("holds", "texas"),
                         table.format("partly: holds on cora", "—")) == [
        {"claim": "5", "verdict_before": "holds", "close_calls_before": "texas",
         "verdict_after": "partly: holds on cora", "close_calls_after": "—"}]


def test_cells_of_an_older_revision_are_matched_under_todays_table_ids():
    """Before issue 26 Table 4 was ``attack`` (its clean-graph twin ``attack-clean``), Table 2
    ``standard-benchmarks``: their cells still meet today's ``table4``, ``table4-clean``, ..."""
    assert [current_table(t) for t in ("attack", "attack-clean", "truncation-T-prognn-paper",
                                       "citeseer-alpha-steps-paper-k2", "variant-comparison",
                                       "table4", "figure2")] == [
        "table4", "table4-clean", "table9-prognn-paper", "table8-paper-k2", "variants", "table4",
        "figure2"]
    old = [{**cell("GCN", [80.0, 81.0]), "table": "attack-clean"}]
    new = [{**cell("GCN", [80.0, 81.0]), "table": "table4-clean"}]
    assert [(r["table"], r["moved"]) for r in compare_cells(old, new)] == [("table4-clean", False)]
    head = "table,dataset,model,metric,mean,std,runs,paper_mean,paper_std,delta,status\n"
    assert [r["table"] for r in status_changes(
        head + "standard-benchmarks,cora,GCN,accuracy,80.0,1,10,81.5,,-1.5,differs\n",
        head + "table2,cora,GCN,accuracy,80.6,1,10,81.5,,-0.9,reproduced\n")] == ["table2"]
