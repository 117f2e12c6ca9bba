"""Seconds per seed of the seeds of one configuration: batched (:mod:`twirls.train.batched`)
against today's path (:func:`twirls.train.loop.run_seeds`, one run per seed in the stages'
worker processes), written to ``reports/benchmarks/batched-seeds.json``.

``python -m twirls.bench.batched_seeds [--configs cora-gcn ...] [--seeds 1 10 100]
[--batch 10] [--device cpu] [--out reports/benchmarks/batched-seeds.json]``

* The configurations are ``params/table2.yaml`` entries, ``table4-twirls:<dataset>`` (Table
  4's TWIRLS, with ``params.yaml``'s attention, on the attack stage's graph in ``--attacked``),
  ``table8:<S>:<alpha>`` (the point of Table 8's grid that fills its cell, the curve
  ``TWIRLS-base`` of ``params/table8.yaml``; ``table8:<curve>:<S>:<alpha>``, another curve's) or
  ``figure2:<model>`` (the curve of ``params/figure2.yaml`` with that model and no grid:
  ``figure2:twirls-closed-form``, the closed form eq. 2), trained as their stage trains them
  (:func:`twirls.train.experiment.run_inputs`: the same features, model builder, training
  config and split; one torch thread and flushed denormals, as ``threads: 1``); both paths use
  ``jobs`` worker processes as the stages do (``jobs: auto``, one per core,
  :func:`twirls.train.parallel.resolve_jobs`): today's path one run per seed, the batched one
  one batch of ``--batch`` seeds per run.
* ``--device cuda`` (the GPU session's ``batched`` step): both paths on the GPU, one process
  each (``jobs`` is 1 on CUDA, as in the stages): today's path one seed after the other, the
  batched one batches of ``--batch`` seeds (0: all seeds in one batch).
* Where today's path would take longer than ``--max-today-s`` at a seed count, its seconds per
  seed there are those measured at the largest count below it that ran in full
  (``"extrapolated_from": seeds``; at full occupancy of the workers the seconds per seed do not
  depend on the count), as are its accuracies.
* Every record carries ``reference_s`` (:func:`twirls.bench.calibrate.reference_seconds`, the
  machine's speed just before) and the load average at its start and end: the machine may be
  shared, and a timing taken under load is slower for both paths (``"load"``).
* ``--row-operator``: the batched path with ``BatchConfig(row_operator=True)`` (TWIRLS-base's
  training forward on the training nodes alone, through its dense row operator); such records
  say ``"row_operator": true`` and sit beside those without; so do records of another
  ``--batch`` (a record replaces the one of the same configuration, seed count, row operator,
  batch and device: :func:`record_key`).
* ``--skip-done``: the records that ``--out`` already has of this device (the same
  configuration, seed count, row operator and batch) are kept, not timed again: a second call on
  a borrowed GPU finishes what the first had no time for. A kept measurement of today's path
  still stands in for the larger counts above ``--max-today-s``.
* ``--profile``: where the batched path spends its time, the top operators of a few epochs of
  one batch under ``torch.profiler``, and the milliseconds a seed spends in an epoch's training
  step and in its evaluation forward (``epoch_ms_per_seed``, :func:`epoch_parts`), both stored
  with the largest seed count's record.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from twirls.bench.calibrate import reference_seconds
from twirls.bench.pipeline import head_commit, machine
from twirls.config.entries import sweep_entry, table4_entry, train_entry
from twirls.data.graph import GraphData
from twirls.data.registry import load_dataset
from twirls.files import write_json
from twirls.params import read_all
from twirls.stages.attacked import attacked_graph, with_attention
from twirls.train.batched import BatchConfig, Masks, run_seeds_batched, train_batch
from twirls.train.batched.components import epoch_reads
from twirls.train.batched.trainer import (
    batch_scores,
    eval_rows_of,
    make_optimizer,
    stacked_model,
    train_step,
)
from twirls.train.cpu import configure_cpu
from twirls.train.device import pick_device
from twirls.train.experiment import run_inputs
from twirls.train.loop import SeedsResult, run_seeds
from twirls.train.parallel import available_cores, resolve_jobs

CONFIGS = ["cora-twirls-base-k2", "citeseer-twirls-base-k2", "table4-twirls:nettack-cora",
           "cora-gcn", "cora-appnp", "table8:16:0.5", "table8:64:0.1"]
ATTACKED = "table4-twirls:"  # a configuration on an attacked graph: ATTACKED + dataset
TABLE8 = "table8:"  # a point of Table 8's grid: TABLE8 + "<steps>:<alpha>"
FIGURE2 = "figure2:"  # a curve of Figure 2 without a grid: FIGURE2 + its model


def device_name(device: torch.device) -> str:
    """``cpu``, or the GPU's name (``cuda: NVIDIA H100 80GB HBM3``)."""
    return "cpu" if device.type == "cpu" else f"cuda: {torch.cuda.get_device_name(device)}"


