"""Full-size rehearsal of every stage that reads Pubmed, ogbn-arxiv, Amazon or PKU.

    python -m twirls.rehearsal.run [--out reports/benchmarks/rehearsal.json] [--only SUBSTR]
                                   [--scale 1.0] [--budgets 1,2] [--data DIR] [--keep]
                                   [--deadline SECONDS]
    make rehearsal

1. Generates the four datasets in their real formats at the paper's Table 5 sizes
   (:mod:`twirls.rehearsal.generate`; ~20 s) into a temporary folder (or ``--data``, reused).
2. Makes a temporary workspace: the repository's ``dvc.yaml`` and ``.dvc/config`` in a fresh git
   repository, with a rehearsal ``params.yaml`` (the real one with only the budget keys
   changed, :mod:`twirls.rehearsal.plan`), so every stage reads its params through DVC
   (:func:`twirls.params.load_params`) exactly as under ``dvc repro``.
3. Runs each stage's real command (``python -m twirls.stages.<stage>`` with the repository's
   ``src`` on ``PYTHONPATH``) on the full-size files, once per epoch budget, as a child
   process measured by :mod:`twirls.rehearsal.measure` (wall time, peak RSS, GPU memory).
4. Writes ``--out`` (atomically, after every stage): per stage the seconds per epoch, overhead,
   peak RSS, GPU memory, device and the estimated cost of its real run
   (:mod:`twirls.rehearsal.estimate`), the machine, the generated sizes, and the check that
   every stage's peak RSS stays under 16 GB.

The data is synthetic: every stage output goes to the temporary workspace, which is deleted
(``--keep`` keeps it, with each run's log). Nothing is written to ``reports/tables`` or
``reports/results.csv``. Exit status 1 if a stage failed, a peak RSS reached the limit or no
stage ran.

``--deadline`` bounds the whole rehearsal's wall time (one call on a borrowed GPU machine): no
run goes past it, a stage's larger budgets are left out when they would not fit, and the stages
not started are listed under ``out_of_time`` (``complete`` is then false). ``--only`` gives the
stages in priority order; ``--skip-done`` keeps the stages an earlier run wrote to ``--out``
instead of running them again.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from twirls.files import write_json
from twirls.params import read_all, write_all
from twirls.rehearsal.estimate import GB, cws_seconds, stage_record
from twirls.rehearsal.generate import NOTE, generate
from twirls.rehearsal.measure import Measurement, run_measured, stop_current
from twirls.rehearsal.plan import CWS_PROTOCOL, GENERATED, StagePlan, all_plans, select

RSS_LIMIT_GB = 16.0
MIN_STAGE_SECONDS = 5.0  # under --deadline, no stage starts with less time left
CUDA_REASON: dict[str, Any] = {}  # filled by machine_info()
FORBIDDEN = ("reports/tables", "reports/results.csv")


def find_repo(start: Path) -> Path:
    """The repository root: ``start`` or a parent holding ``dvc.yaml`` and ``params.yaml``;
    else the checkout this package was imported from."""
    for folder in (start, *start.parents):
        if (folder / "dvc.yaml").is_file() and (folder / "params.yaml").is_file():
            return folder
    here = Path(__file__).resolve().parents[3]
    if (here / "dvc.yaml").is_file():
        return here
    raise SystemExit(f"no dvc.yaml + params.yaml in {start} or its parents; run from the repo")


def make_workspace(repo: Path, work: Path, *, git: bool | None = None) -> Path:
    """``work`` as a minimal DVC project: the repo's ``dvc.yaml``, ``.dvc/config`` and
    ``.dvcignore`` in a fresh git repository (``params.yaml`` is written per run). Without
    ``git`` (default: whether it is on the PATH, e.g. not on a bare GPU image) the project uses
    DVC's no-SCM mode instead (``core.no_scm``), which DVC reads the stages' params in the same."""
    work.mkdir(parents=True, exist_ok=True)
    (work / ".dvc").mkdir(exist_ok=True)
    shutil.copy2(repo / "dvc.yaml", work / "dvc.yaml")
    for rel in (".dvc/config", ".dvcignore"):
        if (repo / rel).is_file():
            shutil.copy2(repo / rel, work / rel)
    if git is None:
        git = shutil.which("git") is not None
    if git:
        subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    else:
        config = work / ".dvc" / "config"
        lines = config.read_text().splitlines() if config.is_file() else []
        if "[core]" not in lines:
            lines.append("[core]")
        lines.insert(lines.index("[core]") + 1, "    no_scm = true")
        config.write_text("\n".join(lines) + "\n")
    return work


def child_env(repo: Path, extra: tuple[Path, ...] = ()) -> dict[str, str]:
    """The stages' environment: ``repo``'s ``src`` (then ``extra`` folders) first on
    ``PYTHONPATH``, this Python first on ``PATH``, no analytics or version checks."""
    env = dict(os.environ)
    paths = [str(repo / "src"), *map(str, extra), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(DVC_NO_ANALYTICS="1", OUTDATED_IGNORE="1", DGLBACKEND="pytorch",
               MPLBACKEND="Agg")
    return env


def machine_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(), "platform": platform.platform(),
        "python": platform.python_version(), "torch": torch.__version__,
        "torch_threads_default": torch.get_num_threads(),
        "load_average_at_start": [round(v, 2) for v in os.getloadavg()],
    }
    if hasattr(os, "sched_getaffinity"):
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    for path, key, prefix in (("/proc/cpuinfo", "cpu_model", "model name"),
                              ("/proc/meminfo", "memory_total", "MemTotal")):
        try:
            line = next(x for x in Path(path).read_text().splitlines() if x.startswith(prefix))
            info[key] = line.split(":", 1)[1].strip()
        except (OSError, StopIteration):
            pass
    try:
        from twirls.train.device import cuda_status

        ok, reason = cuda_status()
        info["cuda"] = {"usable": ok, "reason": reason}
        if ok:
            info["gpu"] = torch.cuda.get_device_name()
    except Exception as exc:  # device code under change must not stop the rehearsal
        info["cuda"] = {"usable": False, "reason": f"cuda_status() failed: {exc}"}
    CUDA_REASON.update(info["cuda"])
    return info


def report_head(what: str, module: str, argv: list[str]) -> dict[str, Any]:
    """The first keys of a measurement's JSON: what it is, the command that wrote it, when."""
    return {"what": what, "command": " ".join([f"python -m {module}", *argv]),
            "started_utc": datetime.datetime.now(datetime.UTC).isoformat(
                timespec="seconds")}


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_metrics(path: Path) -> dict[str, Any] | None:
    """A stage's metrics JSON; for the datasets table (csv), its first row."""
    if path.suffix != ".csv":
        return read_json(path)
    try:
        with open(path, newline="") as f:
            return next(csv.DictReader(f), None)
    except OSError:
        return None


