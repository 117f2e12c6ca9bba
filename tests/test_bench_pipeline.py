"""The pipeline benchmark: per-stage wall times parsed from DVC's output, results merged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from twirls.bench import pipeline

FAKE_DVC = """
import time
print("Running stage 'fetch@cora':", flush=True)
time.sleep(0.2)
print("Stage 'check-params' didn't change, skipping", flush=True)
print("Running stage 'table2@cora-gcn':", flush=True)
time.sleep(0.4)
print("Updating lock file 'dvc.lock'", flush=True)
"""


def test_timed_gives_each_running_stage_its_own_seconds(tmp_path):
    total, stages, out = pipeline.timed([sys.executable, "-c", FAKE_DVC], tmp_path,
                                        dict(os.environ))
    assert list(stages) == ["fetch@cora", "table2@cora-gcn"]  # the skipped stage is not timed
    assert 0.15 < stages["fetch@cora"] < stages["table2@cora-gcn"] <= total
    assert "Updating lock file" in out
    seen = []
    pipeline.timed([sys.executable, "-c", FAKE_DVC], tmp_path, dict(os.environ),
                   on_stage=seen.append)
    assert [list(s) for s in seen] == [["fetch@cora"]]  # the last stage is in the return value


def test_timed_passes_the_output_on_as_it_comes(tmp_path, capfd):
    bar = "import sys, time\nfor i in range(3):\n    sys.stdout.write(f'\\r{i}/3'); " \
          "sys.stdout.flush(); time.sleep(0.05)\nprint()\n" + FAKE_DVC
    total, stages, out = pipeline.timed([sys.executable, "-c", bar], tmp_path, dict(os.environ))
    err = capfd.readouterr().err
    assert "\r0/3\r1/3\r2/3\n" in err and "Running stage 'table2@cora-gcn':" in err
    assert err == out  # passed on unchanged, progress bars' carriage returns included
    assert list(stages) == ["fetch@cora", "table2@cora-gcn"]


def test_timed_failure_is_one_clear_exit(tmp_path):
    with pytest.raises(SystemExit, match="failed"):
        pipeline.timed([sys.executable, "-c", "raise SystemExit(3)"], tmp_path,
                       dict(os.environ))


def test_full_repro_keeps_the_everyday_numbers(tmp_path, monkeypatch):
    out = tmp_path / "pipeline.json"
    out.write_text(json.dumps({"status_s": 3.9, "exp_run": {"seconds": 207.0}}))
    seen = []

    def fake_timed(cmd, cwd, env, on_stage):
        on_stage({"fetch@cora": 1.0})  # an interrupted run would stop here
        seen.append(json.loads(out.read_text()))
        return 7300.0, {"fetch@cora": 1.0, "table8": 1260.0}, ""

    monkeypatch.setattr(pipeline, "timed", fake_timed)
    assert pipeline.full_repro(Path(__file__).parents[1], {}, out) == 0  # commit: this repo's
    assert seen[0]["full_repro"]["complete"] is False
    assert seen[0]["full_repro"]["stages"] == {"fetch@cora": 1.0}
    assert seen[0]["status_s"] == 3.9
    data = json.loads(out.read_text())
    assert data["status_s"] == 3.9 and data["exp_run"] == {"seconds": 207.0}
    assert data["full_repro"]["complete"] is True
    assert data["full_repro"]["hours"] == 2.03
    assert list(data["full_repro"]["slowest"]) == ["table8", "fetch@cora"]


LOCK = """\
schema: '2.0'
stages:
  fetch@cora: {outs: [{path: data/raw/cora}]}
  table8: {deps: [{path: data/raw/cora}], outs: [{path: results/table8.csv}]}
  report: {deps: [{path: results}], outs: [{path: reports/results.csv}]}
  table9@nettack-cora: {deps: [{path: data/raw/cora/graph.npz}],
                        outs: [{path: results/table9/nettack-cora.csv}]}
"""


def test_remaining_stages_come_after_the_stages_they_read():
    """The stages a record lacks, each after those whose outputs it reads (a dep above, at or
    inside an out), else in the lock's order: `report` reads `results/`, which holds Table 9's
    out, so it follows `table9@nettack-cora` though the lock lists it first."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        (repo / "dvc.lock").write_text(LOCK)
        assert pipeline.remaining_stages(repo, ["fetch@cora"]) == [
            "table8", "table9@nettack-cora", "report"]
        assert pipeline.remaining_stages(repo, []) == [
            "fetch@cora", "table8", "table9@nettack-cora", "report"]
        assert pipeline.remaining_stages(repo, ["fetch@cora", "table8", "report",
                                                "table9@nettack-cora"]) == []


