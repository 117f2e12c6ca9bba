"""Stages ``<group>@<name>`` of the train-kind groups (``table2``, ``table3``, ``table10``,
``variants``): one model on one dataset, every seed (and split) in one stage.

The entry is ``<group>.<name>`` in ``params.yaml`` (completed by
:func:`twirls.config.entries.train_entry` with its dataset's defaults)::

    cora-twirls-base-k2:
      dataset: cora
      model: twirls            # a key of twirls.models.MODELS
      cells: {table2: TWIRLS-base}   # paper table -> model label of our cell
      model_cfg: {steps: 16, lam: 1.0, alpha: 1.0, ...}
      train_cfg: {epochs: 500, lr: 0.1, weight_decay: 5.0e-4}
      seeds: 10                # optional; default: the dataset's, else train.seeds
      batch: 1                 # optional; default: train.batch (seeds a batched model trains)

Writes ``results/<group>/<name>.csv`` (one row per run: :mod:`twirls.cells`),
``results/<group>/<name>.json`` (cells for the report, per-run scores in ``extra``),
``metrics/<group>/<name>.json`` (for ``dvc metrics``) and ``plots/<group>/<name>.csv`` (the first
run's per-epoch history, for ``dvc plots``); with ``--save-model`` (Table 2's stages), also
``models/<group>/<name>.pt``, the first run's trained model (:mod:`twirls.train.checkpoint`;
weights kept for TWIRLS), which the ``energy`` stage studies. If the dataset could never be
fetched, the cells are ``no-data`` with the fetch's reason; a damaged dataset fails the stage
instead. Before the runs start, one epoch is timed (:mod:`twirls.stages.budget`): a stage whose
estimate on its device exceeds ``budget_hours`` runs nothing, says so, and its cells are
``no-data`` with the estimate.
"""

from __future__ import annotations

import sys

from twirls.config.entries import seeds_and_batch, train_entry
from twirls.data.registry import DatasetUnavailable, load_dataset
from twirls.stages.budget import OverBudget, check_budget
from twirls.stages.skeleton import StageOutputs, entry, open_stage, raw_out_parser
from twirls.train.checkpoint import keeps_weights
from twirls.train.device import stage_device
from twirls.train.experiment import (
    cells_for,
    check_model,
    metric_name,
    rows_for,
    run_experiment,
    selected_splits,
)
from twirls.train.parallel import resolve_jobs


@entry
def main(argv: list[str] | None = None) -> int:
    parser = raw_out_parser(__doc__)
    parser.add_argument("group")
    parser.add_argument("name")
    parser.add_argument("--save-model", action="store_true",
                        help="also write models/<group>/<name>.pt, the first run's model")
    args = parser.parse_args(argv)
    out = StageOutputs(args.group, args.name, args.out)
    stage = out.stage
    params = open_stage(stage)
    exp = train_entry(params[args.group][args.name])
    seeds, batch = seeds_and_batch(exp, params["train"])
    check_model(exp, stage)
    device = stage_device(params["device"], who=stage)
    jobs = resolve_jobs(params["jobs"], device)

    result, reason = None, ""
    try:
        data = load_dataset(exp["dataset"], args.raw)
        metric = metric_name(data)
    except DatasetUnavailable as exc:
        reason, metric = str(exc), exp.get("metric", "accuracy")
    if not reason:
        try:
            result = run_experiment(
                exp, data, seeds, device, jobs=jobs,
                keep_first_model=args.save_model and keeps_weights(exp),
                before=lambda runs: check_budget(stage, runs, jobs, device,
                                                 params["budget_hours"]),
                batch=batch,
                row_operator=bool(params["train"].get("row_operator", False)),
                components=bool(params["train"].get("components", False)))
            print(f"{stage}: {result}")
        except OverBudget as exc:
            reason = str(exc)
            print(f"{stage}: {reason}", file=sys.stderr)
    rows = [] if result is None else rows_for(exp, metric, result,
                                              selected_splits(exp, data), str(device))
    out.write(cells_for(exp, metric, result, reason),
              {"status": "no-data", "reason": reason} if result is None else {
                  "status": "ok", "device": str(device), **result.summary()}, rows)
    out.write_history([] if result is None else result.runs[0].history)
    if args.save_model:
        out.write_model(exp, result, str(device), reason)
    return 0


if __name__ == "__main__":
    sys.exit(main())