def metrics_file(plan: StagePlan, work: Path, out: Path) -> Path:
    """Where the stage's run writes its metrics (the table5 stage: its datasets overview)."""
    if plan.kind == "train":
        return out / "metrics" / plan.group / f"{plan.name}.json"
    if plan.kind == "sweep":  # the sweep stage writes under its cwd, the workspace
        return work / "metrics" / f"{plan.group}.json"
    if plan.kind in ("timing", "cws"):
        return out / "metrics" / f"{plan.group}.json"
    return out / "reports" / "datasets.csv"


def data_problem(plan: StagePlan, metrics: dict[str, Any] | None) -> str:
    """Why a finished run did not train on (or load) the generated data, or ``""``."""
    if metrics is None:
        return "the stage wrote no metrics"
    if plan.kind == "datasets":
        return "" if metrics.get("status") == "ok" else f"not loaded: {metrics.get('note')}"
    if plan.kind == "timing":
        graph = str(metrics.get("graph", ""))
        return "" if plan.dataset != "ogbn-arxiv" or graph == "ogbn-arxiv" else \
            f"timing ran on {graph!r}, not the generated ogbn-arxiv"
    if plan.kind == "cws" and metrics.get("protocol") != CWS_PROTOCOL:
        return (f"ran the {metrics.get('protocol')!r} protocol, not the {CWS_PROTOCOL!r} one "
                "(training file or embedding not found in the generated PKU folder)")
    status = metrics.get("status")
    return "" if status == "ok" else f"status {status!r}: {metrics.get('reason', '')}"


