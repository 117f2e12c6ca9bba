"""End to end: sharing work between clones with DVC's own engine (docs/sharing.md).

A "GPU box" clone runs a stage and pushes; a clean "laptop" clone of the same commit pulls and
recomputes nothing; an experiment run on the GPU box travels with `dvc exp push/pull`; a
parameter grid runs through `dvc exp run --queue` + `dvc queue start -j 2`. Every step is the
real `dvc` CLI on temporary clones, with a DVC remote in a local folder and a bare git repository
as the shared git remote. One tiny training stage (Cora, 3 epochs) keeps it fast.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from e2e import MIRROR, copy_repo, dvc, env, git
from requires import needs

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no offline mirror at {MIRROR}"),
              needs("dvc", "the dvc CLI (and its celery queue) shares the runs")]

TRAIN = "table2@cora-tiny"
OUTPUTS = ("results/table2/cora-tiny.json", "metrics/table2/cora-tiny.json",
           "plots/table2/cora-tiny.csv", "models/table2/cora-tiny.pt",
           "results/table2/cora-tiny.csv")
TINY = {  # merged over params.yaml in the copies (e2e.copy_repo); the foreach dicts left empty
    "_replace": ["table2", "table3", "table10", "variants", "variants-attacked"],
    "fetch": {"datasets": ["cora"]},
    "table5": {"datasets": ["cora"]},
    "attack": {"datasets": [], "implementation": "prognn"},
    "train": {"seeds": 1},
    "table2": {"cora-tiny": {
        "dataset": "cora", "model": "twirls",
        "cells": {"table2": "TWIRLS-base"},
        "model_cfg": {"steps": 2, "lam": 1.0, "alpha": 1.0, "mlp_before": 1},
        "train_cfg": {"epochs": 3, "lr": 0.1}}},
    "table3": {}, "table10": {}, "variants": {}, "variants-attacked": {},
    "table4": {"datasets": []}, "table9": {"datasets": []},
    "energy": {"entry": "cora-tiny", "steps": 8},  # energy reads a table2 entry: the tiny one
}


def ran(out: str) -> set[str]:
    """The stages a `dvc repro` / `dvc exp run` output says it ran, but `check-params` (it
    rechecks params.yaml in a second wherever the file is new to DVC)."""
    return {line.split("'")[1] for line in out.splitlines()
            if line.startswith("Running stage")} - {"check-params"}


def git_out(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=env(cwd), capture_output=True, text=True,
                          check=True).stdout


def clone(lab: SimpleNamespace, name: str) -> Path:
    """A laptop: a clean `git clone` of the shared git remote (no data/raw, no DVC cache)."""
    git(lab.root, "clone", "-q", str(lab.hub), name)
    return lab.root / name


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    gpu = root / "gpu-box"
    gpu.mkdir()
    copy_repo(gpu, TINY)
    hub, store = root / "hub.git", root / "dvc-store"
    dvc(gpu, "remote", "add", "-d", "store", str(store))  # written to .dvc/config, committed
    repro = dvc(gpu, "repro", "--glob", "table2@cora-*").stdout  # the GPU box's stages only
    git(gpu, "add", "-A")
    git(gpu, "commit", "-qm", "cora-tiny trained on the GPU box")
    push = dvc(gpu, "push", "--run-cache").stdout
    # the shared git remote: a bare repository (`git clone --bare` hardlinks, where `git push`
    # into an empty one would repack the whole copy)
    git(root, "clone", "-q", "--bare", str(gpu), str(hub))
    git(gpu, "remote", "add", "origin", str(hub))
    return SimpleNamespace(root=root, gpu=gpu, hub=hub, store=store, repro=repro, push=push)


def test_gpu_box_runs_and_pushes(lab):
    assert ran(lab.repro) == {"fetch@cora", TRAIN}
    # every output of this project is `cache: false`: it travels in git with dvc.lock, and DVC
    # 3 saves no run-cache entry for a stage with an uncached output (metrics and plots aside):
    # nothing goes to the remote. If this fails, dvc.yaml now caches outputs: update
    # docs/sharing.md ("What the run-cache gives")
    assert "Everything is up to date" in lab.push
    assert not (lab.gpu / ".dvc" / "cache" / "runs").exists()
    assert not lab.store.exists() or not any(lab.store.rglob("*"))
    assert git_out(lab.gpu, "status", "--porcelain") == ""  # all of it is committed


def test_clean_clone_pulls_and_recomputes_nothing(lab):
    laptop = clone(lab, "laptop")
    assert not (laptop / "data" / "raw").exists()
    dvc(laptop, "pull", "--run-cache")
    out = dvc(laptop, "repro", "--pull", TRAIN).stdout
    # `--pull` allows missing inputs: nothing is recomputed (the outputs came with git)
    assert ran(out) == set() and "Data and pipelines are up to date" in out
    # the raw files are never in git nor in the remote: a plain repro fetches them (from the
    # mirror) because they are missing, and the training stage still is not rerun
    out = dvc(laptop, "repro", TRAIN).stdout
    assert ran(out) == {"fetch@cora"}
    assert f"Stage '{TRAIN}' didn't change, skipping" in out
    assert "up to date" in dvc(laptop, "status", TRAIN).stdout
    for rel in OUTPUTS:
        assert (laptop / rel).read_bytes() == (lab.gpu / rel).read_bytes()
    assert git_out(laptop, "status", "--porcelain") == ""  # dvc.lock and outputs as committed


def _spawned(repo: Path, kind: str) -> list[dict]:
    """What `dvc queue start` spawned, from DVC's process files: celery workers (`celery/`) or
    experiment runs (`run/`), each as {"pid": ..., "returncode": ...}."""
    folder = repo / ".dvc" / "tmp" / "exps" / kind
    found = []
    for info in folder.glob("*.json") if kind == "celery" else folder.glob("*/*.json"):
        try:
            found.append(json.loads(info.read_text()))
        except (OSError, ValueError):  # being written
            found.append({"pid": None, "returncode": None})
    return found


def _pids(repo: Path) -> list[int]:
    return [p["pid"] for kind in ("celery", "run") for p in _spawned(repo, kind) if p["pid"]]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _queue_finished(repo: Path, count: int) -> bool:
    """Every queued run has exited, or every worker has (cheap: no `dvc queue status`, which
    asks the celery workers and costs seconds of CPU on each call)."""
    runs, workers = _spawned(repo, "run"), _spawned(repo, "celery")
    if len(runs) >= count and all(run["returncode"] is not None for run in runs):
        return True
    return bool(workers) and not any(_alive(w["pid"]) for w in workers if w["pid"])


def _stop_queue(repo: Path, timeout: float = 60) -> None:
    """`dvc queue stop`, wait for every spawned process, then kill (by pid) any left."""
    subprocess.run([sys.executable, "-m", "dvc", "queue", "stop"], cwd=repo, env=env(repo),
                   capture_output=True, timeout=120)
    deadline = time.monotonic() + timeout
    while any(map(_alive, _pids(repo))) and time.monotonic() < deadline:
        time.sleep(1)
    for pid in filter(_alive, _pids(repo)):
        os.kill(pid, signal.SIGKILL)


def _queue_states(repo: Path) -> tuple[dict[str, str], str]:
    """Each grid experiment's state in the table of `dvc queue status`, and its whole output.

    After the table, the command asks the celery workers what they run, through DVC's file
    broker; that read can meet a message file half-written and end in "unexpected error -
    Expecting value" with the table already printed (the race of treeverse/dvc#8014). The table
    is what this test reads, so a failure after it counts as a read, not an error."""
    proc = subprocess.run([sys.executable, "-m", "dvc", "queue", "status"], cwd=repo,
                          env=env(repo), capture_output=True, text=True, timeout=120)
    states = {row[1]: row[-1] for row in map(str.split, proc.stdout.splitlines())
              if len(row) >= 2 and row[1] in GRID}
    if proc.returncode != 0 and not proc.stdout.strip():  # failed before the table
        raise AssertionError(f"dvc queue status failed:\n{proc.stdout}\n{proc.stderr}")
    return states, proc.stdout + proc.stderr


GRID = {"seeds2": 2, "seeds3": 3}  # experiment name: train.seeds


@pytest.fixture(scope="module")
def grid(lab):
    """The GPU box runs a parameter grid: `dvc exp run --queue` + `dvc queue start -j 2`."""
    for name, seeds in GRID.items():
        dvc(lab.gpu, "exp", "run", "--queue", "-C", "data/raw", "-n", name,
            "-S", f"train.seeds={seeds}", TRAIN)
    try:
        # the workers inherit the output of `dvc queue start`: to a file, not a pipe that would
        # stay open (and block this call) until they exit
        log = lab.root / "queue-start.log"
        with log.open("w") as out:
            subprocess.run([sys.executable, "-m", "dvc", "queue", "start", "-j", "2"],
                           cwd=lab.gpu, env=env(lab.gpu), stdout=out, stderr=subprocess.STDOUT,
                           timeout=120, check=True)
        assert "Started '2'" in log.read_text()
        deadline = time.monotonic() + 400
        while not _queue_finished(lab.gpu, len(GRID)):
            if time.monotonic() > deadline:
                pytest.fail(f"queue not done in 400 s:\n{_queue_states(lab.gpu)[1]}")
            time.sleep(2)
        for _ in range(10):  # the worker records the result just after the run exits
            states, status = _queue_states(lab.gpu)
            if set(states.values()) == {"Success"} and len(states) == len(GRID):
                break
            if "Failed" in states.values():
                break
            time.sleep(2)
        if states != dict.fromkeys(GRID, "Success"):
            logs = [dvc(lab.gpu, "queue", "logs", name).stdout for name in GRID]
            pytest.fail(f"queued experiments:\n{status}\n" + "\n".join(logs))
    finally:
        _stop_queue(lab.gpu)


def test_parameter_grid_with_the_queue(lab, grid):
    assert not any(map(_alive, _pids(lab.gpu)))  # no worker left behind
    shown = json.loads(dvc(lab.gpu, "exp", "show", "--json").stdout)
    exps = {exp["name"]: exp["revs"][0] for base in shown
            for exp in base.get("experiments") or [] if exp["name"] in GRID}
    assert set(exps) == set(GRID)
    for name, seeds in GRID.items():
        assert exps[name]["data"]["params"]["params.yaml"]["data"]["train"]["seeds"] == seeds
        # per-stage metrics stay out of `dvc exp show` (the headline is its one metrics file);
        # each experiment's commit holds them
        metrics = json.loads(git_out(lab.gpu, "show",
                                     f"{exps[name]['rev']}:metrics/table2/cora-tiny.json"))
        assert metrics["status"] == "ok" and metrics["runs"] == seeds
    # the queue ran in temporary workspaces: the GPU box's own workspace is untouched
    assert git_out(lab.gpu, "status", "--porcelain") == ""


def test_experiment_shared_with_exp_push_and_pull(lab, grid):
    dvc(lab.gpu, "exp", "push", "origin", "seeds3")
    laptop = clone(lab, "laptop-exp")
    dvc(laptop, "exp", "pull", "origin", "seeds3")
    dvc(laptop, "exp", "apply", "seeds3")
    out = dvc(laptop, "repro", TRAIN).stdout
    assert ran(out) == {"fetch@cora"}
    assert f"Stage '{TRAIN}' didn't change, skipping" in out
    refs = git_out(lab.gpu, "for-each-ref", "--format=%(refname)", "refs/exps").split()
    ref = next(r for r in refs if r.endswith("/seeds3"))
    for rel in OUTPUTS:
        shown = subprocess.run(["git", "show", f"{ref}:{rel}"], cwd=lab.gpu, env=env(lab.gpu),
                               capture_output=True, check=True).stdout
        assert (laptop / rel).read_bytes() == shown
    assert json.loads((laptop / OUTPUTS[1]).read_text())["runs"] == 3


def test_run_cache_restores_a_run_when_every_output_is_cached(tmp_path):
    """What the run-cache would give if the train outputs were `cache: true` (they are not)."""
    gpu = tmp_path / "gpu-box"
    gpu.mkdir()
    copy_repo(gpu, TINY)
    dvc_yaml = (gpu / "dvc.yaml").read_text()
    uncached = [f"        - {path}:\n            cache: false\n" for path in (
        "results/table2/${key}.json", "results/table2/${key}.csv", "plots/table2/${key}.csv",
        "metrics/table2/${key}.json", "models/table2/${key}.pt")]
    for block in uncached:
        assert block in dvc_yaml
        dvc_yaml = dvc_yaml.replace(block, block.split(":\n")[0] + "\n")
    (gpu / "dvc.yaml").write_text(dvc_yaml)
    git(gpu, "rm", "-q", "--cached", "--ignore-unmatch", *OUTPUTS)
    dvc(gpu, "remote", "add", "-d", "store", str(tmp_path / "dvc-store"))
    git(gpu, "add", "-A")
    git(gpu, "commit", "-qm", "train outputs cached")
    # run and push the run-cache without committing the result: the laptop restores it by key
    # (command, params, dependency hashes), not by commit
    assert TRAIN in ran(dvc(gpu, "repro", TRAIN).stdout)
    dvc(gpu, "push", "--run-cache")

    git(tmp_path, "clone", "-q", str(gpu), "laptop")
    laptop = tmp_path / "laptop"
    assert ran(dvc(laptop, "repro", "fetch@cora").stdout) == {"fetch@cora"}  # the raw files
    out = dvc(laptop, "repro", "--pull", TRAIN).stdout
    assert f"Stage '{TRAIN}' is cached - skipping run, checking out outputs" in out
    assert ran(out) == set()
    for rel in OUTPUTS:
        assert (laptop / rel).read_bytes() == (gpu / rel).read_bytes()
