"""Real stages on the GPU against their committed CPU results: same scores, and how much faster.

    python -m twirls.bench.gpu_stages --out gpu-stages.json [--stage table2@cora-twirls-base-k2]
        [--raw data/raw] [--deadline SECONDS] [--skip-done]

Runs each stage's real command (``python -m twirls.stages.train <group> <name>`` with the real
``params.yaml``, so ``device: auto`` puts it on the GPU where there is one) on the fetched data
in ``--raw``, in a temporary DVC workspace (the stages read their params through DVC, as under
``dvc repro``; :func:`twirls.rehearsal.run.make_workspace`), measured by
:mod:`twirls.rehearsal.measure` (wall time, peak RSS, GPU memory). Its scores are then set
beside the committed ones (``metrics/<group>/<name>.json``, from this project's CPU):

* ``difference_points``: our mean test accuracy minus the committed one, in points;
* ``standard_error_points``: the standard error of that difference, ``sqrt(s_a²/n_a + s_b²/n_b)``
  from the two runs' (population) stds and run counts;
* ``agrees``: the difference is within :data:`AGREE_SE` standard errors or
  :data:`AGREE_POINTS` points. A GPU's floating-point order differs from the CPU's, so runs are
  not bit-identical, but their means must not move by more than their noise;
* ``seconds_per_run`` on each side and their ratio (``speedup_per_run``): training seconds per
  seed and split, loading excluded.

:data:`STAGES` (the default) are short on a GPU and cover TWIRLS-base (Table 2), TWIRLS with
attention on a heterophily graph (Table 3) and the deep baselines (GCNII with 32 layers, DAGNN),
none on DGL's layers. Stages that ``--deadline`` leaves no time for are listed under
``out_of_time``; ``--skip-done`` keeps those that an earlier call's ``--out`` records as run on
a GPU (``kept_from`` says which call) and runs the rest. The JSON is rewritten after every
stage (a temporary file, then a rename). Exit status 0 when every stage ran and agrees.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from twirls.files import write_json
from twirls.params import read_all, write_all
from twirls.rehearsal.measure import run_measured, stop_current
from twirls.rehearsal.run import (
    child_env,
    machine_info,
    make_workspace,
    read_json,
    report_head,
)

REPO = Path(__file__).resolve().parents[3]
#: most wanted first; committed CPU seconds per run: 4.7, 1.8, 218 (3 runs), 8.8
STAGES = ("table2@cora-twirls-base-k2", "table3@texas-twirls", "table2@citeseer-gcnii",
          "table2@cora-dagnn")
TRAIN_GROUPS = ("table2", "table3", "table10")  # groups run by twirls.stages.train
AGREE_SE, AGREE_POINTS = 2.0, 0.5
MIN_STAGE_SECONDS = 5.0


def parse_stage(stage: str) -> tuple[str, str]:
    group, _, name = stage.partition("@")
    if group not in TRAIN_GROUPS or not name:
        raise SystemExit(f"--stage {stage!r}: give <group>@<name> with group one of "
                         f"{', '.join(TRAIN_GROUPS)} (e.g. table2@cora-gcn)")
    return group, name


def scores(metrics: dict[str, Any] | None) -> dict[str, Any] | None:
    """The test scores and timing of a stage's metrics JSON (``None`` if it has none)."""
    if not metrics or not isinstance(metrics.get("test_mean"), (int, float)):
        return None
    return {k: metrics.get(k) for k in ("test_mean", "test_std", "runs", "seconds_mean",
                                        "device")}


def compare(ours: dict[str, Any], committed: dict[str, Any]) -> dict[str, Any]:
    """Difference of the mean test accuracies in points, its standard error, whether they
    agree (see the module doc), and the speed-up per run."""
    difference = 100 * (ours["test_mean"] - committed["test_mean"])
    se = 100 * math.sqrt(ours["test_std"] ** 2 / ours["runs"]
                         + committed["test_std"] ** 2 / committed["runs"])
    out = {"difference_points": round(difference, 3), "standard_error_points": round(se, 3),
           "agrees": abs(difference) <= max(AGREE_SE * se, AGREE_POINTS)}
    if ours.get("seconds_mean") and committed.get("seconds_mean"):
        out["speedup_per_run"] = round(committed["seconds_mean"] / ours["seconds_mean"], 2)
    return out