def measure_stage(plan: StagePlan, real: dict[str, Any], work: Path, raw: Path,
                  budgets: list[int], env: dict[str, str], args: argparse.Namespace,
                  bar: tqdm, deadline_at: float = math.inf) -> dict[str, Any]:
    """Run one stage once per budget; its record for the report. ``deadline_at``
    (``time.perf_counter()`` time, from ``--deadline``): no run goes past it, and a larger
    budget is left out when the time left is under twice the last run's."""
    walls: dict[int, float] = {}
    cpus: dict[int, float] = {}
    metrics: dict[int, dict[str, Any]] = {}
    runs: list[dict[str, Any]] = []
    error = skipped = ""
    safe = plan.stage.replace("@", "-").replace("[", "-").replace("]", "")
    chosen = budgets if plan.has_epochs else budgets[:1]
    for epochs in chosen:
        left = deadline_at - time.perf_counter()
        if runs and left < 2 * runs[-1]["wall_seconds"]:
            skipped = (f"{left:.0f} s of --deadline left after the {runs[-1]['epochs']}-epoch "
                       "run: the larger budgets were skipped")
            bar.update(len(chosen) - len(runs))
            break
        timeout = min(args.stage_timeout, max(left, 1.0))
        out = work / "runs" / f"{safe}-e{epochs}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        write_all(work, plan.params(real, epochs))
        mfile = metrics_file(plan, work, out)
        m: Measurement | None = None
        for attempt in range(args.retries + 1):
            mfile.unlink(missing_ok=True)
            m = run_measured([sys.executable, "-m", *plan.argv(str(raw), str(out))], work, env,
                             out / "log.txt", timeout=timeout)
            if m.ok or attempt == args.retries:
                break
            tqdm.write(f"{plan.stage}: failed (rc {m.returncode}); retrying in "
                       f"{args.retry_wait:.0f} s\n{m.log_tail(600)}")
            time.sleep(args.retry_wait)
        assert m is not None
        found = read_metrics(mfile)
        problem = "" if not m.ok else data_problem(plan, found)
        runs.append({"epochs": epochs if plan.has_epochs else None,
                     "wall_seconds": round(m.wall_seconds, 2),
                     "cpu_seconds": round(m.cpu_seconds, 2),
                     "load_average_1min": round(os.getloadavg()[0], 2),
                     "peak_rss_gb": round(m.peak_rss_bytes / GB, 3),
                     "gpu_peak_gb": None if m.gpu_peak_bytes is None
                     else round(m.gpu_peak_bytes / GB, 3),
                     "returncode": m.returncode})
        bar.update()
        if not m.ok or problem:
            killed = m.returncode < 0 and m.wall_seconds >= 0.95 * timeout
            why = (f"stopped at its time limit, {timeout:.4g} s (--stage-timeout, or what "
                   "--deadline left)" if killed else f"exit status {m.returncode}")
            error = problem or f"{why}; log tail:\n{m.log_tail()}"
            break
        walls[epochs], cpus[epochs] = m.wall_seconds, m.cpu_seconds
        metrics[epochs] = found or {}
        slow = stage_epoch_seconds(plan, metrics[epochs], epochs)
        if slow:
            runs[-1]["stage_timer_seconds_per_epoch"] = round(slow, 3)
        if epochs == budgets[0] and len(budgets) > 1 and slow > args.max_epoch_seconds:
            skipped = (f"one epoch took {slow:.0f} s > --max-epoch-seconds "
                       f"{args.max_epoch_seconds:.0f}: the larger budgets were skipped")
            bar.update(len(budgets) - 1)
            break
    record = assemble(plan, real, walls, cpus, metrics, runs, error)
    if skipped:
        record["budget_note"] = skipped
    return record