def load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def scores(result: SeedsResult, seconds: float) -> dict[str, Any]:
    tests = [r.test for r in result.runs]
    return {"seconds": round(seconds, 2), "seconds_per_seed": round(seconds / len(tests), 4),
            "test_mean": round(statistics.fmean(tests), 4),
            "test_std": round(statistics.pstdev(tests), 4), "runs": len(tests)}


def profile_batch(inp: Any, data: Any, split: Any, batch: int, epochs: int,
                  row_operator: bool = False) -> list[dict]:
    """The top operators (share of self CPU time) of ``epochs`` epochs of one batch."""
    from torch.profiler import profile

    cfg = replace(inp.cfg, epochs=epochs)
    with profile() as prof:
        train_batch(inp.build, inp.ops, inp.x, data.labels, split, cfg, list(range(batch)),
                    row_operator=row_operator)
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in rows)
    return [{"op": e.key, "self_share": round(e.self_cpu_time_total / total, 3),
             "calls_per_epoch": round(e.count / epochs, 1)} for e in rows[:15]]


def epoch_steps(inp: Any, data: Any, split: Any, batch: int, row_operator: bool = False,
                components: bool = False) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """One batch of ``batch`` seeds of the run ``inp`` describes, set up as
    :func:`~twirls.train.batched.train_batch` sets it up, and the two calls of its epoch: the
    training step (forward with dropout, backward, optimizer step;
    :func:`~twirls.train.batched.trainer.train_step`) and the evaluation forward that scores
    every node (:func:`~twirls.train.batched.trainer.batch_scores`); with ``components``, each
    on the components that hold the nodes it reads (:func:`epoch_reads`)."""
    seeds = list(range(batch))
    net = stacked_model(inp.build, seeds, inp.ops.device)
    draws = Masks(seeds, "fast", inp.ops.device, inp.ops.dtype)
    optimizer = make_optimizer(net, inp.cfg)
    trains, scores = epoch_reads(inp.ops, inp.x, data.labels, split, components)
    train_labels = data.labels.index_select(0, split.train)  # gathered once, as train_batch does
    rows = eval_rows_of(net, scores.split, row_operator)  # as train_batch

    def train() -> Any:
        return train_step(net, trains.ops, trains.x, trains.labels, trains.split, draws,
                          optimizer, row_operator=row_operator, train_labels=train_labels)

    def evaluate() -> Any:
        return batch_scores(net, scores.ops, scores.x, scores.labels, scores.split, rows)

    return train, evaluate


def epoch_parts(inp: Any, data: Any, split: Any, batch: int, epochs: int,
                row_operator: bool = False, components: bool = False) -> dict[str, float]:
    """Milliseconds a seed spends in the two parts of a batched epoch (:func:`epoch_steps`), one
    batch of ``batch`` seeds for ``epochs`` epochs (after one of warm-up), each timed around its
    own calls within the same epochs."""
    train, evaluate = epoch_steps(inp, data, split, batch, row_operator, components)
    spent = {"train_step": 0.0, "eval": 0.0}
    for epoch in range(epochs + 1):
        start = time.perf_counter()
        train()
        middle = time.perf_counter()
        evaluate()
        if epoch:  # the first epoch warms up
            spent["train_step"] += middle - start
            spent["eval"] += time.perf_counter() - middle
    return {part: round(1000 * seconds / (epochs * batch), 3) for part, seconds in spent.items()}


def config_inputs(name: str, args: argparse.Namespace, params: dict[str, Any]
                  ) -> tuple[dict[str, Any], GraphData]:
    """The experiment and data of configuration ``name`` (see module doc), as its stage has
    them; ``params``: the repository's (:func:`twirls.params.read_all`)."""
    if name.startswith(ATTACKED):
        dataset = name.removeprefix(ATTACKED)
        exp = with_attention(table4_entry(params["table4"], dataset, "fast", "twirls"),
                             params["attention"])
        return exp, attacked_graph(load_dataset(dataset, args.raw), "fast", args.raw,
                                   args.attacked)
    if name.startswith(TABLE8):
        sweep = params["table8"]
        point = table8_point(name)
        curve = point.pop("curve")
        exp = {**sweep_entry(sweep["curves"][curve], point, sweep["split"]),
               "dataset": sweep["dataset"]}
        return exp, load_dataset(sweep["dataset"], args.raw)
    if name.startswith(FIGURE2):
        sweep = params["figure2"]
        spec = figure2_curves(sweep)[name.removeprefix(FIGURE2)]
        exp = {**sweep_entry(spec, {}, sweep["split"]), "dataset": sweep["dataset"]}
        return exp, load_dataset(sweep["dataset"], args.raw)
    exp = train_entry(params["table2"][name])
    return exp, load_dataset(exp["dataset"], args.raw)


