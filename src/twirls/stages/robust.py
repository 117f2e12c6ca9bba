"""Stages of the attacked-graph groups: ``table4@<dataset>-<graph>-<defense>``,
``table4-twirls-base@<dataset>``, ``table4-twirls@<dataset>`` (Table 4's grid), ``table9@<dataset>``
and ``variants-attacked@<name>``.

Table 4's cells are composed from its group (:func:`twirls.config.entries.table4_entry`):
``--dataset --graph --model <defense>`` picks one cell of the grid; ``--dataset --model twirls``
(or ``twirls-base``) runs TWIRLS on every graph of ``table4.graphs``. ``table9 --dataset`` runs
every graph x truncation T of Table 9 (:func:`twirls.config.entries.table9_entry`), with the
attention pinned in its own group. ``variants-attacked`` entries name their dataset and graph and
reuse ``table4.twirls.<dataset>`` (:func:`twirls.config.entries.attacked_twirls_entry`), with
the attention their entry pins. ``--model twirls`` reads the global ``attention`` params.

A stage with several entries runs all their seeds in one pool of ``jobs`` worker processes (one
stage per dataset rather than per graph: fewer process starts and fuller rounds), each run the
same seeded computation as alone, so its score is bit-identical.

Graphs and splits: ``clean`` is DeepRobust's nettack LCC with the seed-15 split; ``fast`` is the
attack stage's output with the split it attacked; ``prognn`` is Pro-GNN's published 20%
Meta-Self graph with Pro-GNN's split. Writes ``results/<stage group>/<name>.json`` and
``metrics/<stage group>/<name>.json`` (a stage of several entries: one summary per entry, keyed by
graph, or by ``<graph>-T<truncation>`` for Table 9).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from twirls.attack.io import load_attacked
from twirls.config.entries import TWIRLS_ROWS, attacked_twirls_entry, table4_entry, table9_entry
from twirls.config.schema import GRAPHS
from twirls.data import nettack
from twirls.data.graph import GraphData, Split, undirected_graph
from twirls.data.registry import DatasetUnavailable, load_dataset
from twirls.stages.skeleton import StageOutputs, entry, open_stage
from twirls.train.device import stage_device
from twirls.train.experiment import cells_for, check_model, experiment_runs
from twirls.train.loop import RunResult, SeedsResult
from twirls.train.parallel import resolve_jobs, run_all


def attacked_graph(data: GraphData, graph: str, raw: Path, attacked: Path) -> GraphData:
    """``data`` with its adjacency and split replaced by the chosen (perturbed) graph's."""
    if graph == "clean":
        adj, split = data.meta["adj"], data.splits["seed15"]
    elif graph == "fast":
        g = load_attacked(attacked / f"{data.name}.npz")
        adj = g.adj
        split = Split(*(torch.as_tensor(i, dtype=torch.long)
                        for i in (g.idx_train, g.idx_val, g.idx_test)))
    elif graph == "prognn":
        adj, split = nettack.load_prognn_meta_adj(raw / data.name, data.name), data.splits["prognn"]
    else:
        raise ValueError(f"graph must be one of {GRAPHS}, got {graph!r}")
    coo = sp.triu(sp.csr_matrix(adj), k=1).tocoo()
    g = undirected_graph(torch.from_numpy(coo.row.astype(np.int64)),
                         torch.from_numpy(coo.col.astype(np.int64)), data.num_nodes)
    meta = {**data.meta, "adj": sp.csr_matrix(adj), "graph": graph}
    return replace(data, graph=g, splits={"attack": split}, meta=meta)


def defense_run(exp: dict[str, Any], data: GraphData, seed: int, device: torch.device
                ) -> RunResult:
    """One seeded fit of the defense ``exp["defense"]`` on the attacked graph."""
    from twirls.defenses import fit_evaluate

    res = fit_evaluate(exp["defense"], data.meta["adj"], data.meta["features_sparse"],
                       data.labels.numpy(), data.splits["attack"], seed, device=str(device),
                       **(exp.get("model_cfg") or {}))
    return RunResult(seed=seed, best_epoch=-1, train=float("nan"), val=res.val_acc,
                     test=res.test_acc, seconds=res.seconds)


def with_attention(exp: dict[str, Any], attention: dict[str, Any]) -> dict[str, Any]:
    """The experiment with ``model_cfg.attention`` = ``attention`` + the experiment's overrides
    (``T: tau`` means T equal to the tau in use)."""
    cfg = dict(exp.get("model_cfg") or {})
    att = {**attention, **(exp.get("attention") or {})}
    if att.get("T") == "tau":
        att["T"] = att["tau"]
    cfg["attention"] = att
    return {**exp, "model_cfg": cfg, "split": "attack"}


