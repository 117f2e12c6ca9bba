"""One call on a borrowed GPU machine: the GPU tests, the GPU benchmark and the large-data
rehearsal, within one time budget.

    PYTHONPATH=src python3 -m twirls.bench.gpu_session --out DIR [--deadline 420]
        [--wheels .wheels] [--data /tmp/twirls-rehearsal-data]
        [--steps tests,bench,stages,batched,rehearsal]

The developers' GPU machines are lent for a few minutes per session, one command at a time, with
their own Python stack (no DGL, no DVC, no internet; ``docs/gpu-session.md``). This runs every
GPU measurement of the project from one command, in order of importance, each step a child
process whose time limit is what is left of ``--deadline`` (at most its own cap):

1. ``tests``: ``pytest -m gpu tests/test_gpu.py`` (every model family on CUDA against the CPU,
   the fast Mettack's flips, peak GPU memory per test): ``DIR/gpu-tests.json`` (peak memory)
   and ``DIR/gpu-tests.xml`` (JUnit: each test's outcome, read back into the session record);
2. ``bench``: ``python -m twirls.bench.gpu``: ``DIR/gpu.json`` (Table 11's models per epoch on an
   arxiv-sized graph, their ratios next to the paper's T4 ratios; seconds per Mettack flip);
3. ``dvc``: the pipeline's stages read their params through DVC. When ``import dvc`` fails, the
   wheels in ``--wheels`` (``make device-wheels``) are installed into a folder that the next
   steps find on ``PYTHONPATH`` (``pip --no-index --no-deps --target``: the machine's own
   packages are left alone);
4. ``stages``: ``python -m twirls.bench.gpu_stages``: a few real stages (Tables 2 and 3) on the
   fetched data in ``data/raw``, their scores beside the committed CPU ones and the speed-up
   per run: ``DIR/gpu-stages.json``;
5. ``batched``: ``python -m twirls.bench.batched_seeds --device cuda``: seconds per seed of 1,
   10 and 100 seeds of TWIRLS-base, GCN and GCNII on Cora and TWIRLS with attention on
   attacked Cora, one seed after the other against all seeds in one batched model (issue 28;
   GCNII last, as the step's cap may cut it off; ``--skip-done``: the records a copied
   ``DIR/batched-seeds-gpu.json`` has of this GPU are kept): ``DIR/batched-seeds-gpu.json``;
6. ``rehearsal``: ``python -m twirls.rehearsal.run --deadline <what is left>`` on the full-size
   generated files, the stages in :data:`PRIORITY` order (the ogbn-arxiv stages first: on a
   CPU they take days): ``DIR/rehearsal-gpu.json``.

A step that fails or runs out of time does not stop the next one. After every step
``DIR/gpu-session.json`` (the machine, and per step its command, status, seconds, limit, exit
status, output tail and files) is rewritten atomically, and ``DIR/gpu-session.log`` holds every
step's whole output, so a call cut off at its limit still brings back what finished. Eight
files in all (what a device call brings back at most). Exit status 0 when every step that ran
succeeded.

``--device cpu --quick --scale 0.01`` runs the same steps on a machine without a GPU (the CUDA
tests skip, the benchmark is its quick CPU smoke test, the rehearsal is tiny): how the tests
check this module.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from twirls.files import write_json
from twirls.rehearsal.run import child_env as stage_env
from twirls.rehearsal.run import machine_info, read_json, report_head

REPO = Path(__file__).resolve().parents[3]
STEPS = ("tests", "bench", "dvc", "stages", "batched", "rehearsal")
CHOSEN = ("tests", "bench", "stages", "batched", "rehearsal")  # --steps (dvc: as they need)
#: each step's own cap in seconds (the deadline's rest bounds it too)
CAPS = {"tests": 240.0, "bench": 240.0, "dvc": 120.0, "stages": 200.0, "batched": 240.0,
        "rehearsal": math.inf}
RESERVE_SECONDS = 10.0  # kept back from the deadline to write the record
MIN_STEP_SECONDS = 15.0  # a step with less time left is recorded as out of time
MIN_DEADLINE = RESERVE_SECONDS + MIN_STEP_SECONDS
#: the rehearsal's stages (``--only`` substrings), most wanted first
PRIORITY = ("table2@ogbn-arxiv-", "figure3[TWIRLS", "figure3[IGNN", "figure3[GCN",
            "figure3[SGC", "figure3[GAT", "table12", "table2@pubmed-", "table10@", "table11",
            "table5[")
FILES = {"tests": ("gpu-tests.json", "gpu-tests.xml"), "bench": ("gpu.json",), "dvc": (),
         "stages": ("gpu-stages.json",), "batched": ("batched-seeds-gpu.json",),
         "rehearsal": ("rehearsal-gpu.json",)}
#: the batched step's configurations and seed counts (--quick: a smoke test of the step)
BATCHED_ARGS = ["--configs", "cora-twirls-base-k2", "table4-twirls:nettack-cora", "cora-gcn",
                "cora-gcnii", "--seeds", "1", "10", "100", "--max-today-s", "30"]
BATCHED_QUICK = ["--configs", "cora-gcn", "--seeds", "1", "2"]
RECORD, LOG = "gpu-session.json", "gpu-session.log"


@dataclass
class Step:
    """One step's record in ``gpu-session.json``."""

    name: str
    status: str  # ok, failed, timeout, skipped, out-of-time
    command: list[str] = field(default_factory=list)
    seconds: float = 0.0
    limit_seconds: float | None = None
    returncode: int | None = None
    reason: str = ""
    output_tail: str = ""
    files: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------- running
