"""Batched training on the connected components an epoch reads (``components: true``) against
the whole graph: milliseconds a seed spends in an epoch, and whether the two give the same
experiment; written to ``reports/benchmarks/components.json``.

``python -m twirls.bench.components [--configs citeseer-gcnii ...] [--epochs 20] [--rounds 3]
[--agree citeseer-appnp ...] [--agree-seeds 30] [--out reports/benchmarks/components.json]``

* Configurations are named as :mod:`twirls.bench.batched_seeds` names them (a
  ``params/table2.yaml`` entry, ``table8:<curve>:<S>:<alpha>``, ...), set up as their stage
  sets them up, with the stage's ``row_operator`` (``train.row_operator``; Table 8's and
  Figure 2's own) and one batch of ``--batch`` seeds (the stages' 5).
* Timing: :func:`twirls.bench.batched_seeds.epoch_parts`, the training step and the evaluation
  forward of ``--epochs`` epochs, on the whole graph and on its components in turn, ``--rounds``
  times (the machine may be shared: the best round of each counts); one torch thread, as the
  stages. Each record has the rows a training step and an evaluation read either way.
* ``--agree``: every seed of ``--agree-seeds`` trained in full both ways (batches of
  ``--batch``, the stages' worker processes): the masks differ, so the runs differ; their mean
  test accuracies should differ by less than two standard errors of the difference.
* The record carries ``reference_s`` (:func:`twirls.bench.calibrate.reference_seconds`) and
  the commit.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from twirls.bench.batched_seeds import (
    ATTACKED,
    FIGURE2,
    TABLE8,
    config_inputs,
    config_problem,
    epoch_parts,
)
from twirls.bench.calibrate import reference_seconds
from twirls.bench.pipeline import bench_header
from twirls.files import write_json
from twirls.params import read_all
from twirls.train.batched import BatchConfig, run_seeds_batched
from twirls.train.batched.components import epoch_reads
from twirls.train.cpu import configure_cpu
from twirls.train.experiment import run_inputs
from twirls.train.parallel import available_cores, resolve_jobs

CONFIGS = ["citeseer-gcnii", "citeseer-dagnn", "citeseer-jknet", "citeseer-appnp",
           "citeseer-gcn", "citeseer-twirls-base-k2", "table8:paper-k2:16:0.5",
           "table8:reference-k2:16:0.5", "table8:paper-k1:16:0.5", "table8:16:0.5",
           "cora-gcnii", "cora-twirls-base-k2"]
AGREE = ["citeseer-appnp", "table8:paper-k2:16:0.5"]


def row_operator_of(name: str, params: dict[str, Any]) -> bool:
    """The ``row_operator`` the configuration's stage trains with."""
    if name.startswith(TABLE8):
        return bool(params["table8"].get("row_operator", False))
    if name.startswith(FIGURE2):
        return bool(params["figure2"].get("row_operator", False))
    if name.startswith(ATTACKED):
        return bool(params["table4"].get("row_operator", False))
    return bool(params["train"].get("row_operator", False))


def timing(name: str, args: argparse.Namespace, params: dict[str, Any]) -> dict[str, Any]:
    """One configuration's epoch on the whole graph and on its components."""
    exp, data = config_inputs(name, args, params)
    inp = run_inputs(exp, data, torch.device("cpu"), progress=False)
    split = data.splits[inp.splits[0]]
    rows_op = row_operator_of(name, params)
    trains, scores = epoch_reads(inp.ops, inp.x, data.labels, split, True)
    rounds: dict[str, list[dict[str, float]]] = {"whole": [], "components": []}
    for _ in range(args.rounds):
        for way in rounds:
            rounds[way].append(epoch_parts(inp, data, split, args.batch, args.epochs, rows_op,
                                           components=way == "components"))
    best = {way: min(parts, key=lambda p: sum(p.values())) for way, parts in rounds.items()}
    return {"config": name, "dataset": exp["dataset"], "model": exp["model"],
            "row_operator": rows_op, "batch": args.batch, "epochs": args.epochs,
            "rows": {"nodes": inp.ops.n, "train_step": trains.ops.n, "eval": scores.ops.n},
            "ms_per_seed_epoch": best, "rounds": rounds,
            "speedup": round(sum(best["whole"].values()) / sum(best["components"].values()), 2)}


