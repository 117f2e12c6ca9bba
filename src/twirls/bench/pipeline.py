"""Benchmarks of the pipeline, written to ``reports/benchmarks/pipeline.json``.

* The everyday loop on a fresh clone: ``dvc status``, a no-op ``dvc repro`` and one
  ``dvc exp run`` (default ``-S attention.p=0.2``), with the wall time of every stage it ran.
  The clone is a ``git clone`` of this repository's HEAD in a temporary folder, with the raw data
  copied from ``data/raw`` (as a user who has fetched once).
  ``python -m twirls.bench.pipeline [--set key=value ...]``.
* Every record holds ``reference_s``, a fixed workload timed on the same machine just before
  (:mod:`twirls.bench.calibrate`): the machine's speed that day, to compare runs by.
* ``--full``: the whole pipeline, ``dvc repro -f``, run in this checkout (its outputs are the
  pipeline's results, to be committed with ``dvc.lock``), with the wall time of every stage;
  stored under ``full_repro``, next to the everyday loop's numbers (and after each stage, so an
  interrupted run keeps the stages it finished).
* ``--recover START --repo DIR``: the stages of a ``--full`` run in ``DIR`` started at ``START``
  (ISO time) that was stopped before it wrote anything, from the times its outputs were written
  (a stage ends when its last output is written, and starts when the one before it ended).
* What DVC prints (stage names, progress bars) is passed on to stderr as it comes; the record
  goes to stdout at the end.
* ``--full --resume [--target STAGE ...]``: go on with an interrupted ``--full`` run in this
  checkout: rerun, forced, the stages of ``dvc.lock`` its record does not hold yet
  (:func:`remaining_stages`; a plain ``dvc repro`` would skip those whose lock entries are up
  to date), or exactly the stages ``--target`` names (say those whose results came from an
  earlier stack, or, in a complete record, those a change of results reran), with ``dvc repro
  -f -s``; their seconds join the stored record's, in place of any it held (which then lists
  the commit and ``reference_s`` of each part: the machine may differ), complete once every
  stage of ``dvc.lock`` is in it; then a plain ``dvc repro`` reruns what the parts left
  stale (a stage of an earlier part whose inputs a later part rewrote), its seconds recorded as
  ``stale_reruns`` and counted in ``seconds``. A complete record in several parts also holds
  ``normalised``: its total scaled part by part by ``reference_s`` to the first part's day
  (:func:`normalised`), the number to hold against a target set on that day.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from twirls.bench.calibrate import reference_seconds
from twirls.files import write_json
from twirls.train.cpu import mkl_code_path
from twirls.train.parallel import available_cores

FORCED = ["dvc", "repro", "-f", "-s"]  # a part's command before the stages it forces


def timed(cmd: list[str], cwd: Path, env: dict[str, str],
          on_stage: Callable[[dict[str, float]], None] | None = None
          ) -> tuple[float, dict[str, float], str]:
    """Run ``cmd``; its wall time, the seconds of each ``Running stage`` block, and stdout,
    which is passed on to stderr as it comes, progress bars included (a full run takes hours).
    ``on_stage``: called with the stages timed so far whenever one finishes."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    stages: dict[str, float] = {}
    current, since, lines = None, start, []
    assert proc.stdout is not None
    # newline="": lines end at \n or at a progress bar's \r, kept as they came
    for line in io.TextIOWrapper(proc.stdout, encoding="utf-8", errors="replace", newline=""):
        lines.append(line)
        sys.stderr.write(line)
        sys.stderr.flush()
        if line.startswith(("Running stage '", "Stage '")):
            now = time.perf_counter()
            if current is not None:
                stages[current] = round(now - since, 2)
                if on_stage is not None:
                    on_stage(dict(stages))
            current, since = (line.split("'")[1], now) if line.startswith("Running") else (
                None, now)
    end = time.perf_counter()
    if current is not None:
        stages[current] = round(end - since, 2)
    if proc.wait() != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{''.join(lines[-30:])}")
    return round(end - start, 2), stages, "".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--set", action="append", default=None,
                        help="dvc exp run -S values (default: attention.p=0.2)")
    parser.add_argument("--out", type=Path, default=Path("reports/benchmarks/pipeline.json"))
    parser.add_argument("--full", action="store_true",
                        help="time `dvc repro -f` of everything in this checkout instead")
    parser.add_argument("--resume", action="store_true",
                        help="with --full: finish an interrupted --full run (`dvc repro`)")
    parser.add_argument("--target", action="append", default=[],
                        help="with --resume: rerun exactly these stages (dvc repro -f -s)")
    parser.add_argument("--recover", metavar="START",
                        help="stage times of an interrupted --full run started at START "
                             "(ISO time, e.g. 2026-11-25T09:53:47), from its outputs' times")
    parser.add_argument("--repo", type=Path, default=Path.cwd(),
                        help="with --recover: the checkout the run was in")
    args = parser.parse_args(argv)
    if args.recover:
        return recover(args.repo, datetime.fromisoformat(args.recover).timestamp(), args.out)
    sets = args.set or ["attention.p=0.2"]
    repo = Path.cwd()
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "OUTDATED_IGNORE": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    if (args.resume or args.target) and not args.full:
        parser.error("--resume goes with --full")
    if args.target and not args.resume:
        parser.error("--target goes with --resume")
    if args.full:
        # a stage's journal of finished runs (twirls.train.journal) would shorten the times of
        # a stage stopped in an earlier attempt: every stage here trains all its runs
        with tempfile.TemporaryDirectory(prefix="twirls-journal-") as journals:
            env["TWIRLS_JOURNAL"] = journals
            return full_repro(repo, env, args.out, resume=args.resume, targets=args.target)
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
        env["PYTHONPATH"] = str(clone / "src")  # the clone's code, not this checkout's
        shutil.copytree(repo / "data" / "raw", clone / "data" / "raw", symlinks=True)
        for key, value in (("user.name", "bench"), ("user.email", "bench@localhost")):
            subprocess.run(["git", "config", key, value], cwd=clone, check=True)
        report: dict[str, Any] = {"cores": available_cores(), "commit": head_commit(repo),
                                  "reference_s": reference_seconds()}
        report["first_status_s"], _, _ = timed(["dvc", "status"], clone, env)
        report["status_s"], _, _ = timed(["dvc", "status"], clone, env)
        report["noop_repro_s"], ran, _ = timed(["dvc", "repro"], clone, env)
        report["noop_repro_ran"] = sorted(ran)
        cmd = ["dvc", "exp", "run"] + [a for s in sets for a in ("-S", s)]
        report["exp_run"] = {"command": " ".join(cmd)}
        total, stages, _ = timed(cmd, clone, env)
        report["exp_run"] |= {"seconds": total, "stages": stages}
    old = json.loads(args.out.read_text()) if args.out.is_file() else {}
    write_json(args.out, report | ({"full_repro": old["full_repro"]} if "full_repro" in old
                                   else {}))
    print(json.dumps(report, indent=1))
    return 0