def run_step(name: str, argv: list[str], env: dict[str, str], limit: float, log: Path,
             cwd: Path = REPO) -> Step:
    """Run ``argv`` as a child process (its own process group) with its output appended to
    ``log``; past ``limit`` seconds it gets SIGTERM (the rehearsal cleans up on it), 10 s later
    SIGKILL."""
    with open(log, "a") as out:
        out.write(f"\n===== {name}: {' '.join(argv)} (limit {limit:.0f} s)\n")
        out.flush()
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=limit)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                code = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                code = proc.wait()
        seconds = time.perf_counter() - start
    status = "timeout" if timed_out else ("ok" if code == 0 else "failed")
    reason = f"stopped at its limit of {limit:.0f} s" if timed_out else (
        "" if code == 0 else f"exit status {code}")
    return Step(name, status, argv, round(seconds, 1), round(limit, 1), code, reason,
                tail(log))


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def tail(log: Path, chars: int = 1500) -> str:
    """The end of ``log`` (the current step's output is last), each line as a terminal shows
    it: a progress bar's redraws (``\\r``) leave only their last state."""
    lines = log.read_bytes().decode(errors="replace").split("\n")  # bytes: each \r kept
    return "\n".join(line.rsplit("\r", 1)[-1] for line in lines)[-chars:]


def child_env(site: Path | None = None) -> dict[str, str]:
    """The steps' environment: the rehearsal's (:func:`twirls.rehearsal.run.child_env`), with
    ``site`` (the installed wheels) on ``PYTHONPATH`` and unbuffered output for the log."""
    return {**stage_env(REPO, (site,) if site else ()), "PYTHONUNBUFFERED": "1"}


def importable(module: str, env: dict[str, str]) -> tuple[bool, str]:
    """Whether ``module`` imports in a child with ``env``; its package's version or the
    error's last line."""
    code = (f"import importlib, sys; importlib.import_module({module!r}); "
            f"print(getattr(sys.modules[{module.split('.')[0]!r}], '__version__', 'installed'))")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, cwd=REPO)
    lines = (proc.stdout if proc.returncode == 0 else proc.stderr).strip().splitlines()
    return proc.returncode == 0, lines[-1] if lines else ""