def figure2_curves(sweep: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Figure 2's curves without a grid (one configuration each), by their model."""
    return {spec["model"]: spec for spec in sweep["curves"].values() if not spec.get("grid")}


def table8_point(name: str) -> dict[str, Any]:
    """The grid point of ``table8:<S>:<alpha>`` (the curve ``TWIRLS-base``) or
    ``table8:<curve>:<S>:<alpha>``, with its ``curve``; a ``ValueError`` for another form."""
    parts = name.removeprefix(TABLE8).split(":")
    if len(parts) not in (2, 3):
        raise ValueError(name)
    curve = parts[0] if len(parts) == 3 else "TWIRLS-base"
    return {"curve": curve, "steps": int(parts[-2]), "alpha": float(parts[-1])}


def earlier_records(old: dict[str, Any]) -> list[dict[str, Any]]:
    """The records of an earlier file ``old``, each naming its machine: a record from before
    records did gets the file's commit, CPU, device and torch (one run wrote it all)."""
    records = [dict(r) for r in old.get("records", [])]
    for record in records:
        if "cpu" not in record:
            record.update({key: old.get(key, "unknown")
                           for key in ("commit", "cpu", "cpu_capability", "torch")},
                          device=old.get("device", "cpu"))
    return records


def config_problem(name: str, params: dict[str, Any]) -> str:
    """Why ``name`` is no configuration (see module doc), or ``""``."""
    if name.startswith(ATTACKED):
        known = params["table4"]["datasets"]
        return "" if name.removeprefix(ATTACKED) in known else (
            f"{name!r}: Table 4 has the datasets {', '.join(known)}")
    if name.startswith(TABLE8):
        curves = params["table8"]["curves"]
        grid = curves["TWIRLS-base"]["grid"]
        try:
            point = table8_point(name)
            grid = curves[point["curve"]]["grid"]
            ok = point["steps"] in grid["steps"] and point["alpha"] in grid["alpha"]
        except (ValueError, KeyError):
            ok = False
        return "" if ok else (f"{name!r} is no point of Table 8's grid: table8:<S>:<alpha> "
                              f"(or table8:<curve>:<S>:<alpha>, curves {', '.join(curves)}) "
                              f"with S in {grid['steps']} and alpha in {grid['alpha']}")
    if name.startswith(FIGURE2):
        known = figure2_curves(params["figure2"])
        return "" if name.removeprefix(FIGURE2) in known else (
            f"{name!r}: Figure 2's curves without a grid are "
            + ", ".join(FIGURE2 + model for model in known))
    return "" if name in params["table2"] else (
        f"{name!r} is neither an entry of params/table2.yaml, table4-twirls:<dataset>, "
        "table8:<S>:<alpha> nor figure2:<model>")


def record_key(record: dict[str, Any]) -> tuple[Any, ...]:
    """What a new record replaces: the one of the same configuration, seed count, row operator,
    batch and device."""
    return (record["config"], record["seeds"], record.get("row_operator", False),
            record.get("batch"), record.get("device", "cpu"))


def timed_before(name: str, args: argparse.Namespace, out: dict[str, Any]
                 ) -> dict[int, dict[str, Any]]:
    """``--skip-done``: the records of ``out`` that configuration ``name`` would write again,
    timed on this device (by seed count)."""
    if not args.skip_done:
        return {}
    return {r["seeds"]: r for r in out["records"] if record_key(r) == record_key({
        "config": name, "seeds": r["seeds"], "row_operator": args.row_operator,
        "batch": args.batch, "device": out["device"]})}


def bench_config(name: str, args: argparse.Namespace, jobs: int, out: dict[str, Any],
                 device: torch.device, params: dict[str, Any]) -> None:
    done = timed_before(name, args, out)
    if all(count in done for count in args.seeds):
        print(f"{name}: every seed count is timed in {args.out} already (--skip-done)",
              flush=True)
        return
    exp, data = config_inputs(name, args, params)
    inp = run_inputs(exp, data, device, progress=False)
    split = data.splits[inp.splits[0]]
    batch = BatchConfig(batch=args.batch, row_operator=args.row_operator)
    warm = replace(inp.cfg, epochs=2)  # one-time costs (imports, caches) out of the timings
    run_seeds(inp.build, inp.ops, inp.x, data.labels, split, warm, [0])
    run_seeds_batched(inp.build, inp.ops, inp.x, data.labels, split, warm, [0, 1])
    full_today: dict[str, Any] | None = None  # the last full measurement of today's path
    for count in args.seeds:
        if count in done:  # kept; a full measurement of today's path still extrapolates
            if "extrapolated_from" not in done[count]["today"]:
                full_today = done[count]["today"]
            continue
        seeds = list(range(count))
        record: dict[str, Any] = {"config": name, "dataset": exp["dataset"],
                                  "graph": exp.get("graph", "clean"),
                                  "model": exp["model"], "epochs": inp.cfg.epochs,
                                  "seeds": count, "jobs": jobs, "batch": args.batch,
                                  **({"row_operator": True} if args.row_operator else {}),
                                  "commit": out["commit"], **machine(),
                                  "device": out["device"], "torch": torch.__version__,
                                  "reference_s": reference_seconds(), "load_start": load()}
        estimate = (None if full_today is None else
                    full_today["seconds_per_seed"] * count)
        if estimate is not None and estimate > args.max_today_s:
            record["today"] = {**full_today, "extrapolated_from": full_today["runs"],
                               "estimated_seconds": round(estimate, 1)}
        else:
            start = time.perf_counter()
            res = run_seeds(inp.build, inp.ops, inp.x, data.labels, split, inp.cfg, seeds,
                            jobs=jobs)
            record["today"] = full_today = scores(res, time.perf_counter() - start)
        start = time.perf_counter()
        res = run_seeds_batched(inp.build, inp.ops, inp.x, data.labels, split, inp.cfg, seeds,
                                batch, jobs=jobs)
        record["batched"] = scores(res, time.perf_counter() - start)
        record["speedup"] = round(record["today"]["seconds_per_seed"]
                                  / record["batched"]["seconds_per_seed"], 2)
        if args.profile and count == max(args.seeds) and device.type == "cpu":
            size = min(args.batch or count, count)
            record["batched_profile"] = profile_batch(inp, data, split, size,
                                                      args.profile_epochs, args.row_operator)
            record["epoch_ms_per_seed"] = epoch_parts(inp, data, split, size,
                                                      args.profile_epochs, args.row_operator)
        record["load_end"] = load()
        out["records"] = [r for r in out["records"]
                          if record_key(r) != record_key(record)] + [record]
        write_json(args.out, out)
        print(json.dumps({k: v for k, v in record.items() if k != "batched_profile"}),
              flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=CONFIGS,
                        help="params/table2.yaml entries, table4-twirls:<dataset>, "
                             "table8:<S>:<alpha> or figure2:<model> (default: %(default)s)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 10, 100])
    parser.add_argument("--batch", type=int, default=10,
                        help="seeds per batch of the batched path (0: all in one)")
    parser.add_argument("--max-today-s", type=float, default=180.0,
                        help="extrapolate today's path above this many seconds")
    parser.add_argument("--device", default="cpu",
                        help="cpu, cuda or auto (twirls.train.device.pick_device)")
    parser.add_argument("--row-operator", action="store_true",
                        help="batched: TWIRLS-base's training forward through its row operator")
    parser.add_argument("--skip-done", action="store_true",
                        help="keep the records --out has of this device, time the rest")
    parser.add_argument("--profile", action="store_true", help="on the CPU only")
    parser.add_argument("--profile-epochs", type=int, default=20)
    parser.add_argument("--params", type=Path, default=Path("params"))
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    parser.add_argument("--attacked", type=Path, default=Path("data/attacked"))
    parser.add_argument("--out", type=Path,
                        default=Path("reports/benchmarks/batched-seeds.json"))
    args = parser.parse_args(argv)
    args.batch = args.batch or None
    params = read_all(args.params.parent)
    for name in args.configs:
        if problem := config_problem(name, params):
            parser.error(problem)
    configure_cpu(1)  # params.yaml `threads: 1`, as every stage
    device = pick_device(args.device, who="batched_seeds")
    jobs = resolve_jobs("auto", device)
    old = json.loads(args.out.read_text()) if args.out.is_file() else {}
    out: dict[str, Any] = {
        "description": "seconds per seed (wall time of all seeds / seeds) of one configuration's "
                       "seeds: today's run_seeds (one run per seed, `jobs` worker processes) vs "
                       "the batched trainer (twirls.train.batched, batches of `batch` seeds, "
                       "the batches in `jobs` worker processes); speedup = today / batched",
        "command": "python -m twirls.bench.batched_seeds " + " ".join(sys.argv[1:]
                                                                      if argv is None else argv),
        "commit": head_commit(Path.cwd()), "cores": available_cores(), **machine(),
        "torch": torch.__version__, "threads": 1, "device": device_name(device),
        "machines": "each record names the commit, CPU, device and torch it was timed with "
                    "(the fields above: the last run's); compare speedups, which are measured "
                    "side by side in one record, not seconds across machines",
        "load": "each record's load averages at its start and end (load_start, load_end) and "
                "its reference_s say whether other processes shared the machine: a timing "
                "taken under load is slower for both paths",
        "records": earlier_records(old),
    }
    for name in args.configs:
        bench_config(name, args, jobs, out, device, params)
    return 0


if __name__ == "__main__":
    sys.exit(main())