def stage_epoch_seconds(plan: StagePlan, metrics: dict[str, Any], epochs: int) -> float:
    """Mean seconds per epoch by the stage's own timer (timing: its first round; cws: one
    epoch of every model), else 0."""
    if plan.kind == "train" and isinstance(metrics.get("seconds_mean"), (int, float)):
        return float(metrics["seconds_mean"]) / epochs
    if plan.kind == "cws":
        return (cws_seconds(metrics) or 0.0) / epochs
    if plan.kind == "timing":
        return sum(m["train_seconds_all"][0] for m in metrics.get("models") or []
                   if m.get("train_seconds_all"))
    return 0.0


def assemble(plan: StagePlan, real: dict[str, Any], walls: dict[int, float],
             cpus: dict[int, float], metrics: dict[int, dict[str, Any]],
             runs: list[dict[str, Any]], error: str) -> dict[str, Any]:
    """The stage's entry in ``rehearsal.json``."""
    last = metrics[max(metrics)] if metrics else {}
    gpu = [r["gpu_peak_gb"] for r in runs if r["gpu_peak_gb"] is not None]
    # a stage stopped before it wrote its metrics: nvidia-smi's samples say where it ran
    device = last.get("device") or ("cuda" if gpu else "cpu" if metrics else "unknown")
    on_gpu = "cuda" in str(device)
    if on_gpu and gpu:
        gpu_peak, gpu_note = max(gpu), "nvidia-smi samples of the stage's process (0.5 s)"
    elif device == "unknown":
        gpu_peak, gpu_note = None, "unknown: no metrics (the stage did not finish) and no GPU use"
    else:
        gpu_peak = None
        gpu_note = ("ran on CUDA but nvidia-smi was unavailable" if on_gpu else
                    f"ran on the CPU ({real.get('device')!r} in params.yaml; "
                    f"{CUDA_REASON.get('reason') or 'no usable CUDA'})")
    threads = last.get("threads", real[plan.group].get("threads") if plan.kind == "timing"
                       else real.get("threads"))
    record: dict[str, Any] = {
        "stage": plan.stage, "kind": plan.kind, "dataset": plan.dataset,
        "status": "failed" if error else "ok",
        "epochs_measured": [r["epochs"] for r in runs] if plan.has_epochs else [],
        "wall_seconds": {str(r["epochs"] if plan.has_epochs else "load"): r["wall_seconds"]
                         for r in runs},
        "runs_per_epoch": plan.runs_per_epoch,
        "runs": runs,
        "peak_rss_gb": max((r["peak_rss_gb"] for r in runs), default=None),
        "gpu_peak_gb": gpu_peak, "gpu_note": gpu_note,
        "device": str(device), "threads": threads,
    }
    reported = {k: v for k, v in last.items() if "memory" in k or "gpu" in k}
    if reported:  # a stage that measures its own GPU memory
        record["stage_reported_gpu"] = reported
    if error:
        record["error"] = error
        record["full_run"] = dict(plan.full)
        return record
    record.update(stage_record(plan, walls, metrics, cpus))
    if plan.kind == "datasets":
        record["loaded"] = {k: _number(last.get(k)) for k in (
            "nodes", "edges", "features", "classes", "splits (train/val/test)")}
    return record


