"""Stages of the attacked-graph groups: ``table4@<dataset>-<graph>-<defense>``,
``table4-twirls-base@<dataset>-<graph>``, ``table4-twirls@<dataset>-<graph>`` (Table 4's grid),
``table9@<name>`` and ``variants-attacked@<name>``.

Table 4's cells are composed from its group (:func:`twirls.config.entries.table4_entry`):
``--dataset --graph --model`` pick a cell of the grid; ``table9`` / ``variants-attacked`` entries
name their dataset and graph and reuse ``table4.twirls.<dataset>``
(:func:`twirls.config.entries.attacked_twirls_entry`). TWIRLS with attention (``--model twirls``,
``table9``, ``variants-attacked``) reads the global ``attention`` params plus the entry's
overrides (``T: tau`` means T equal to the tau in use).

Graphs and splits: ``clean`` is DeepRobust's nettack LCC with the seed-15 split; ``fast`` is the
attack stage's output with the split it attacked; ``prognn`` is Pro-GNN's published 20%
Meta-Self graph with Pro-GNN's split. Writes ``results/<stage group>/<name>.json`` and
``metrics/<stage group>/<name>.json``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from twirls.attack.io import load_attacked
from twirls.config.entries import TWIRLS_ROWS, attacked_twirls_entry, table4_entry
from twirls.config.schema import GRAPHS
from twirls.data import nettack
from twirls.data.graph import GraphData, Split, undirected_graph
from twirls.data.registry import DatasetUnavailable, load_dataset
from twirls.stages.skeleton import StageOutputs, entry, open_stage
from twirls.train.device import stage_device
from twirls.train.experiment import cells_for, model_needs_dgl, run_experiment
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


def run_defense(exp: dict[str, Any], data: GraphData, seeds: int, device: torch.device,
                jobs: int = 1) -> SeedsResult:
    """Seeds ``0 … seeds-1`` of the defense, in ``jobs`` worker processes."""
    runs = [partial(defense_run, exp, data, seed, device) for seed in range(seeds)]
    return SeedsResult(run_all(runs, jobs, desc="seeds", progress=True))


def with_attention(exp: dict[str, Any], attention: dict[str, Any]) -> dict[str, Any]:
    """The experiment with ``model_cfg.attention`` = global params + the experiment's overrides."""
    cfg = dict(exp.get("model_cfg") or {})
    att = {**attention, **(exp.get("attention") or {})}
    if att.get("T") == "tau":
        att["T"] = att["tau"]
    cfg["attention"] = att
    return {**exp, "model_cfg": cfg, "split": "attack"}


def stage_entry(args: argparse.Namespace
                ) -> tuple[str, StageOutputs, dict[str, Any], dict[str, Any]]:
    """The stage's name, its outputs, its complete entry and its declared params."""
    if args.group == "table4":
        if not (args.dataset and args.graph and args.model):
            raise ValueError("table4 needs --dataset, --graph and --model")
        group = "table4" if args.model not in TWIRLS_ROWS else f"table4-{args.model}"
        name = f"{args.dataset}-{args.graph}"
        if group == "table4":
            name += f"-{args.model}"
        stage = f"{group}@{name}"
        params = open_stage(stage)
        exp = table4_entry(params["table4"], args.dataset, args.graph, args.model)
    else:
        if not args.entry:
            raise ValueError(f"{args.group} needs --entry <name>")
        group, name = args.group, args.entry
        stage = f"{group}@{name}"
        params = open_stage(stage)
        exp = attacked_twirls_entry(params[group][name], params["table4"])
    if "attention" in params:
        exp = with_attention(exp, params["attention"])
    return stage, StageOutputs(group, name), {**exp, "split": "attack"}, params


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
    stage, out, exp, params = stage_entry(args)
    seeds = int(exp["seeds"])
    needs_dgl = "model" in exp and model_needs_dgl(exp, stage)  # defenses are torch-native
    device = stage_device(params["device"], needs_dgl=needs_dgl, who=stage)
    jobs = resolve_jobs(params["jobs"], device)

    result, reason = None, ""
    try:
        data = attacked_graph(load_dataset(exp["dataset"], args.raw), exp["graph"], args.raw,
                              args.attacked)
    except DatasetUnavailable as exc:
        reason = str(exc)
    if not reason:
        if "defense" in exp:
            result = run_defense(exp, data, seeds, device, jobs)
        else:
            result = run_experiment(exp, data, seeds, device, jobs=jobs)
        print(f"{stage}: {result}")
    note = f"graph: {exp['graph']}" + (f"; {exp['note']}" if exp.get("note") else "")
    out.write_cells(cells_for({**exp, "note": note}, "accuracy", result, reason))
    out.write_metrics({"status": "no-data", "reason": reason} if result is None else {
        "status": "ok", "device": str(device), "graph": exp["graph"], **result.summary()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