def run_stage(stage: str, raw: Path, work: Path, env: dict[str, str],
              timeout: float | None) -> dict[str, Any]:
    """One stage run in ``work``; its record (see the module doc)."""
    group, name = parse_stage(stage)
    out = work / "runs" / stage.replace("@", "-")
    shutil.rmtree(out, ignore_errors=True)
    argv = [sys.executable, "-m", "twirls.stages.train", group, name, "--raw", str(raw),
            "--out", str(out)]
    m = run_measured(argv, work, env, out / "log.txt", timeout=timeout)
    record: dict[str, Any] = {
        "stage": stage, "status": "ok" if m.ok else "failed",
        "wall_seconds": round(m.wall_seconds, 2), "peak_rss_gb": round(m.peak_rss_bytes / 1e9, 3),
        "gpu_peak_gb": None if m.gpu_peak_bytes is None else round(m.gpu_peak_bytes / 1e9, 3)}
    ours = scores(read_json(out / "metrics" / group / f"{name}.json"))
    committed = scores(read_json(REPO / "metrics" / group / f"{name}.json"))
    if not m.ok or ours is None:
        record["status"] = "failed"
        record["error"] = (f"exit status {m.returncode}" if not m.ok else "no scores in its "
                           "metrics") + f"; log tail:\n{m.log_tail(1500)}"
        return record
    record.update(device=ours["device"], ours=ours, committed=committed)
    if committed is None:
        record["note"] = f"no committed scores in metrics/{group}/{name}.json to compare with"
    else:
        record.update(compare(ours, committed))
    return record


def stage_gpu(previous: dict[str, Any], stage: dict[str, Any]) -> str | None:
    """The GPU that ran a stage recorded in ``previous`` (an earlier call's report): its own
    ``gpu``, else the GPU of the call ``previous`` kept it from, else ``previous``'s."""
    if stage.get("gpu"):
        return stage["gpu"]
    kept_from = previous.get("kept_from") or {}
    if stage.get("stage") in kept_from.get("stages", []):
        return kept_from.get("gpu")
    return (previous.get("machine") or {}).get("gpu")


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    for stage in args.stage:
        parse_stage(stage)
    raw = args.raw.resolve()
    report: dict[str, Any] = {
        **report_head("real stages on this machine's device (device: auto) vs their committed "
                      "CPU results", "twirls.bench.gpu_stages", args.argv),
        "rule": f"agrees: |difference| <= max({AGREE_SE:g} standard errors, "
                f"{AGREE_POINTS:g} points)",
        "machine": machine_info(), "stages": [], "out_of_time": []}
    todo = list(args.stage)
    previous = read_json(args.out) if args.skip_done and args.out.exists() else None
    if previous:  # an earlier call's stages that ran (ok, on a GPU) are kept, not run again
        kept = [{**s, "gpu": stage_gpu(previous, s)} for s in previous.get("stages", [])
                if s.get("stage") in todo and s.get("status") == "ok"
                and s.get("device") == "cuda"]
        report["stages"] = kept
        report["kept_from"] = {"started_utc": previous.get("started_utc"),
                               "gpu": (previous.get("machine") or {}).get("gpu"),
                               "stages": [s["stage"] for s in kept]}
        todo = [t for t in todo if t not in report["kept_from"]["stages"]]
    work = Path(tempfile.mkdtemp(prefix="twirls-gpu-stages-"))
    try:
        make_workspace(REPO, work)
        write_all(work, read_all(REPO))  # the real params
        env = child_env(REPO)
        for stage in todo:
            left = args.deadline - (time.perf_counter() - started)
            if left < MIN_STAGE_SECONDS:
                report["out_of_time"].append(stage)
                continue
            record = run_stage(stage, raw, work, env,
                               timeout=None if math.isinf(left) else left)
            record["gpu"] = report["machine"].get("gpu")
            report["stages"].append(record)
            write_json(args.out, report)
            print(f"{stage}: {record['status']} on {record.get('device', '?')}, "
                  f"{record['wall_seconds']:.0f} s"
                  + (f", {record['difference_points']:+.2f} points vs committed "
                     f"(SE {record['standard_error_points']:.2f})"
                     if "difference_points" in record else ""), flush=True)
    finally:
        stop_current()
        shutil.rmtree(work, ignore_errors=True)
    report["all_agree"] = bool(report["stages"]) and not report["out_of_time"] and all(
        s.get("agrees") for s in report["stages"])
    report["wall_seconds"] = round(time.perf_counter() - started, 1)
    write_json(args.out, report)
    return report


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m twirls.bench.gpu_stages",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stage", action="append", default=[],
                        help="<group>@<name> of a train stage, repeatable, in priority order "
                             "(default: STAGES)")
    parser.add_argument("--raw", type=Path, default=REPO / "data" / "raw",
                        help="the fetched datasets (dvc repro fetch@...)")
    parser.add_argument("--deadline", type=float, default=math.inf,
                        help="seconds for all stages: none starts or runs past it")
    parser.add_argument("--skip-done", action="store_true",
                        help="keep the stages that an existing --out records as run on a GPU "
                             "(status ok) and run the others (a second call on a borrowed "
                             "machine)")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.stage = args.stage or list(STAGES)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = run(args)
    return 0 if report["all_agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
