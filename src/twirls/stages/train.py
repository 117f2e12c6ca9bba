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
import sys
from pathlib import Path

import torch

from twirls.data.registry import DatasetUnavailable, load_dataset
from twirls.params import load_params
from twirls.reports.results import write_cells
from twirls.train.device import stage_device
from twirls.train.experiment import cells_for, metric_name, model_needs_dgl, run_experiment
from twirls.train.outputs import write_history, write_json


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
    device = stage_device(params["device"], needs_dgl=model_needs_dgl(exp, name),
                          who=f"train@{name}")
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
