"""Training on the attacked graphs (Table 4, Table 9, the attacked variant comparison): the
graph of a cell (``clean``, ``fast`` or ``prognn``), a defense's seeded fits or TWIRLS' runs, and
every entry of a stage in one pool of worker processes.

Graphs and splits: ``clean`` is DeepRobust's nettack LCC with the seed-15 split; ``fast`` is the
attack stage's output with the split it attacked; ``prognn`` is Pro-GNN's published 20%
Meta-Self graph with Pro-GNN's split. A stage with several entries runs all their seeds in one pool
of ``jobs`` worker processes (one stage per dataset rather than per graph: fewer process starts
and fuller rounds), each run the same seeded computation as alone, so its score is bit-identical.
With ``batch`` above 1 (``table4.batch``, ``table9.batch``: set next to the seeds), TWIRLS' seeds
train that many at a time as one batched model (:mod:`twirls.train.batched`: the same protocol,
other dropout masks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from twirls.attack.io import load_attacked
from twirls.cells import Cell
from twirls.config.schema import GRAPHS
from twirls.data import nettack
from twirls.data.graph import GraphData, Split, undirected_graph
from twirls.data.registry import DatasetUnavailable, load_dataset
from twirls.train.device import stage_device
from twirls.train.experiment import cells_for, check_model, flat_results, rows_for, seed_runs
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


def entry_runs(exp: dict[str, Any], data: GraphData, device: torch.device, batch: int = 1
               ) -> list[Callable[[], RunResult | list[RunResult]]]:
    """The seeded runs of one entry: a defense's fits or TWIRLS's training runs; with
    ``batch`` above 1, TWIRLS's seeds ``batch`` at a time as one batched model
    (:func:`twirls.train.experiment.seed_runs`), each returning its seeds' results."""
    seeds = int(exp["seeds"])
    if "defense" in exp:
        return [partial(defense_run, exp, data, seed, device) for seed in range(seeds)]
    return seed_runs(exp, data, seeds, device, batch, progress=False)


def run_attacked(stage: str, entries: dict[str, dict[str, Any]], params: dict[str, Any],
                 raw: Path, attacked: Path, batch: int = 1
                 ) -> tuple[list[Cell], dict[str, Any], list[dict[str, Any]]]:
    """Every seed of ``entries`` (by metrics key; ``""`` for a stage of one entry) in one pool;
    their cells, the stage's metrics (one entry's summary, else one per key) and their runs'
    rows (:mod:`twirls.cells`). ``batch``: TWIRLS' seeds per batched model
    (:func:`entry_runs`; the stage's ``table4.batch`` or ``table9.batch``)."""
    entries = {k: {**e, "split": "attack"} for k, e in entries.items()}
    for e in entries.values():
        if "model" in e:
            check_model(e, stage)
    device = stage_device(params["device"], who=stage)
    jobs = resolve_jobs(params["jobs"], device)

    graphs: dict[str, GraphData | str] = {}  # graph -> data, or the reason it is unavailable
    planned: dict[str, list[Callable[[], RunResult | list[RunResult]]]] = {}
    for key, exp in entries.items():
        if exp["graph"] not in graphs:
            try:
                graphs[exp["graph"]] = attacked_graph(load_dataset(exp["dataset"], raw),
                                                      exp["graph"], raw, attacked)
            except DatasetUnavailable as exc:
                graphs[exp["graph"]] = str(exc)
        data = graphs[exp["graph"]]
        planned[key] = [] if isinstance(data, str) else entry_runs(exp, data, device, batch)
    results = iter(flat_results(run_all([r for runs in planned.values() for r in runs], jobs,
                                        desc="runs", progress=True)))

    cells, metrics, rows = [], {}, []
    for key, exp in entries.items():
        data = graphs[exp["graph"]]
        reason = data if isinstance(data, str) else ""
        runs = int(exp["seeds"])
        result = None if reason else SeedsResult([next(results) for _ in range(runs)])
        if result is not None:
            print(f"{stage} {key}: {result}".replace(" :", ":"))
        note = f"graph: {exp['graph']}" + (f"; {exp['note']}" if exp.get("note") else "")
        cells += cells_for({**exp, "note": note}, "accuracy", result, reason)
        rows += rows_for(exp, "accuracy", result, ["attack"], str(device))
        metrics[key] = {"status": "no-data", "reason": reason} if result is None else {
            "status": "ok", "device": str(device), "graph": exp["graph"], **result.summary()}
    return cells, metrics[""] if list(metrics) == [""] else metrics, rows