def full_repro(repo: Path, env: dict[str, str], out: Path, resume: bool = False,
               targets: list[str] | None = None) -> int:
    """``dvc repro -f`` here; its seconds and per-stage seconds merged into ``out``. The stages
    finished so far are written after each one (``"complete": false``), so an interrupted run
    keeps what it measured. ``resume``: ``dvc repro`` of what such a run left, its stages added
    to the stored ones and each part's header kept under ``parts``; ``targets``: exactly those
    stages, forced (``dvc repro -f -s``), also of a complete record (say after a change of
    their results), their new seconds in place of any stored ones; the record is complete once
    it holds every stage of ``dvc.lock``."""
    before: dict[str, float] = {}  # the stored record's stages
    parts: list[dict[str, Any]] = []
    if resume:
        old = json.loads(out.read_text()).get("full_repro") if out.is_file() else None
        if not old or (old.get("complete", True) and not targets):
            raise SystemExit(f"--resume: {out} holds no interrupted --full run to go on with "
                             "(--target STAGE reruns stages of a complete one)")
        before = old["stages"]
        parts = old.get("parts") or [{k: v for k, v in old.items()
                                      if k not in ("stages", "slowest", "parts")}]
        targets = targets or remaining_stages(repo, before)
        if not targets:
            raise SystemExit(f"--resume: {out}'s record already holds every stage of dvc.lock")
    done = {k: v for k, v in before.items() if k not in (targets or [])}
    cmd = [*FORCED, *targets] if targets else ["dvc", "repro", "-f"]
    head = run_header(repo) | {"command": " ".join(cmd),
                               "load_before": round(os.getloadavg()[0], 2)}
    if resume:
        head["parts"] = parts + [dict(head)]
    cpu_before = children_cpu_seconds()

    def joined(stages: dict[str, float]) -> dict[str, float]:
        """``done`` and the new ``stages``, in the stored record's order."""
        return {k: v for k, v in before.items() if k in done or k in stages} | stages

    def partial(stages: dict[str, float]) -> None:
        both = joined(stages)
        store_full_repro(out, head | {"complete": False,
                                      "seconds_so_far": round(sum(both.values()), 2),
                                      "stages": both}, announce=False)

    total, stages, _ = timed(cmd, repo, env, on_stage=partial)
    stages = joined(stages)
    if resume and not set(locked_stages(repo)) <= set(stages):
        partial(stages)
        return 0
    stale: dict[str, float] = {}
    if resume:
        # a stage of an earlier part whose inputs a later part rewrote (say `report`, run by a
        # part whose --target list put it first) is stale now: rerun it, timed on its own
        stale_s, stale, _ = timed(["dvc", "repro"], repo, env)
        total = round(total + stale_s + sum(done.values()), 2)
    run = head | {"complete": True, "load_after": round(os.getloadavg()[0], 2),
                  "cpu_s": round(children_cpu_seconds() - cpu_before, 1),
                  "peak_rss_gb": children_peak_rss_gb(),
                  "seconds": total, "hours": round(total / 3600, 2), "stages": stages,
                  "slowest": slowest(stages)}
    if resume:
        run["cpu_s_note"] = "cpu_s and peak_rss_gb count the last part only"
        run["stale_reruns"] = stale  # in `seconds`, not in `stages`: each stage ran once before
    store_full_repro(out, run)
    return 0