def agreement(name: str, args: argparse.Namespace, params: dict[str, Any], jobs: int
              ) -> dict[str, Any]:
    """``--agree-seeds`` seeds of one configuration trained in full both ways."""
    exp, data = config_inputs(name, args, params)
    inp = run_inputs(exp, data, torch.device("cpu"), progress=False)
    split = data.splits[inp.splits[0]]
    rows_op = row_operator_of(name, params)
    cfg = replace(inp.cfg, progress=False)
    tests = {}
    for way in ("whole", "components"):
        batch = BatchConfig(batch=args.batch, row_operator=rows_op,
                            components=way == "components")
        res = run_seeds_batched(inp.build, inp.ops, inp.x, data.labels, split, cfg,
                                list(range(args.agree_seeds)), batch, jobs=jobs)
        tests[way] = [100 * r.test for r in res.runs]
    se = math.sqrt(sum(statistics.variance(t) / len(t) for t in tests.values()))
    diff = statistics.fmean(tests["components"]) - statistics.fmean(tests["whole"])
    return {"config": name, "seeds": args.agree_seeds, "batch": args.batch,
            "row_operator": rows_op,
            **{f"test_{way}": {"mean": round(statistics.fmean(t), 2),
                               "std": round(statistics.stdev(t), 2)} for way, t in tests.items()},
            "difference_points": round(diff, 2), "standard_error_points": round(se, 2),
            "within_two_standard_errors": abs(diff) < 2 * se}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="*", default=CONFIGS)
    parser.add_argument("--epochs", type=int, default=20, help="epochs a round times")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=5, help="seeds a batch (the stages' 5)")
    parser.add_argument("--agree", nargs="*", default=AGREE,
                        help="configurations trained in full both ways")
    parser.add_argument("--agree-seeds", type=int, default=30)
    parser.add_argument("--params", type=Path, default=Path("params"))
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    parser.add_argument("--attacked", type=Path, default=Path("data/attacked"))
    parser.add_argument("--out", type=Path, default=Path("reports/benchmarks/components.json"))
    args = parser.parse_args(argv)
    params = read_all(args.params.parent)
    for name in [*args.configs, *args.agree]:
        if problem := config_problem(name, params):
            parser.error(problem)
    if min(args.epochs, args.rounds, args.batch) < 1 or args.agree_seeds < 2:
        parser.error("--epochs, --rounds and --batch must be at least 1, --agree-seeds 2")
    configure_cpu(1)  # params.yaml `threads: 1`, as every stage
    jobs = resolve_jobs("auto", torch.device("cpu"))
    out = bench_header("components", argv, (
        "batched training on the connected components an epoch reads (components: true) vs "
        "the whole graph: ms a seed spends in an epoch's training step and evaluation (the "
        "best of --rounds rounds), and the mean test accuracy of --agree-seeds seeds trained "
        "in full both ways"), threads=1)
    out["reference_s"] = reference_seconds()
    out["cores"] = available_cores()
    out["timings"] = []
    for name in args.configs:
        out["timings"].append(record := timing(name, args, params))
        print(f"{name}: {record['ms_per_seed_epoch']} -> {record['speedup']}x", flush=True)
        write_json(args.out, out)
    out["agreement"] = []
    for name in args.agree:
        out["agreement"].append(record := agreement(name, args, params, jobs))
        print(record, flush=True)
        write_json(args.out, out)
    out["reference_s_after"] = reference_seconds()
    write_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
