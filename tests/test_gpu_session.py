"""The one-call GPU session (twirls.bench.gpu_session), run here on the CPU: every step through
the real commands (the CUDA tests skip, the benchmark is its quick CPU run, a tiny rehearsal),
time limits, the wheel install that brings DVC to a machine without it, JUnit outcomes."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest

from twirls.bench import gpu_session as gs

from fixtures import write_planetoid

SCALE = "0.01"


def test_session_runs_every_step_and_records_it(tmp_path):
    out, raw = tmp_path / "out", tmp_path / "raw"
    write_planetoid(raw / "cora", "cora", num_features=40, num_unlabelled=300, num_test=200)
    (raw / "cora" / "FETCH.json").write_text(json.dumps({"dataset": "cora", "status": "ok"}))
    code = gs.main(["--out", str(out), "--device", "cpu", "--quick", "--scale", SCALE,
                    "--only", "table5[pku]", "--budgets", "1", "--data", str(tmp_path / "d"),
                    "--stage", "table2@nope", "--deadline", "400", "--raw", str(raw)])
    record = json.loads((out / gs.RECORD).read_text())
    steps = {s["name"]: s for s in record["steps"]}
    assert code == 1 and list(steps) == list(gs.STEPS)
    assert [s["status"] for s in steps.values()] == ["ok", "ok", "ok", "failed", "ok", "ok"], steps
    failed = steps["stages"]  # an unknown stage: the step fails, the next ones still run
    assert failed["details"]["stages"]["table2@nope"]["status"] == "failed"
    assert failed["details"]["all_agree"] is False and failed["files"] == ["gpu-stages.json"]
    tests = steps["tests"]
    assert tests["details"]["passed"] + tests["details"]["skipped"] > 20
    assert "gpu-tests.xml" in tests["files"] and "--junitxml" in " ".join(tests["command"])
    if not record["machine"]["cuda"]["usable"]:
        assert tests["details"]["skipped"] > 20 and tests["details"]["skip_reasons"]
    assert json.loads((out / "gpu.json").read_text())["device"]["type"] == "cpu"
    assert steps["dvc"]["details"]["installed"] is False  # DVC is installed here
    batched = steps["batched"]["details"]  # the generated Cora, both paths
    assert batched["device"] == "cpu" and [r["seeds"] for r in batched["records"]] == [1, 2]
    assert all(r["speedup"] > 0 for r in batched["records"])
    rehearsal = steps["rehearsal"]
    assert rehearsal["details"]["ok"] == ["table5[pku]"] and rehearsal["details"]["complete"]
    assert "--deadline" in rehearsal["command"] and rehearsal["limit_seconds"] < 400
    assert json.loads((out / "rehearsal-gpu.json").read_text())["scale"] == float(SCALE)
    assert "===== bench:" in (out / gs.LOG).read_text()
    assert gs.step_env("tests", {}, out) == {"GPU_REPORT": str(out / "gpu-tests.json")}
    assert len(list(out.iterdir())) <= 8  # what one device call brings back


def test_steps_without_time_left_are_recorded_not_run(tmp_path, monkeypatch):
    monkeypatch.setattr(gs, "MIN_STEP_SECONDS", 1e9)
    code = gs.main(["--out", str(tmp_path), "--steps", "bench,rehearsal", "--deadline", "100"])
    steps = json.loads((tmp_path / gs.RECORD).read_text())["steps"]
    assert code == 1 and [s["status"] for s in steps] == [
        "skipped", "out-of-time", "out-of-time", "skipped", "skipped", "out-of-time"]
    assert steps[0]["reason"] == "tests is not in --steps" and steps[1]["command"] == []


def test_a_step_past_its_limit_is_stopped(tmp_path):
    log = tmp_path / "log"
    log.write_text("")
    step = gs.run_step("slow", [sys.executable, "-c", "import time; print('begun', flush=True);"
                                " time.sleep(60)"], gs.child_env(), 1.0, log)
    assert step.status == "timeout" and step.seconds < 15 and step.returncode != 0
    assert step.reason == "stopped at its limit of 1 s" and "begun" in step.output_tail


def make_wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel holding module ``name`` with ``__version__``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"__version__ = {version!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as zf:
        for arcname, text in files.items():
            zf.writestr(arcname, text)
    return path


def test_wheels_are_installed_beside_the_machines_packages(tmp_path):
    wheels, site, log = tmp_path / "wheels", tmp_path / "site", tmp_path / "log"
    log.write_text("")
    make_wheel(wheels, "twirls_probe_pkg", "1.2.3")
    assert gs.importable("twirls_probe_pkg", gs.child_env())[0] is False
    step = gs.install_wheels(wheels, site, gs.child_env(), 120.0, log)
    assert step.status == "ok", step.output_tail
    assert step.command[-1].endswith("(1 wheels)") and "--no-index" in step.command
    assert gs.importable("twirls_probe_pkg", gs.child_env(site)) == (True, "1.2.3")


def test_no_wheels_is_one_clear_reason(tmp_path):
    step = gs.install_wheels(tmp_path / "none", tmp_path / "site", gs.child_env(), 10.0,
                             tmp_path / "log")
    assert step.status == "failed" and "make device-wheels" in step.reason


def test_junit_outcomes(tmp_path):
    path = tmp_path / "j.xml"
    path.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_gpu" name="test_a"/>'
        '<testcase classname="tests.test_gpu" name="test_b">'
        '<failure message="AssertionError: logits differ&#10;more">trace</failure></testcase>'
        '<testcase classname="tests.test_gpu" name="test_c"><error message="boom"/></testcase>'
        '<testcase classname="tests.test_gpu" name="test_d">'
        '<skipped message="no usable CUDA GPU"/></testcase>'
        '</testsuite></testsuites>')
    got = gs.junit_outcomes(path)
    assert (got["passed"], got["failed"], got["skipped"]) == (1, 2, 1)
    assert got["failed_tests"] == {"tests.test_gpu::test_b": "AssertionError: logits differ",
                                   "tests.test_gpu::test_c": "boom"}
    assert got["skip_reasons"] == ["no usable CUDA GPU"]
    assert "error" in gs.junit_outcomes(tmp_path / "missing.xml")


@pytest.mark.parametrize(("argv", "message"), [
    (["--steps", "tests,train"],
     "--steps: train; choose from tests, bench, stages, batched, rehearsal"),
    (["--deadline", "20"], "--deadline 20: give more than 25 seconds")])
def test_bad_arguments_are_one_line(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        gs.main(["--out", str(tmp_path), *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_stages_summary(tmp_path):
    path = tmp_path / "gpu-stages.json"
    path.write_text(json.dumps({"all_agree": True, "out_of_time": ["table2@b"], "stages": [
        {"stage": "table2@a", "status": "ok", "device": "cuda:0", "difference_points": 0.3,
         "standard_error_points": 0.4, "agrees": True, "speedup_per_run": 7.5, "ours": {}}]}))
    assert gs.stages_summary(path) == {"all_agree": True, "out_of_time": ["table2@b"], "stages": {
        "table2@a": {"status": "ok", "device": "cuda:0", "difference_points": 0.3,
                     "standard_error_points": 0.4, "agrees": True, "speedup_per_run": 7.5}}}


def test_rehearsal_summary_names_what_ran_out_of_time(tmp_path):
    path = tmp_path / "rehearsal-gpu.json"
    path.write_text(json.dumps({"complete": False, "out_of_time": ["table12", "table5[pku]"],
                                "stages": [{"stage": "table2@x", "status": "ok",
                                            "device": "cuda:0"},
                                           {"stage": "figure3[GAT]", "status": "failed",
                                            "device": "cpu"}]}))
    summary = gs.rehearsal_summary(path)
    assert summary == {"complete": False, "ok": ["table2@x"], "failed": ["figure3[GAT]"],
                       "out_of_time": ["table12", "table5[pku]"], "devices": ["cpu", "cuda:0"]}
    assert gs.late_reason(summary) == "--deadline reached: 2 stages not started, from table12"
    assert gs.late_reason({"out_of_time": []}) == ""
    assert "error" in gs.rehearsal_summary(tmp_path / "missing.json")


def test_output_tail_shows_a_progress_bar_as_a_terminal_does(tmp_path):
    log = tmp_path / "log"
    log.write_bytes(b"start\nruns 1%\rruns 50%\rruns 100%\ndone\n")
    assert gs.tail(log) == "start\nruns 100%\ndone\n"
    assert gs.tail(log, chars=5) == "done\n"