def locked_stages(repo: Path) -> list[str]:
    """The names of the stages in ``repo``'s ``dvc.lock``."""
    import yaml

    return list(yaml.safe_load((repo / "dvc.lock").read_text())["stages"])


def remaining_stages(repo: Path, done: Iterable[str]) -> list[str]:
    """The stages of ``repo``'s ``dvc.lock`` not in ``done``, each after the stages whose outputs
    it reads (a dep at, above or inside one of their outs), otherwise in the lock's order:
    ``dvc repro -s`` runs its targets in the order given."""
    import yaml

    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    done = set(done)
    left = [name for name in lock if name not in done]
    outs = {name: [e["path"].rstrip("/") for e in lock[name].get("outs", [])] for name in left}
    deps = {name: [e["path"].rstrip("/") for e in lock[name].get("deps", [])] for name in left}

    def reads(reader: str, writer: str) -> bool:
        return any(dep == out or dep.startswith(out + "/") or out.startswith(dep + "/")
                   for out in outs[writer] for dep in deps[reader])

    upstream = {name: {w for w in left if w != name and reads(name, w)} for name in left}
    order: list[str] = []
    while len(order) < len(left):
        ready = [name for name in left if name not in order and upstream[name] <= set(order)]
        if not ready:
            raise SystemExit(f"dvc.lock: the stages {sorted(set(left) - set(order))} depend "
                             "on each other in a cycle")
        order.append(ready[0])
    return order


def store_full_repro(out: Path, run: dict[str, Any], announce: bool = True) -> None:
    """``run`` as ``out``'s ``full_repro`` record, its other keys (the everyday loop's numbers)
    kept, with its :func:`normalised` total when it was run in parts; ``announce``: print the
    record without its per-stage seconds."""
    old = json.loads(out.read_text()) if out.is_file() else {}
    run = {k: v for k, v in run.items() if k != "normalised"}
    if run.get("complete") and len(run.get("parts") or []) > 1:
        run["normalised"] = normalised(run)
    write_json(out, old | {"full_repro": run})
    if announce:
        print(json.dumps({k: v for k, v in run.items() if k != "stages"}, indent=1))


def stage_parts(run: dict[str, Any]) -> dict[str, int]:
    """Which part of a record run in parts timed each stage: the last part whose ``dvc repro -f
    -s`` named it, else the first (the whole ``dvc repro -f``)."""
    words = [part.get("command", "").split() for part in run.get("parts") or []]
    named = [set(w[len(FORCED):]) if w[:len(FORCED)] == FORCED else set() for w in words]
    return {stage: max((i for i, names in enumerate(named) if stage in names), default=0)
            for stage in run.get("stages") or {}}


def part_factors(run: dict[str, Any]) -> dict[str, list[float]]:
    """By each calibration (``python``, ``torch``) that every part of a record run in parts
    holds: each part's factor to its first part's day, the first part's ``reference_s`` over
    its own."""
    parts = run.get("parts") or []
    factors: dict[str, list[float]] = {}
    for kind in ("python", "torch"):
        if parts and all(isinstance((part.get("reference_s") or {}).get(kind), (int, float))
                         for part in parts):  # else a part timed without this calibration
            base = float(parts[0]["reference_s"][kind])
            factors[kind] = [base / float(part["reference_s"][kind]) for part in parts]
    return factors


def scaled_seconds(run: dict[str, Any], names: Iterable[str]) -> dict[str, float]:
    """The seconds of the stages ``names`` of a record run in parts at its first part's day, by
    each calibration (:func:`part_factors`): each stage's seconds times its part's factor."""
    of, stages = stage_parts(run), run["stages"]
    names = list(names)
    return {kind: sum(stages[name] * factor[of[name]] for name in names)
            for kind, factor in part_factors(run).items()}