def test_resume_goes_on_with_an_interrupted_run_and_keeps_both_parts(tmp_path, monkeypatch):
    """--resume: `dvc repro -f -s` of the targets when given, else of the stages the record
    lacks (a plain `dvc repro` would skip those whose lock entries are up to date); the stages
    of both parts add up and each part's header is kept; complete once every stage of dvc.lock
    is in."""
    (tmp_path / "dvc.lock").write_text(LOCK)
    out = tmp_path / "pipeline.json"
    out.write_text(json.dumps({"full_repro": {"complete": False, "commit": "abc",
                                              "reference_s": {"python": 0.4},
                                              "stages": {"fetch@cora": 2.0, "table8": 1000.0}}}))
    commands = []

    def fake_timed(cmd, cwd, env, on_stage=None):
        commands.append(cmd)
        if cmd == ["dvc", "repro"]:  # what the parts left stale: table9, run before table8's rerun
            return 30.0, {"table9@nettack-cora": 25.0}, ""
        ran = {name: 100.0 * (i + 1) for i, name in enumerate(cmd[4:])}
        on_stage(dict(list(ran.items())[:1]))
        return sum(ran.values()), ran, ""

    monkeypatch.setattr(pipeline, "timed", fake_timed)
    assert pipeline.full_repro(tmp_path, {}, out, resume=True,
                               targets=["table9@nettack-cora"]) == 0
    data = json.loads(out.read_text())["full_repro"]
    assert commands[-1] == ["dvc", "repro", "-f", "-s", "table9@nettack-cora"]
    assert data["complete"] is False and data["seconds_so_far"] == 1102.0
    assert [part["commit"] for part in data["parts"]][0] == "abc" and len(data["parts"]) == 2
    assert pipeline.full_repro(tmp_path, {}, out, resume=True) == 0
    data = json.loads(out.read_text())["full_repro"]
    assert commands[-2:] == [["dvc", "repro", "-f", "-s", "report"], ["dvc", "repro"]]
    assert data["complete"] is True and data["seconds"] == 1102.0 + 100.0 + 30.0
    assert data["stale_reruns"] == {"table9@nettack-cora": 25.0}
    assert data["stages"]["table9@nettack-cora"] == 100.0  # its own run, not the rerun
    assert list(data["stages"]) == ["fetch@cora", "table8", "table9@nettack-cora", "report"]
    assert len(data["parts"]) == 3
    out.write_text(json.dumps({"full_repro": data}))
    with pytest.raises(SystemExit, match="no interrupted --full run"):
        pipeline.full_repro(tmp_path, {}, out, resume=True)
    out.write_text(json.dumps({"full_repro": data | {"complete": False}}))
    with pytest.raises(SystemExit, match="already holds every stage"):  # never a whole rerun
        pipeline.full_repro(tmp_path, {}, out, resume=True)
    assert len(commands) == 3


def test_target_part_that_covers_every_locked_stage_completes_the_record(tmp_path, monkeypatch):
    out = tmp_path / "pipeline.json"
    out.write_text(json.dumps({"full_repro": {"complete": False, "commit": "abc",
                                              "stages": {"fetch@cora": 2.0}}}))
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages:\n  fetch@cora: {}\n  table8: {}\n")
    monkeypatch.setattr(pipeline, "timed", lambda cmd, cwd, env, on_stage=None: (
        (10.0, {"table8": 9.0}, "") if "-s" in cmd else (0.5, {}, "")))  # nothing left stale
    assert pipeline.full_repro(tmp_path, {}, out, resume=True, targets=["table8"]) == 0
    data = json.loads(out.read_text())["full_repro"]
    assert data["complete"] is True and data["seconds"] == 12.5
    assert list(data["stages"]) == ["fetch@cora", "table8"] and data["stale_reruns"] == {}
    out.write_text(json.dumps({"full_repro": data}))
    with pytest.raises(SystemExit, match="no interrupted --full run"):
        pipeline.full_repro(tmp_path, {}, out, resume=True)


