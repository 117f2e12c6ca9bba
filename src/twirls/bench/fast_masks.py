"""Milliseconds of an epoch of a run trained alone with ``masks: torch`` (``F.dropout``'s
``bernoulli_``) against ``masks: fast`` (the run's own stream, :mod:`twirls.models.masks`),
written to ``reports/benchmarks/fast-masks.json``.

``python -m twirls.bench.fast_masks [--configs table2:cora-gcnii table3:actor-gat ...]
[--epochs 20] [--rounds 2] [--out reports/benchmarks/fast-masks.json]``

A configuration is ``<group>:<entry>`` of a train-kind params file (``params/table2.yaml``,
``params/table3.yaml``, ``params/variants.yaml``), trained as its stage trains it
(:func:`twirls.train.experiment.run_inputs`: the same features, model and training config, on
its first split; one torch thread and flushed denormals, as ``threads: 1``). For each mode, in
alternating rounds in one process, one run's training step (forward with dropout, backward,
Adam step) and evaluation forward are timed apart over ``--epochs`` epochs after 3 of warm-up;
a record keeps each mode's median over the rounds and ``speedup`` (torch / fast, epoch total).
Every record carries ``reference_s`` (:func:`twirls.bench.calibrate.reference_seconds`) and the
load average at its start and end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from twirls.bench.batched_seeds import load
from twirls.bench.calibrate import reference_seconds
from twirls.bench.pipeline import bench_header
from twirls.config.entries import train_entry
from twirls.data.registry import load_dataset
from twirls.files import write_json
from twirls.models.masks import drawing_from
from twirls.params import read_all
from twirls.train.cpu import configure_cpu
from twirls.train.experiment import run_inputs
from twirls.train.loop import _loss, evaluate_tensor, run_masks, run_optimizer, set_seed

CONFIGS = ["table2:cora-gcnii", "table2:citeseer-gcnii", "table3:actor-gcn", "table3:actor-gat",
           "table3:actor-graphsage", "table3:actor-h2gcn", "table3:actor-geom-gcn",
           "table3:wisconsin-geom-gcn", "table3:actor-mlp"]
GROUPS = ("table2", "table3", "table10", "variants")  # the train-kind groups
WARMUP = 3


def config_problem(name: str, params: dict[str, Any]) -> str:
    """Why ``name`` is no ``<group>:<entry>`` of a train-kind group (``""``: it is one)."""
    group, _, entry = name.partition(":")
    if group not in GROUPS or entry not in (params.get(group) or {}):
        return (f"fast_masks: {name!r} is no <group>:<entry> of the train-kind params "
                f"({', '.join(GROUPS)}), e.g. table3:actor-gat")
    return ""


def epoch_ms(inp: Any, data: Any, split: Any, masks: str, epochs: int) -> dict[str, float]:
    """Milliseconds of one run's training step and evaluation forward, each averaged over
    ``epochs`` epochs after :data:`WARMUP`, with the entry's model and ``masks``."""
    set_seed(0)
    model = inp.build()
    cfg = replace(inp.cfg, masks=masks)
    optimizer = run_optimizer(model, cfg)  # as train_run's
    spent = {"train_step": 0.0, "eval": 0.0}
    with drawing_from(run_masks(cfg, 0, inp.ops)):
        for epoch in range(WARMUP + epochs):
            start = time.perf_counter()
            model.train()
            optimizer.zero_grad()
            loss = _loss(model(inp.ops, inp.x)[split.train], data.labels[split.train])
            loss.backward()
            optimizer.step()
            middle = time.perf_counter()
            evaluate_tensor(model, inp.ops, inp.x, data.labels, split)
            if epoch >= WARMUP:
                spent["train_step"] += middle - start
                spent["eval"] += time.perf_counter() - middle
    return {part: 1000 * seconds / epochs for part, seconds in spent.items()}


def bench_config(name: str, args: argparse.Namespace, params: dict[str, Any]) -> dict[str, Any]:
    group, _, entry = name.partition(":")
    exp = train_entry(params[group][entry])
    data = load_dataset(exp["dataset"], args.raw, exp.get("options"))
    inp = run_inputs(exp, data, torch.device("cpu"), progress=False)
    split = data.splits[inp.splits[0]]
    record: dict[str, Any] = {"config": name, "epochs": args.epochs, "rounds": args.rounds,
                              "reference_s": reference_seconds(), "load_start": load()}
    times: dict[str, list[dict[str, float]]] = {"torch": [], "fast": []}
    for _ in range(args.rounds):
        for masks in times:
            times[masks].append(epoch_ms(inp, data, split, masks, args.epochs))
    for masks, rounds in times.items():
        record[masks] = {part: round(statistics.median(r[part] for r in rounds), 2)
                         for part in ("train_step", "eval")}
        record[masks]["epoch"] = round(sum(record[masks].values()), 2)
    record["speedup"] = round(record["torch"]["epoch"] / record["fast"]["epoch"], 2)
    record["load_end"] = load()
    print(f"{name}: epoch {record['torch']['epoch']} ms (torch masks) -> "
          f"{record['fast']['epoch']} ms (fast), {record['speedup']}x", flush=True)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=CONFIGS,
                        help="<group>:<entry> of params/table2.yaml, table3.yaml, ... "
                             "(default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--params", type=Path, default=Path("params"))
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    parser.add_argument("--out", type=Path, default=Path("reports/benchmarks/fast-masks.json"))
    args = parser.parse_args(argv)
    params = read_all(args.params.parent)
    for name in args.configs:
        if problem := config_problem(name, params):
            parser.error(problem)
    configure_cpu(1)  # params.yaml `threads: 1`, as every stage
    old = json.loads(args.out.read_text()) if args.out.is_file() else {}
    kept = [r for r in old.get("records", []) if r["config"] not in args.configs]
    out = bench_header("fast_masks", argv, (
        "milliseconds of one epoch (training step + evaluation forward) of a run trained alone, "
        "dropout masks from torch's generator (masks: torch) vs the run's own fast stream "
        "(masks: fast); speedup = torch / fast"))
    out["records"] = kept
    for name in args.configs:
        out["records"].append(bench_config(name, args, params))
        write_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
