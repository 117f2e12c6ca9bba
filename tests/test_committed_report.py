"""The committed report agrees with itself: every status, count and verdict recomputed from the
committed cells and ``reports/results.csv`` gives what ``reports/`` shows."""

from __future__ import annotations

import re
import shutil

import pandas as pd
import pytest

from twirls.reports.render import TABLES
from twirls.reports.results import SCORE_METRICS, status_of
from twirls.reports.scorecard import PAPER_STATUSES, scorecard, totals
from twirls.stages import report

from fixtures import REPO

RESULTS = REPO / "reports" / "results.csv"
pytestmark = pytest.mark.skipif(not RESULTS.is_file(), reason="no committed reports/results.csv")


def committed() -> pd.DataFrame:
    return pd.read_csv(RESULTS)


def test_every_score_status_follows_the_rule_from_its_own_row():
    """A score cell with both numbers is reproduced exactly when |ours - paper| <= max(1, 2 x
    paper std) (stand-in cells are never judged)."""
    rows = committed()
    judged = rows[rows["metric"].isin(SCORE_METRICS) & rows["mean"].notna()
                  & rows["paper_mean"].notna() & rows["status"].isin(["reproduced", "differs"])]
    assert len(judged) > 50
    for row in judged.itertuples():
        expected = status_of(row.metric, row.mean - row.paper_mean, row.paper_std)
        assert row.status == expected, row


def test_the_report_stage_prints_the_scorecards_totals():
    """The stage's printed counts are the scorecard's bold totals row in reports/README.md."""
    rows = committed()
    paper_totals = totals(scorecard(rows, list(TABLES)))
    line = report.count_line(rows, paper_totals)
    readme = (REPO / "reports" / "README.md").read_text()
    bold = re.search(r"^\| \*\*all paper cells\*\* \|(.*)\|$", readme, re.M)
    assert bold, "reports/README.md has no totals row"
    shown = [int(x.strip().strip("*")) for x in bold.group(1).split("|")]
    assert shown == [paper_totals[s] for s in PAPER_STATUSES]
    for status, count in zip(PAPER_STATUSES, shown, strict=True):
        assert f"{status} {count}" in line


def test_the_committed_report_is_what_the_report_stage_makes_of_the_committed_cells(
        tmp_path, monkeypatch):
    """Rerun the report stage on the committed cells and metrics into a copy of reports/: the
    results, the index (scorecard, claims and their close calls, notes) and the headline come
    out byte for byte as committed."""
    out = tmp_path / "reports"
    shutil.copytree(REPO / "reports", out)
    monkeypatch.chdir(REPO)
    assert report.main(["--reports", str(out), "--headline", str(out / "headline.json")]) == 0
    for rel in ("results.csv", "README.md", "headline.json"):
        assert (out / rel).read_text() == (REPO / "reports" / rel).read_text(), rel


def test_the_report_stage_declares_exactly_the_files_it_writes(tmp_path, monkeypatch):
    """dvc.yaml's outputs of `report` are the files the stage writes from the committed cells:
    the tables as one folder (whatever the renderer names them), the rest one by one."""
    import yaml

    out = tmp_path / "reports"
    out.mkdir()
    monkeypatch.chdir(REPO)
    assert report.main(["--reports", str(out), "--headline", str(out / "headline.json")]) == 0
    written = {"reports/tables" if p.parent == out / "tables" else
               f"reports/{p.relative_to(out).as_posix()}" for p in out.rglob("*") if p.is_file()}
    stage = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["report"]
    declared = {next(iter(o)) if isinstance(o, dict) else o
                for o in stage["outs"] + stage.get("metrics", [])}
    assert sorted(written - declared) == [], "written, not declared in dvc.yaml"
    assert sorted(declared - written) == [], "declared in dvc.yaml, not written"