def test_target_part_of_a_complete_record_replaces_those_stages_seconds(tmp_path, monkeypatch):
    """--resume --target on a complete record (a change of results in some stages): those
    stages rerun, forced, and their new seconds replace the stored ones, in place, in the
    total too; without --target a complete record is refused."""
    (tmp_path / "dvc.lock").write_text(LOCK)
    out = tmp_path / "pipeline.json"
    stages = {"fetch@cora": 2.0, "table8": 1000.0, "report": 20.0, "table9@nettack-cora": 400.0}
    out.write_text(json.dumps({"full_repro": {"complete": True, "commit": "abc",
                                              "seconds": 1422.0, "stages": stages}}))
    commands = []

    def fake_timed(cmd, cwd, env, on_stage=None):
        commands.append(cmd)
        if cmd == ["dvc", "repro"]:  # report reads table8's new output
            return 21.0, {"report": 19.0}, ""
        on_stage({"table8": 600.0})
        return 600.0, {"table8": 600.0}, ""

    monkeypatch.setattr(pipeline, "timed", fake_timed)
    assert pipeline.full_repro(tmp_path, {}, out, resume=True, targets=["table8"]) == 0
    data = json.loads(out.read_text())["full_repro"]
    assert commands == [["dvc", "repro", "-f", "-s", "table8"], ["dvc", "repro"]]
    assert data["stages"] == {"fetch@cora": 2.0, "table8": 600.0, "report": 20.0,
                              "table9@nettack-cora": 400.0}
    assert list(data["stages"]) == list(stages)
    assert data["complete"] is True and data["seconds"] == 2.0 + 600.0 + 20.0 + 400.0 + 21.0
    assert [part["commit"] for part in data["parts"]][0] == "abc" and len(data["parts"]) == 2
    with pytest.raises(SystemExit, match="--target STAGE reruns stages of a complete one"):
        pipeline.full_repro(tmp_path, {}, out, resume=True)


def test_full_repro_records_the_largest_child_process(tmp_path, monkeypatch):
    # a stage that holds ~300 MB must show in the record (ru_maxrss: the largest child so far)
    def fake_timed(cmd, cwd, env, on_stage):
        subprocess.run([sys.executable, "-c", "b = bytearray(300_000_000); b[::4096] = "
                        "b'1' * len(b[::4096])"], check=True)
        return 10.0, {"table8": 10.0}, ""

    monkeypatch.setattr(pipeline, "timed", fake_timed)
    out = tmp_path / "pipeline.json"
    assert pipeline.full_repro(Path(__file__).parents[1], {}, out) == 0
    assert json.loads(out.read_text())["full_repro"]["peak_rss_gb"] >= 0.3


def test_recover_times_stages_from_when_their_outputs_were_written(tmp_path):
    import yaml

    repo, start = tmp_path / "repo", 1_000_000.0
    lock = {"schema": "2.0", "stages": {
        "fetch@cora": {"outs": [{"path": "data/raw/cora"}]},  # a folder: its newest file
        "table2@cora-gcn": {"outs": [{"path": "results/a.json"}, {"path": "metrics/a.json"}]},
        "table8": {"outs": [{"path": "results/b.json"}]},  # not rerun: older than the start
    }}
    written = {"data/raw/cora/x": start + 5, "data/raw/cora/y": start + 10,
               "results/a.json": start + 40, "metrics/a.json": start + 70,
               "results/b.json": start - 100}
    for rel, when in written.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
        os.utime(path, (when, when))
    (repo / "dvc.lock").write_text(yaml.safe_dump(lock))
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    out = tmp_path / "pipeline.json"
    out.write_text(json.dumps({"status_s": 3.9}))
    assert pipeline.recover(repo, start, out) == 0
    data = json.loads(out.read_text())
    assert data["status_s"] == 3.9
    run = data["full_repro"]
    assert run["complete"] is False and "--recover" in run["method"]
    assert run["stages"] == {"fetch@cora": 10.0, "table2@cora-gcn": 60.0}
    assert run["seconds_so_far"] == 70.0
    with pytest.raises(SystemExit, match="no stage"):
        pipeline.recover(repo, start + 1000, out)


def test_every_record_carries_the_machine_reference(tmp_path, monkeypatch):
    """The fixed workload is timed on one thread (the caller's count is restored) and stored in
    each record, so that runs on a faster or slower day can be compared."""
    import torch

    from twirls.bench.calibrate import reference_seconds

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        ref = reference_seconds(repeats=1)
        assert set(ref) == {"python", "torch"} and all(v > 0 for v in ref.values())
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    monkeypatch.setattr(pipeline, "reference_seconds", lambda: {"python": 0.2, "torch": 0.17})
    monkeypatch.setattr(pipeline, "timed", lambda cmd, cwd, env, on_stage: (1.0, {}, ""))
    out = tmp_path / "pipeline.json"
    assert pipeline.full_repro(Path(__file__).parents[1], {}, out) == 0
    assert json.loads(out.read_text())["full_repro"]["reference_s"] == {"python": 0.2,
                                                                       "torch": 0.17}