def normalised(run: dict[str, Any]) -> dict[str, Any]:
    """A complete record's total as if every part had run on its first part's day: each
    stage's seconds times the first part's ``reference_s`` over its own part's, by each of the
    two calibrations (the interpreter's, the sparse products'); what the total holds besides
    the stages (the last part's stale reruns and DVC's time between stages) scales as the last
    part. Issue 28's targets are read on this. An estimate: the reference is one workload, and
    parts on another CPU (``cpu_capability``) scale less exactly than parts on the same one."""
    parts, stages = run["parts"], run["stages"]
    of = stage_parts(run)
    rest = float(run["seconds"]) - sum(stages.values())
    last = {kind: factor[-1] for kind, factor in part_factors(run).items()}
    scaled = {kind: round(seconds + rest * last[kind], 2)
              for kind, seconds in scaled_seconds(run, stages).items()}
    return {"to": {"commit": parts[0].get("commit"), "reference_s": parts[0].get("reference_s"),
                   "cpu_capability": parts[0].get("cpu_capability")},
            "seconds": scaled, "hours": {k: round(v / 3600, 2) for k, v in scaled.items()},
            "stages_by_part": [sum(1 for i in of.values() if i == k) for k in range(len(parts))],
            "method": "each stage's seconds x the first part's reference_s / its own part's"}


def stage_ends(repo: Path, since: float) -> dict[str, float]:
    """Each stage of ``repo``'s ``dvc.lock`` whose outputs were all written after ``since``
    (epoch seconds), with the time its last output was written, in that order."""
    import yaml

    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    ends = {}
    for name, stage in lock.items():
        times = []
        for out in stage.get("outs", []):
            path = repo / out["path"]
            files = [f for f in path.rglob("*") if f.is_file()] if path.is_dir() else [path]
            times += [f.stat().st_mtime for f in files if f.exists()]
        if times and min(times) >= since:
            ends[name] = max(times)
    return dict(sorted(ends.items(), key=lambda kv: kv[1]))


def recover(repo: Path, since: float, out: Path) -> int:
    """The ``full_repro`` record of an interrupted ``--full`` run in ``repo`` that started at
    ``since``, from :func:`stage_ends`, merged into ``out`` (``"complete": false``)."""
    ends = stage_ends(repo, since)
    if not ends:
        raise SystemExit(f"--recover: no stage of {repo / 'dvc.lock'} wrote all its outputs "
                         "after the given start; check the time and --repo")
    stages, before = {}, since
    for name, end in ends.items():
        stages[name], before = round(end - before, 2), end
    run = run_header(repo) | {
        "command": "dvc repro -f", "complete": False,
        "method": "stopped before its end; per-stage seconds from the times each stage's last "
                  "output was written (python -m twirls.bench.pipeline --recover)",
        "started": datetime.fromtimestamp(since).isoformat(timespec="seconds"),
        "seconds_so_far": round(before - since, 2), "stages": stages, "slowest": slowest(stages)}
    store_full_repro(out, run)
    return 0


def head_commit(repo: Path) -> str:
    """The commit checked out in ``repo`` (``"unknown"`` outside a git checkout)."""
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


def run_header(repo: Path) -> dict[str, Any]:
    """What a ``full_repro`` record says about the run: its commit and machine."""
    return {"commit": head_commit(repo), "cores": available_cores(),
            **machine(), "reference_s": reference_seconds()}


def bench_header(module: str, argv: list[str] | None, description: str,
                 threads: int | None = 1) -> dict[str, Any]:
    """The fields every benchmark file opens with: what it measures, the command that wrote it
    (``python -m twirls.bench.<module>`` with ``argv``, else this process's arguments), the
    commit, the machine, torch and its threads."""
    import torch

    args = sys.argv[1:] if argv is None else argv
    return {"description": description,
            "command": " ".join([f"python -m twirls.bench.{module}", *args]),
            "commit": head_commit(Path.cwd()), **machine(), "torch": torch.__version__,
            "threads": threads}


def slowest(stages: dict[str, float], count: int = 15) -> dict[str, float]:
    """The ``count`` longest stages, longest first."""
    return dict(sorted(stages.items(), key=lambda kv: -kv[1])[:count])


def machine() -> dict[str, str]:
    """The CPU model and the kernels PyTorch dispatches to (results can differ in the last bits
    between CPU generations, so a run says where it ran)."""
    import platform

    import torch

    model = platform.processor() or "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                 if line.startswith("model name")]
        model = names[0] if names else model
    from twirls.models import csr_kernel

    return {"cpu": model, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "mkl": mkl_code_path(), "csr_kernel": csr_kernel.status()}


def children_cpu_seconds() -> float:
    """User + system CPU seconds of every finished child process (and theirs) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def children_peak_rss_gb() -> float:
    """The largest resident set of any one finished child process (or theirs) so far, in GB
    (Linux reports ``ru_maxrss`` in KiB): the stage that needs the most memory."""
    return round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / 1e9, 2)


if __name__ == "__main__":
    sys.exit(main())