def install_wheels(wheels: Path, site: Path, env: dict[str, str], limit: float,
                   log: Path) -> Step:
    """``pip install --no-index --no-deps --target site wheels/*.whl``."""
    found = sorted(wheels.glob("*.whl")) if wheels.is_dir() else []
    if not found:
        return Step("dvc", "failed", reason=f"DVC cannot be imported and {wheels} holds no "
                    "wheels: build them with `make device-wheels` and carry that folder")
    argv = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
            "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(site),
            *map(str, found)]
    step = run_step("dvc", argv, env, limit, log)
    step.command = [*argv[:-len(found)], f"{wheels}/*.whl ({len(found)} wheels)"]
    return step


def junit_outcomes(path: Path) -> dict[str, Any]:
    """Counts and the failed tests (with the first line of their message) of a JUnit file."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        return {"error": f"no JUnit report ({exc})"}
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failed: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            counts["failed"] += 1
            failed[name] = (problem.get("message") or "").splitlines()[0][:300] \
                if problem.get("message") else ""
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
            skipped[name] = (case.find("skipped").get("message") or "")[:300]
        else:
            counts["passed"] += 1
    return {**counts, "failed_tests": failed,
            "skip_reasons": sorted(set(skipped.values()))}


# ----------------------------------------------------------------------------- the record
def machine() -> dict[str, Any]:
    """The rehearsal's machine record (:func:`twirls.rehearsal.run.machine_info`: Python, torch,
    CPU, memory, ``cuda_status``, the GPU's name), with torch's CUDA version and
    ``nvidia-smi -L``."""
    import torch

    info = {**machine_info(), "torch_cuda": torch.version.cuda}
    if shutil.which("nvidia-smi"):
        proc = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        info["nvidia_smi"] = proc.stdout.strip() or proc.stderr.strip()
    return info


# ----------------------------------------------------------------------------- the steps
def commands(args: argparse.Namespace, out: Path) -> dict[str, list[str]]:
    """The child command of each step but ``dvc``."""
    py = sys.executable
    tests = [py, "-m", "pytest", "-m", "gpu", "-rs", "-q", "-p", "no:cacheprovider",
             f"--junitxml={out / 'gpu-tests.xml'}", "tests/test_gpu.py"]
    bench = [py, "-m", "twirls.bench.gpu", "--device", args.device,
             "--out", str(out / "gpu.json"), *(["--quick"] if args.quick else [])]
    stages = [py, "-m", "twirls.bench.gpu_stages", "--out", str(out / "gpu-stages.json"),
              "--skip-done", *[a for s in args.stage for a in ("--stage", s)]]
    batched = [py, "-m", "twirls.bench.batched_seeds", "--device", args.device, "--batch", "0",
               "--raw", str(args.raw), "--out", str(out / "batched-seeds-gpu.json"), "--skip-done",
               *(BATCHED_QUICK if args.quick else BATCHED_ARGS)]
    only = args.only or list(PRIORITY)
    rehearsal = [py, "-m", "twirls.rehearsal.run", "--repo", str(REPO),
                 "--data", str(args.data), "--out", str(out / "rehearsal-gpu.json"),
                 "--scale", str(args.scale), "--budgets", args.budgets,
                 "--max-epoch-seconds", str(args.max_epoch_seconds), "--skip-done",
                 *[a for s in only for a in ("--only", s)]]
    return {"tests": tests, "bench": bench, "stages": stages, "batched": batched,
            "rehearsal": rehearsal}


def step_env(name: str, env: dict[str, str], out: Path) -> dict[str, str]:
    """``env`` for step ``name``: the GPU tests write their peak memory to ``$GPU_REPORT``."""
    return {**env, "GPU_REPORT": str(out / "gpu-tests.json")} if name == "tests" else env


def run_session(args: argparse.Namespace) -> dict[str, Any]:
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = out / LOG
    log.write_text("")
    started = time.perf_counter()
    deadline_at = started + args.deadline
    try:
        info = machine()
    except Exception as exc:  # a broken torch or driver: the steps say more
        info = {"error": f"{type(exc).__name__}: {exc}"}
    record: dict[str, Any] = {
        **report_head("one call's GPU measurements: tests, benchmark, real stages, large-data "
                      "rehearsal", "twirls.bench.gpu_session", args.argv),
        "deadline_seconds": args.deadline, "machine": info, "steps": []}
    site = Path(tempfile.gettempdir()) / "twirls-device-site"
    env = child_env()
    argvs = commands(args, out)
    needs_dvc = any(s in args.steps for s in ("stages", "rehearsal"))
    for name in STEPS:
        left = deadline_at - time.perf_counter() - RESERVE_SECONDS
        if name == "dvc" and not needs_dvc:
            step = Step(name, "skipped", reason="neither stages nor rehearsal is in --steps")
        elif name != "dvc" and name not in args.steps:
            step = Step(name, "skipped", reason=f"{name} is not in --steps")
        elif left < MIN_STEP_SECONDS:
            step = Step(name, "out-of-time", reason=f"{max(left, 0):.0f} s of --deadline left")
        elif name == "dvc":
            step = ensure_dvc(args.wheels, site, env, min(CAPS[name], left), log)
            if step.status == "ok" and step.details.get("installed"):
                env = child_env(site)
        elif name in ("stages", "rehearsal") and not dvc_ready(record):
            step = Step(name, "skipped", reason="DVC is not importable (step dvc)")
        else:
            limit = min(CAPS[name], left)
            argv = argvs[name]
            if name in ("stages", "rehearsal"):  # their own deadline ends their last stage
                argv = [*argv, "--deadline", f"{max(limit - 15.0, 1.0):.0f}"]
            step = run_step(name, argv, step_env(name, env, out), limit, log)
        step.files = [f for f in FILES[name] if (out / f).is_file()]
        if name == "tests" and "gpu-tests.xml" in step.files:
            step.details = junit_outcomes(out / "gpu-tests.xml")
        if name == "stages" and "gpu-stages.json" in step.files:
            step.details = stages_summary(out / "gpu-stages.json")
        if name == "batched" and "batched-seeds-gpu.json" in step.files:
            step.details = batched_summary(out / "batched-seeds-gpu.json")
        if name == "rehearsal" and "rehearsal-gpu.json" in step.files:
            step.details = rehearsal_summary(out / "rehearsal-gpu.json")
            step.reason = step.reason or late_reason(step.details)
        record["steps"].append(asdict(step))
        record["wall_seconds"] = round(time.perf_counter() - started, 1)
        write_json(out / RECORD, record)
        why = f": {step.reason}" if step.reason else ""
        print(f"{name}: {step.status} ({step.seconds:.0f} s){why}", flush=True)
    return record


def ensure_dvc(wheels: Path, site: Path, env: dict[str, str], limit: float, log: Path) -> Step:
    """Step ``dvc``: DVC importable as it is, or after installing ``wheels`` into ``site``."""
    ok, version = importable("dvc", env)
    if ok:
        return Step("dvc", "ok", reason="", details={"dvc": version, "installed": False})
    step = install_wheels(wheels, site, env, limit, log)
    if step.status != "ok":
        return step
    ok, version = importable("dvc.api", child_env(site))
    if not ok:
        step.status, step.reason = "failed", f"installed, but `import dvc.api` fails: {version}"
    step.details = {"dvc": version if ok else None, "installed": True, "site": str(site)}
    return step


def dvc_ready(record: dict[str, Any]) -> bool:
    return any(s["name"] == "dvc" and s["status"] == "ok" for s in record["steps"])


def rehearsal_summary(path: Path) -> dict[str, Any]:
    """What the rehearsal's JSON says in short: stages ok / failed / left out for time."""
    report = read_json(path)
    if report is None:
        return {"error": f"{path.name} is missing or not JSON"}
    stages = report.get("stages", [])
    return {"complete": report.get("complete"),
            "ok": [s["stage"] for s in stages if s.get("status") == "ok"],
            "failed": [s["stage"] for s in stages if s.get("status") != "ok"],
            "out_of_time": report.get("out_of_time", []),
            "devices": sorted({str(s.get("device")) for s in stages})}