def test_a_record_in_parts_is_normalised_to_its_first_parts_day(tmp_path, monkeypatch):
    """Each stage scales by its own part's reference_s (the last part that named it with -s,
    else the first); the rest of the total (stale reruns, DVC between stages) as the last
    part; a part that ran on a machine twice as slow counts half its seconds."""
    (tmp_path / "dvc.lock").write_text(LOCK)
    out = tmp_path / "pipeline.json"
    out.write_text(json.dumps({"full_repro": {
        "complete": True, "commit": "abc", "command": "dvc repro -f",
        "reference_s": {"python": 0.2, "torch": 0.25}, "seconds": 1422.0,
        "stages": {"fetch@cora": 2.0, "table8": 1000.0, "report": 20.0,
                   "table9@nettack-cora": 400.0}}}))

    def fake_timed(cmd, cwd, env, on_stage=None):
        if cmd == ["dvc", "repro"]:
            return 10.0, {}, ""
        on_stage({"table8": 600.0})
        return 610.0, {"table8": 600.0, "report": 0.0}, ""  # 10 s of DVC between stages

    monkeypatch.setattr(pipeline, "timed", fake_timed)
    monkeypatch.setattr(pipeline, "reference_seconds", lambda: {"python": 0.4, "torch": 1.0})
    assert pipeline.full_repro(tmp_path, {}, out, resume=True,
                               targets=["table8", "report"]) == 0
    run = json.loads(out.read_text())["full_repro"]
    assert run["seconds"] == 2.0 + 400.0 + 610.0 + 10.0
    assert pipeline.stage_parts(run) == {"fetch@cora": 0, "table8": 1, "report": 1,
                                         "table9@nettack-cora": 0}
    norm = run["normalised"]
    assert norm["to"]["reference_s"] == {"python": 0.2, "torch": 0.25}
    assert norm["seconds"] == {"python": 402.0 + 620.0 / 2, "torch": 402.0 + 620.0 / 4}
    assert norm["stages_by_part"] == [2, 2]
    # a part without one of the calibrations: that one is left out, the other kept
    run["parts"][1]["reference_s"] = {"python": 0.4}
    assert set(pipeline.normalised(run)["seconds"]) == {"python"}
    # one part only: nothing to normalise
    pipeline.store_full_repro(out, {k: v for k, v in run.items() if k != "parts"})
    assert "normalised" not in json.loads(out.read_text())["full_repro"]


def test_dvc_reads_yaml_with_the_c_parser():
    # every dvc command parses the ~330 kB dvc.lock; ruamel.yaml's pure-Python reader takes
    # 0.9 s of it, the C one (ruamel.yaml.clib, pinned in requirements.txt) 0.2 s
    pytest.importorskip("dvc")
    if sys.version_info >= (3, 15):
        pytest.skip("ruamel.yaml.clib has no wheel for Python 3.15 (requirements.txt)")
    from dvc.utils.serialize._yaml import parse_yaml
    from ruamel.yaml import YAML

    assert YAML(typ="safe").Parser.__name__ == "CParser", \
        "ruamel.yaml.clib is missing: pip install -r requirements.txt"
    assert parse_yaml("a: [1, 2]\n", "x.yaml") == {"a": [1, 2]}


def test_full_runs_start_from_an_empty_journal(tmp_path, monkeypatch):
    """A stage stopped in an earlier attempt keeps its finished runs (twirls.train.journal);
    read back, they would shorten its recorded time: --full gives its stages a journal of its
    own, empty, gone afterwards."""
    seen = []

    def fake_full_repro(repo, env, out, resume=False, targets=None):
        folder = Path(env["TWIRLS_JOURNAL"])
        seen.append((folder, folder.is_dir() and not any(folder.iterdir())))
        return 0

    monkeypatch.setenv("TWIRLS_JOURNAL", str(tmp_path / "kept"))
    monkeypatch.setattr(pipeline, "full_repro", fake_full_repro)
    assert pipeline.main(["--full", "--out", str(tmp_path / "p.json")]) == 0
    (folder, empty), = seen
    assert empty and folder != tmp_path / "kept" and not folder.exists()