def stage_entries(args: argparse.Namespace
                  ) -> tuple[str, StageOutputs, dict[str, dict[str, Any]], dict[str, Any]]:
    """The stage's name, its outputs, its complete entries (by metrics key; ``""`` for a stage
    of one entry) and its declared params."""
    if args.group == "table4":
        if not (args.dataset and args.model):
            raise ValueError("table4 needs --dataset and --model (and --graph for a defense)")
        twirls = args.model in TWIRLS_ROWS
        if not twirls and not args.graph:
            raise ValueError(f"table4 --model {args.model} needs --graph")
        group = f"table4-{args.model}" if twirls else "table4"
        name = args.dataset if twirls else f"{args.dataset}-{args.graph}-{args.model}"
        stage = f"{group}@{name}"
        params = open_stage(stage)
        t4 = params["table4"]
        graphs = t4["graphs"] if twirls else [args.graph]
        entries = {(g if twirls else ""): table4_entry(t4, args.dataset, g, args.model)
                   for g in graphs}
        if "attention" in params:
            entries = {k: with_attention(e, params["attention"]) for k, e in entries.items()}
    elif args.group == "table9":
        if not args.dataset:
            raise ValueError("table9 needs --dataset")
        stage = f"table9@{args.dataset}"
        params = open_stage(stage)
        t9 = params["table9"]
        entries = {
            f"{g}-T{t}" + ("" if v == "paper" else f"-{v}"): with_attention(
                table9_entry(t9, params["table4"], args.dataset, g, t, v), t9["attention"])
            for v in t9["variants"] for g in t9["graphs"] for t in t9["truncations"]}
        name = args.dataset
    else:
        if not args.entry:
            raise ValueError(f"{args.group} needs --entry <name>")
        stage = f"{args.group}@{args.entry}"
        params = open_stage(stage)
        entry = attacked_twirls_entry(params[args.group][args.entry], params["table4"])
        entries = {"": with_attention(entry, params.get("attention") or {})
                   if "attention" in entry else {**entry, "split": "attack"}}  # TWIRLS-base
        name = args.entry
    group = stage.split("@")[0]
    return stage, StageOutputs(group, name), {k: {**e, "split": "attack"}
                                              for k, e in entries.items()}, params


def entry_runs(exp: dict[str, Any], data: GraphData, device: torch.device
               ) -> list[Callable[[], RunResult]]:
    """The seeded runs of one entry: a defense's fits or TWIRLS's training runs."""
    seeds = int(exp["seeds"])
    if "defense" in exp:
        return [partial(defense_run, exp, data, seed, device) for seed in range(seeds)]
    return experiment_runs(exp, data, seeds, device, progress=False)


@entry
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("group", choices=("table4", "table9", "variants-attacked"))
    parser.add_argument("--dataset")
    parser.add_argument("--graph")
    parser.add_argument("--model")
    parser.add_argument("--entry")
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    parser.add_argument("--attacked", type=Path, default=Path("data/attacked"))
    args = parser.parse_args(argv)
    stage, out, entries, params = stage_entries(args)
    for e in entries.values():
        if "model" in e:
            check_model(e, stage)
    device = stage_device(params["device"], who=stage)
    jobs = resolve_jobs(params["jobs"], device)

    graphs: dict[str, GraphData | str] = {}  # graph -> data, or the reason it is unavailable
    planned: dict[str, list[Callable[[], RunResult]]] = {}
    for key, exp in entries.items():
        if exp["graph"] not in graphs:
            try:
                graphs[exp["graph"]] = attacked_graph(load_dataset(exp["dataset"], args.raw),
                                                      exp["graph"], args.raw, args.attacked)
            except DatasetUnavailable as exc:
                graphs[exp["graph"]] = str(exc)
        data = graphs[exp["graph"]]
        planned[key] = [] if isinstance(data, str) else entry_runs(exp, data, device)
    results = iter(run_all([r for runs in planned.values() for r in runs], jobs, desc="runs",
                           progress=True))

    cells, metrics = [], {}
    for key, exp in entries.items():
        data = graphs[exp["graph"]]
        reason = data if isinstance(data, str) else ""
        result = None if reason else SeedsResult([next(results) for _ in planned[key]])
        if result is not None:
            print(f"{stage} {key}: {result}".replace(" :", ":"))
        note = f"graph: {exp['graph']}" + (f"; {exp['note']}" if exp.get("note") else "")
        cells += cells_for({**exp, "note": note}, "accuracy", result, reason)
        metrics[key] = {"status": "no-data", "reason": reason} if result is None else {
            "status": "ok", "device": str(device), "graph": exp["graph"], **result.summary()}
    out.write_cells(cells)
    out.write_metrics(metrics[""] if list(metrics) == [""] else metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