def _number(text: Any) -> Any:
    """A csv cell as an int where it is one (``"19717"``, ``"19717.0"``), else unchanged."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return text
    return int(value) if value.is_integer() else value


def check_out_path(out: Path) -> None:
    text = out.resolve().as_posix()
    if any(f in text for f in FORBIDDEN):
        raise SystemExit(f"--out {out}: rehearsal (synthetic) results never go into "
                         f"{' or '.join(FORBIDDEN)}")


def summary(stages: list[dict[str, Any]]) -> dict[str, Any]:
    peaks = [s["peak_rss_gb"] for s in stages if s.get("peak_rss_gb") is not None]
    peak = max(peaks, default=None)
    total = sum(s["full_run"].get("estimated_seconds") or 0.0 for s in stages)
    total_cpu = sum(s["full_run"].get("estimated_cpu_seconds") or 0.0 for s in stages)
    failed = [s["stage"] for s in stages if s["status"] != "ok"]
    return {
        "max_peak_rss_gb": peak, "rss_limit_gb": RSS_LIMIT_GB,
        "check_max_peak_rss_gb_lt_16": peak is not None and peak < RSS_LIMIT_GB,
        "all_stages_ok": not failed, "failed_stages": failed,
        "estimated_full_seconds_total": round(total, 1),
        "estimated_full_hours_total": round(total / 3600, 2),
        "estimated_full_cpu_hours_total": round(total_cpu / 3600, 2),
    }


def not_run(plans: list[StagePlan]) -> list[dict[str, str]]:
    """Stages the paper needs on a generated dataset that the pipeline does not have."""
    trained = {p.dataset for p in plans if p.kind != "datasets"}
    missing = []
    if "pku" not in trained:
        missing.append({"stage": "CWS on PKU (paper Table 12)", "dataset": "pku",
                        "reason": "no table12 group in the params: nothing trains on PKU; the "
                                  "PKU loader's cost (time, peak RSS) is measured by table5[pku]"})
    return missing


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("reports/benchmarks/rehearsal.json"))
    parser.add_argument("--only", action="append", default=[],
                        help="run only stages whose name contains this (repeatable); the "
                             "other stages of an existing --out at the same scale are kept")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="shrink every generated size (tests: 0.01)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budgets", default="1,2",
                        help="epoch budgets, comma-separated (two or more give s/epoch)")
    parser.add_argument("--data", type=Path, help="generated data folder (kept and reused)")
    parser.add_argument("--work", type=Path, help="workspace folder (default: a temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the workspace and its logs")
    parser.add_argument("--repo", type=Path, help="repository root (default: from the cwd)")
    parser.add_argument("--retries", type=int, default=0)
    parser.add_argument("--retry-wait", type=float, default=300.0)
    parser.add_argument("--stage-timeout", type=float, default=3600.0)
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds for the whole rehearsal (e.g. one call on a borrowed "
                             "machine): no run goes past it, and the stages not started by "
                             "then are listed under out_of_time (give --only in priority "
                             "order)")
    parser.add_argument("--skip-done", action="store_true",
                        help="with --only: stages that an existing --out (same --scale) "
                             "records as ok are kept, not run again (a second call on a "
                             "borrowed machine)")
    parser.add_argument("--max-epoch-seconds", type=float, default=60.0,
                        help="a stage whose first epoch (its own timer) takes longer runs only "
                             "the smallest budget")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = " ".join(["python -m twirls.rehearsal.run", *(sys.argv[1:] if argv is None
                                                             else argv)])
    check_out_path(args.out)
    budgets = sorted({int(b) for b in args.budgets.split(",") if b.strip()})
    if not budgets or budgets[0] < 1:
        raise SystemExit("--budgets: positive epoch counts, e.g. 1,2")
    repo = (args.repo or find_repo(Path.cwd())).resolve()
    real = read_all(repo)
    every = all_plans(real)
    plans = select(every, args.only)
    if not plans:
        raise SystemExit(f"--only {args.only}: no stage matches")
    previous = read_json(args.out) if args.only else None
    if args.skip_done and previous and previous.get("scale") == args.scale:
        done = {s["stage"] for s in previous.get("stages", []) if s.get("status") == "ok"}
        plans = [p for p in plans if p.stage not in done]
        if not plans:
            print(f"{args.out}: every selected stage is there already (--skip-done)")
            return 0
    # kept: the other stages of the previous report that are still stages of params.yaml (a
    # report from before a stage was renamed, e.g. `train@x` -> `table2@x`, keeps none of those)
    # each keeps the GPU that ran it (``gpu``; a record from before that field: the previous
    # report's machine's), so that a file merged from calls on two machines names both
    kept = [{**s, "gpu": s.get("gpu", ((previous or {}).get("machine") or {}).get("gpu"))}
            for s in (previous or {}).get("stages", [])
            if previous.get("scale") == args.scale
            and s["stage"] in {p.stage for p in every} - {p.stage for p in plans}]

    started = time.perf_counter()
    work = (args.work or Path(tempfile.mkdtemp(prefix="twirls-rehearsal-"))).resolve()
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up on `kill`
    try:
        make_workspace(repo, work)
        raw = (args.data or work / "raw").resolve()
        needed = sorted({p.dataset for p in plans if p.dataset in GENERATED}, key=GENERATED.index)
        gen_start = time.perf_counter()
        sizes = generate(raw, args.scale, args.seed, needed, log=lambda s: print(s, flush=True))
        report: dict[str, Any] = {
            "what": "full-size rehearsal of the stages that read Pubmed, ogbn-arxiv, Amazon "
                    "and PKU: real stage code, generated files, tiny epoch budgets",
            "synthetic_data": True, "data_note": NOTE,
            "outputs_note": "stage outputs went to a temporary workspace; nothing is written "
                            "to reports/tables or reports/results.csv",
            "command": command, "complete": False, "scale": args.scale, "seed": args.seed,
            "budgets_epochs": budgets,
            "budget_note": (f"each stage runs once per budget ({budgets} epochs, 1 seed; sweeps "
                            "on the first point of their data_grid) unless one epoch takes more "
                            f"than {args.max_epoch_seconds:.0f} s (then the first budget only); "
                            "twirls/rehearsal/estimate.py gives the extrapolation. "
                            "estimated_cpu_* count CPU seconds, which other jobs on the shared "
                            "machine do not inflate (= idle wall time for 1-thread stages)"),
            "started_utc": datetime.datetime.now(datetime.UTC).isoformat(
                timespec="seconds"),
            "machine": machine_info(),
            "generation": {"seconds": round(time.perf_counter() - gen_start, 1),
                           "datasets": sizes},
            "stages": list(kept), "not_run": not_run(every),
        }
        deadline_at = math.inf if args.deadline is None else started + args.deadline
        if args.deadline is not None:
            report["deadline_seconds"], report["out_of_time"] = args.deadline, []
        report.update(summary(report["stages"]))
        env = child_env(repo)
        total = sum(len(budgets) if p.has_epochs else 1 for p in plans)
        with tqdm(total=total, desc="rehearsal runs", file=sys.stderr) as bar:
            for plan in plans:
                if time.perf_counter() >= deadline_at - MIN_STAGE_SECONDS:
                    report["out_of_time"].append(plan.stage)
                    bar.update(len(budgets) if plan.has_epochs else 1)
                    continue
                bar.set_postfix_str(plan.stage)
                record = measure_stage(plan, real, work, raw, budgets, env, args, bar,
                                       deadline_at)
                record["sizes"] = {k: sizes.get(plan.dataset, {}).get(k)
                                   for k in ("nodes", "edges", "features", "classes")}
                record["gpu"] = report["machine"].get("gpu")
                report["stages"].append(record)
                report.update(summary(report["stages"]))
                report["rehearsal_wall_seconds"] = round(time.perf_counter() - started, 1)
                write_json(args.out, report)
                tqdm.write(f"{plan.stage}: {record['status']}, "
                           f"{record.get('seconds_per_epoch')} s/epoch, overhead "
                           f"{record.get('overhead_seconds')} s, peak RSS "
                           f"{record['peak_rss_gb']} GB, full run ~"
                           f"{record['full_run'].get('estimated_hours')} h")
        report["complete"] = not report.get("out_of_time")
        if not report["complete"]:
            print(f"--deadline {args.deadline:.0f} s: not started: "
                  f"{', '.join(report['out_of_time'])}")
        report["machine"]["load_average_at_end"] = [round(v, 2) for v in os.getloadavg()]
        report["rehearsal_wall_seconds"] = round(time.perf_counter() - started, 1)
        write_json(args.out, report)
    finally:
        signal.signal(signal.SIGTERM, previous)  # the caller's handler (e.g. a test process's)
        stop_current()
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    ok = report["all_stages_ok"] and report["check_max_peak_rss_gb_lt_16"]
    print(f"wrote {args.out}: {len(report['stages'])} stages, max peak RSS "
          f"{report['max_peak_rss_gb']} GB, {report['rehearsal_wall_seconds']} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
