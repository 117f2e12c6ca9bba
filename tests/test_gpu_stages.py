"""Real stages against their committed results (twirls.bench.gpu_stages), run here on the CPU:
the comparison rule, one real stage on data fetched from the mirror, the deadline, bad input."""

from __future__ import annotations

import json
import math

import pytest

from twirls.bench import gpu_stages as gst
from twirls.stages import fetch

from fixtures import MIRROR


def test_compare_by_hand():
    ours = {"test_mean": 0.80, "test_std": 0.03, "runs": 10, "seconds_mean": 0.5}
    committed = {"test_mean": 0.83, "test_std": 0.04, "runs": 10, "seconds_mean": 2.0}
    got = gst.compare(ours, committed)
    se = 100 * math.sqrt(0.03 ** 2 / 10 + 0.04 ** 2 / 10)  # 1.58 points
    assert got["difference_points"] == pytest.approx(-3.0)
    assert got["standard_error_points"] == pytest.approx(se, abs=1e-3)
    assert got["agrees"] is True and got["speedup_per_run"] == 4.0  # 3.0 <= 2 x 1.58
    assert gst.compare({**ours, "test_mean": 0.79}, committed)["agrees"] is False  # 4 > 3.16
    exact = {"test_mean": 0.81, "test_std": 0.0, "runs": 10}
    assert gst.compare({**exact, "test_mean": 0.814}, exact)["agrees"] is True  # <= 0.5 points
    assert gst.compare({**exact, "test_mean": 0.816}, exact)["agrees"] is False
    assert "speedup_per_run" not in gst.compare(exact, exact)


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"offline mirror not found at {MIRROR}")
def test_real_stage_against_its_committed_scores(tmp_path, monkeypatch):
    monkeypatch.setenv("TWIRLS_DATA_MIRROR", str(MIRROR))
    raw = tmp_path / "raw"
    assert fetch.main(["texas", "--raw", str(raw), "--pins", str(tmp_path / "pins.tsv"),
                       "--damaged", str(tmp_path / "damaged")]) == 0
    out = tmp_path / "gpu-stages.json"
    code = gst.main(["--out", str(out), "--raw", str(raw), "--stage", "table3@texas-twirls-base",
                     "--stage", "table3@texas-mlp", "--deadline", "600"])
    report = json.loads(out.read_text())
    assert [s["stage"] for s in report["stages"]] == ["table3@texas-twirls-base",
                                                      "table3@texas-mlp"]
    committed = json.loads((gst.REPO / "metrics/table3/texas-twirls-base.json").read_text())
    first = report["stages"][0]
    assert first["status"] == "ok" and first["device"] == report["stages"][1]["device"]
    assert first["ours"]["runs"] == committed["runs"] == 10
    assert first["committed"]["test_mean"] == committed["test_mean"]
    assert first["difference_points"] == pytest.approx(
        100 * (first["ours"]["test_mean"] - committed["test_mean"]), abs=1e-3)
    assert all(s["agrees"] for s in report["stages"])  # the same code on another CPU
    assert code == 0 and report["all_agree"] and report["out_of_time"] == []
    assert report["machine"]["cpu_count"] >= 1 and first["peak_rss_gb"] > 0


def test_deadline_leaves_stages_out(tmp_path):
    out = tmp_path / "gpu-stages.json"
    assert gst.main(["--out", str(out), "--deadline", "0"]) == 1
    report = json.loads(out.read_text())
    assert report["out_of_time"] == list(gst.STAGES) and report["stages"] == []
    assert report["all_agree"] is False


def test_skip_done_keeps_an_earlier_calls_gpu_stages_and_runs_the_rest(tmp_path):
    """A second call on a borrowed machine: the stages that the first call ran on the GPU are
    kept (``kept_from``), a failed one or one run on the CPU is run again, nothing is lost."""
    out = tmp_path / "gpu-stages.json"
    first = {"started_utc": "2026-11-26T06:24:07+00:00", "machine": {"gpu": "NVIDIA H200"},
             "stages": [{"stage": gst.STAGES[0], "status": "ok", "device": "cuda",
                         "agrees": True},
                        {"stage": gst.STAGES[1], "status": "ok", "device": "cpu",
                         "agrees": True},
                        {"stage": gst.STAGES[2], "status": "failed", "device": "cuda"}]}
    out.write_text(json.dumps(first))
    assert gst.main(["--out", str(out), "--skip-done", "--deadline", "0"]) == 1
    report = json.loads(out.read_text())
    assert report["kept_from"] == {"started_utc": first["started_utc"], "gpu": "NVIDIA H200",
                                   "stages": [gst.STAGES[0]]}
    assert report["stages"] == [{**first["stages"][0], "gpu": "NVIDIA H200"}]
    assert report["out_of_time"] == list(gst.STAGES[1:])
    assert gst.main(["--out", str(tmp_path / "new.json"), "--skip-done", "--deadline", "0"]) == 1
    assert "kept_from" not in json.loads((tmp_path / "new.json").read_text())


def test_a_kept_stage_names_the_gpu_that_ran_it_across_calls():
    """Three calls: stage A ran on the first machine, B on the second; the third call's
    ``previous`` (the second's report) kept A from the first."""
    second = {"machine": {"gpu": "H100"},
              "kept_from": {"gpu": "H200", "stages": ["A"]},
              "stages": [{"stage": "A"}, {"stage": "B"}, {"stage": "C", "gpu": "B200"}]}
    assert [gst.stage_gpu(second, s) for s in second["stages"]] == ["H200", "H100", "B200"]


def test_a_failed_stage_is_recorded_with_its_log(tmp_path):
    out = tmp_path / "gpu-stages.json"
    assert gst.main(["--out", str(out), "--raw", str(tmp_path / "nothing"),
                     "--stage", "table3@texas-mlp"]) == 1
    (stage,) = json.loads(out.read_text())["stages"]
    assert stage["status"] == "failed" and "log tail" in stage["error"]


@pytest.mark.parametrize("stage", ["table4@nettack-cora", "table2", "table2@"])
def test_bad_stage_is_one_line(tmp_path, stage):
    with pytest.raises(SystemExit, match="give <group>@<name> with group one of"):
        gst.main(["--out", str(tmp_path / "x.json"), "--stage", stage])
