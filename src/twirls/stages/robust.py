"""Stages ``robust@<name>`` / ``robust-attn@<name>``: models on clean and Mettack-perturbed graphs.

The experiment is ``robust.<name>`` (or ``robust_attn.<name>``, whose stages also declare the
global ``attention`` params) in ``params.yaml``::

    nettack-cora-fast-twirls:
      dataset: nettack-cora
      graph: fast          # clean | fast (our Mettack, data/attacked/<dataset>.npz) | prognn
      model: twirls        # a key of twirls.models.MODELS; or instead
      # defense: gcn-svd   # one of twirls.defenses.NAMES (DeepRobust's models, our GNNGuard)
      cells: {attack: TWIRLS}
      model_cfg: {...}     # for robust_attn: `attention` is filled in from params `attention`
      attention: {T: inf}  # optional overrides of the global attention params (T ablation;
                           # T: tau means "T equal to the tau in use")
      train_cfg: {...}     # our models only; defenses use their own (see twirls.defenses)

Graphs and splits: ``clean`` is DeepRobust's nettack LCC with the seed-15 split; ``fast`` is the
attack stage's output with the split it attacked; ``prognn`` is Pro-GNN's published 20%
Meta-Self graph with Pro-GNN's split. Writes ``results/robust/<name>.json`` and
``metrics/robust/<name>.json``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from twirls.attack.io import load_attacked
from twirls.data import nettack
from twirls.data.graph import GraphData, Split, undirected_graph
from twirls.data.registry import DatasetUnavailable, load_dataset
from twirls.params import load_params
from twirls.reports.results import Cell, write_cells
from twirls.train.device import stage_device
from twirls.train.experiment import cells_for, model_needs_dgl, run_experiment
from twirls.train.loop import RunResult, SeedsResult
from twirls.train.outputs import write_json

GRAPHS = ("clean", "fast", "prognn")


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
        raise SystemExit(f"robust: graph must be one of {GRAPHS}, got {graph!r}")
    coo = sp.triu(sp.csr_matrix(adj), k=1).tocoo()
    g = undirected_graph(torch.from_numpy(coo.row.astype(np.int64)),
                         torch.from_numpy(coo.col.astype(np.int64)), data.num_nodes)
    meta = {**data.meta, "adj": sp.csr_matrix(adj), "graph": graph}
    return replace(data, graph=g, splits={"attack": split}, meta=meta)


def run_defense(exp: dict[str, Any], data: GraphData, seeds: int, device: torch.device
                ) -> SeedsResult:
    from twirls.defenses import fit_evaluate

    split = data.splits["attack"]
    runs = []
    for seed in range(seeds):
        res = fit_evaluate(exp["defense"], data.meta["adj"], data.meta["features_sparse"],
                           data.labels.numpy(), split, seed, device=str(device),
                           **(exp.get("model_cfg") or {}))
        runs.append(RunResult(seed=seed, best_epoch=-1, train=float("nan"), val=res.val_acc,
                              test=res.test_acc, seconds=res.seconds))
    return SeedsResult(runs)


def with_attention(exp: dict[str, Any], attention: dict[str, Any]) -> dict[str, Any]:
    """The experiment with ``model_cfg.attention`` = global params + the experiment's overrides."""
    cfg = dict(exp.get("model_cfg") or {})
    att = {**attention, **(exp.get("attention") or {})}
    if att.get("T") == "tau":
        att["T"] = att["tau"]
    cfg["attention"] = att
    return {**exp, "model_cfg": cfg, "split": "attack"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("experiment")
    parser.add_argument("--group", choices=("robust", "robust_attn"), default="robust")
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    parser.add_argument("--attacked", type=Path, default=Path("data/attacked"))
    args = parser.parse_args(argv)
    name, group = args.experiment, args.group
    stage = f"{group.replace('_', '-')}@{name}"
    params = load_params(stage)
    exp = params[group][name]
    torch.set_num_threads(int(params["threads"]))
    seeds = int(exp.get("seeds", params["train"]["seeds"]))
    needs_dgl = "model" in exp and model_needs_dgl(exp, stage)  # defenses are torch-native
    device = stage_device(params["device"], needs_dgl=needs_dgl, who=stage)
    if group == "robust_attn":
        exp = with_attention(exp, params["attention"])
    else:
        exp = {**exp, "split": "attack"}

    result, reason = None, ""
    try:
        data = attacked_graph(load_dataset(exp["dataset"], args.raw), exp["graph"], args.raw,
                              args.attacked)
    except DatasetUnavailable as exc:
        reason = str(exc)
    if not reason:
        if "defense" in exp:
            result = run_defense(exp, data, seeds, device)
        else:
            result = run_experiment(exp, data, seeds, device)
        print(f"{stage}: {result}")
    note = f"graph: {exp['graph']}" + (f"; {exp['note']}" if exp.get("note") else "")
    cells: list[Cell] = cells_for({**exp, "note": note}, "accuracy", result, reason)
    write_cells(Path("results/robust") / f"{name}.json", cells)
    summary = {"status": "no-data", "reason": reason} if result is None else {
        "status": "ok", "device": str(device), "graph": exp["graph"], **result.summary()}
    write_json(Path("metrics/robust") / f"{name}.json", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
