"""Stages ``train@<experiment>``: one model on one dataset, all seeds (and splits) in one stage.

The experiment is ``experiments.<name>`` in ``params.yaml``::

    cora-twirls-base:
      dataset: cora
      split: public            # a split name, or "all" (e.g. the ten Geom-GCN splits)
      model: twirls            # a key of twirls.models.MODELS
      cells: {standard-benchmarks: TWIRLS-base}   # paper table -> model label of our cell
      model_cfg: {steps: 16, lam: 1.0, alpha: 1.0, ...}
      train_cfg: {epochs: 500, lr: 0.1, weight_decay: 5.0e-4}
      seeds: 10                # optional; default train.seeds

Writes ``results/train/<name>.json`` (cells for the report, per-run scores in ``extra``),
``metrics/train/<name>.json`` (for ``dvc metrics``) and ``plots/train/<name>.csv`` (the first
run's per-epoch history, for ``dvc plots``). If the dataset could not be fetched, the cells are
``no-data`` with the fetch's reason and the metrics say so.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path
from typing import Any

import torch

from twirls.data.graph import GraphData
from twirls.data.registry import DatasetUnavailable, load_dataset
from twirls.models import MODELS, GraphOps, build_model
from twirls.params import load_params
from twirls.reports.results import Cell, write_cells
from twirls.train.device import pick_device
from twirls.train.loop import SeedsResult, TrainConfig, run_seeds

SPARSE_BELOW = 0.1  # feature density under which models that accept it get sparse CSR features


def metric_name(data: GraphData) -> str:
    return "micro_f1" if data.labels.dim() == 2 else "accuracy"


def prepare_features(features: torch.Tensor, exp: dict[str, Any]) -> torch.Tensor:
    """Row-normalised features (``feature_norm: row``, the default, as DGL's loaders give the
    authors' code), or the raw ones (``feature_norm: none``)."""
    mode = exp.get("feature_norm", "row")
    if mode == "none":
        return features
    if mode != "row":
        raise SystemExit(f"feature_norm must be 'row' or 'none', got {mode!r}")
    return features / features.sum(1, keepdim=True).clamp(min=1e-12)


def run_experiment(exp: dict[str, Any], data: GraphData, seeds: int, device: torch.device,
                   ) -> SeedsResult:
    """Every seed on every selected split of ``data``; one :class:`SeedsResult` over all runs."""
    splits = list(data.splits) if exp.get("split", "all") == "all" else [exp["split"]]
    missing = [s for s in splits if s not in data.splits]
    if missing:
        raise SystemExit(f"experiment on {data.name}: no split {missing[0]!r}; "
                         f"the dataset has {', '.join(data.splits)}")
    ops = GraphOps.from_dgl(data.graph, device=device)
    x = None if data.features is None else prepare_features(data.features, exp).to(device)
    if x is not None and getattr(MODELS[exp["model"]], "accepts_sparse", False):
        if (x != 0).float().mean() < SPARSE_BELOW:
            x = x.to_sparse_csr()  # bag-of-words: the first layer costs O(nnz), ~10x faster
    in_dim = 0 if data.features is None else data.num_features
    cfg = TrainConfig.from_config(exp.get("train_cfg"))
    runs = []
    for i, split in enumerate(splits):
        def build() -> torch.nn.Module:
            return build_model(exp["model"], exp.get("model_cfg"), in_dim, data.num_classes,
                               num_nodes=data.num_nodes)
        seed_list = [1000 * i + s for s in range(seeds)]
        runs += run_seeds(build, ops, x, data.labels, data.splits[split], cfg, seed_list).runs
    return SeedsResult(runs)


def cells_for(exp: dict[str, Any], metric: str, result: SeedsResult | None,
              reason: str = "") -> list[Cell]:
    out = []
    for table, label in exp["cells"].items():
        if result is None:
            out.append(Cell(table, exp["dataset"], label, metric, status="no-data", note=reason))
            continue
        scores = [100 * r.test for r in result.runs]
        out.append(Cell(table, exp["dataset"], label, metric, mean=100 * result.mean(),
                        std=100 * result.std(), runs=len(result.runs),
                        note=exp.get("note", ""),
                        extra={"test_per_run": scores,
                               "best_epoch_per_run": [r.best_epoch for r in result.runs],
                               "seconds_per_run": round(result.summary()["seconds_mean"], 3),
                               "variant": (exp.get("model_cfg") or {}).get("variant", "paper")}))
    return out


def write_json(path: Path, obj: dict[str, Any]) -> None:
    """Metrics JSON for ``dvc metrics`` (NaN entries, e.g. no train score, are left out)."""
    obj = {k: v for k, v in obj.items() if not (isinstance(v, float) and math.isnan(v))}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def write_history(path: Path, history: list[dict[str, float]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "w", newline="") as fh:
        fields = list(history[0]) if history else ["epoch"]
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(history)
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("experiment")
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args(argv)
    name = args.experiment
    params = load_params(f"train@{name}")
    exp = params["experiments"][name]
    seeds = int(exp.get("seeds", params["train"]["seeds"]))
    device = pick_device(params["device"])
    torch.set_num_threads(int(params["threads"]))

    result, reason = None, ""
    try:
        data = load_dataset(exp["dataset"], args.raw)
        metric = metric_name(data)
    except DatasetUnavailable as exc:
        reason, metric = str(exc), exp.get("metric", "accuracy")
    if not reason:
        result = run_experiment(exp, data, seeds, device)
        print(f"{name}: {result}")
    write_cells(args.out / "results" / "train" / f"{name}.json",
                cells_for(exp, metric, result, reason))
    summary = {"status": "no-data", "reason": reason} if result is None else {
        "status": "ok", "device": str(device), **result.summary()}
    write_json(args.out / "metrics" / "train" / f"{name}.json", summary)
    write_history(args.out / "plots" / "train" / f"{name}.csv",
                  [] if result is None else result.runs[0].history)
    return 0


if __name__ == "__main__":
    sys.exit(main())