def stages_summary(path: Path) -> dict[str, Any]:
    """Per real stage: its device, its difference from the committed scores and whether they
    agree, and its speed-up per run (``gpu-stages.json``)."""
    report = read_json(path)
    if report is None:
        return {"error": f"{path.name} is missing or not JSON"}
    keys = ("status", "device", "difference_points", "standard_error_points", "agrees",
            "speedup_per_run")
    return {"all_agree": report.get("all_agree"), "out_of_time": report.get("out_of_time", []),
            "stages": {s["stage"]: {k: s.get(k) for k in keys} for s in report["stages"]}}


def batched_summary(path: Path) -> dict[str, Any]:
    """Per configuration and seed count: seconds per seed of both paths and the speed-up
    (``batched-seeds-gpu.json``)."""
    report = read_json(path)
    if report is None:
        return {"error": f"{path.name} is missing or not JSON"}
    return {"device": report.get("device"), "records": [
        {"config": r["config"], "seeds": r["seeds"], "speedup": r.get("speedup"),
         "today_s_per_seed": r["today"]["seconds_per_seed"],
         "batched_s_per_seed": r["batched"]["seconds_per_seed"]}
        for r in report.get("records", [])]}


def late_reason(summary: dict[str, Any]) -> str:
    """What a rehearsal that ran out of time left out, in a few words (else ``""``)."""
    late = summary.get("out_of_time") or []
    return f"--deadline reached: {len(late)} stages not started, from {late[0]}" if late else ""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m twirls.bench.gpu_session",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for the eight files")
    parser.add_argument("--deadline", type=float, default=420.0,
                        help="seconds for everything (default 420: 7 minutes, leaving a borrowed "
                             "machine time for a second call)")
    parser.add_argument("--steps", default=",".join(CHOSEN),
                        help=f"which of {', '.join(CHOSEN)} to run (comma-separated)")
    parser.add_argument("--wheels", type=Path, default=REPO / ".wheels",
                        help="DVC's wheels, installed when DVC is missing")
    parser.add_argument("--data", type=Path,
                        default=Path(tempfile.gettempdir()) / "twirls-rehearsal-data",
                        help="the rehearsal's generated files (reused when there)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="the benchmarks' device (cpu: a smoke test of this module)")
    parser.add_argument("--raw", type=Path, default=REPO / "data" / "raw",
                        help="the fetched datasets (the batched step reads Cora there)")
    parser.add_argument("--quick", action="store_true", help="the benchmark's --quick")
    parser.add_argument("--scale", type=float, default=1.0, help="the rehearsal's --scale")
    parser.add_argument("--budgets", default="1,5",
                        help="the rehearsal's epoch budgets (on a GPU an epoch costs little)")
    parser.add_argument("--max-epoch-seconds", type=float, default=10.0,
                        help="the rehearsal's --max-epoch-seconds")
    parser.add_argument("--only", action="append", default=[],
                        help="the rehearsal's stages, in order (default: PRIORITY)")
    parser.add_argument("--stage", action="append", default=[],
                        help="step stages: a real stage (group@name), repeatable (default: "
                             "twirls.bench.gpu_stages.STAGES)")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = sorted(set(steps) - set(CHOSEN))
    if unknown or not steps:
        parser.error(f"--steps: {', '.join(unknown) or 'nothing given'}; choose from "
                     f"{', '.join(CHOSEN)}")
    args.steps = steps
    if args.deadline <= MIN_DEADLINE:
        parser.error(f"--deadline {args.deadline:g}: give more than {MIN_DEADLINE:g} seconds")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    record = run_session(args)
    ran = [s for s in record["steps"] if s["status"] not in ("skipped", "out-of-time")]
    print(f"wrote {args.out / RECORD} and {args.out / LOG} ({record['wall_seconds']:.0f} s)")
    return 0 if ran and all(s["status"] == "ok" for s in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
