"""Stages ``table8``, ``figure2``, ``figure3``, ``chains``: one model over a grid of
hyperparameters, every point in one stage.

The sweep is the group of the same name in ``params.yaml``::

    table8:
      dataset: citeseer
      split: public
      table: table8              # paper table of the cells (or omit: figure only)
      label: "TWIRLS-base[S={steps},alpha={alpha}]"
      curves:                                  # one or more models, each with its grid
        TWIRLS-base:
          model: twirls                        # (a curve may name its own `table`
                                               # and `seeds`)
          model_cfg: {...}
          train_cfg: {...}
          grid: {steps: [8, 16, 32, 64], alpha: [0.1, 0.25, 0.5, 1.0]}
      figure: {x: steps, title: ...}           # reports/figures/<name>.png (x: grid key)
      seeds: 3                                 # runs per point (a curve's own `seeds`
                                               # overrides it)
      batch: 1                                 # optional: seeds trained as one batched model
      row_operator: false                      # optional: batched TWIRLS-base's, SGC's and
                                               # the closed form's training forward on the
                                               # training nodes
      components: false                        # optional: batched training on the connected
                                               # components that hold the nodes it reads
      data_grid: {length: [10, 20]}            # optional: dataset options (the generated
                                               # Chains' length) or `split` (Amazon's label
                                               # ratio), crossed with every curve

      extras: {<table>: <curve>}               # optional: curves run by stages of their own

Stage ``<name>`` runs the curves it declares in ``dvc.yaml`` and writes ``results/<name>.csv``
(every run, one row each: :mod:`twirls.cells`; the figure's data), ``results/<name>.json`` (cells),
``metrics/<name>.json`` (all points) and ``reports/figures/<name>.png``. A curve named in ``extras``
(an extra table, e.g. Table 8 with the paper's equations) runs in stage ``<name>-extra@<table>``
instead (``--extra <table>``), which writes ``results/<name>-extra/<table>.{csv,json}`` and
``metrics/<name>-extra/<table>.json`` and no figure: one curve's seeds or hyperparameters then rerun
that curve alone. A curve without ``grid`` is drawn as a horizontal line (e.g. the closed-form
solution). Grid and data-grid keys together name a point (label, figure axis). Before the runs
start, one epoch of each configuration is timed (:mod:`twirls.stages.budget`): over ``budget_hours``
the stage runs nothing and its cells and figure say why. With ``batch`` above 1, each point's seeds
train that many at a time as one batched model where the model allows it
(:func:`twirls.train.experiment.seed_runs`; the same protocol, other dropout masks); ``row_operator:
true`` computes TWIRLS-base's training forward on the training nodes alone by one dense product,
SGC's from those nodes' features, the closed form's from those rows of its inverse (and its
evaluation forward from the scored nodes' rows) (:class:`twirls.train.batched.BatchConfig`; other
rounding); ``components: true`` trains on the connected components that hold the training nodes
and evaluates on those that hold a scored node (:mod:`twirls.train.batched.components`; other
masks).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

from twirls.cells import Cell, run_rows, selector
from twirls.config.entries import curve_seeds, sweep_entry
from twirls.config.schema import check_extra
from twirls.data.registry import DatasetUnavailable, load_dataset
from twirls.reports.results import read_paper
from twirls.reports.sweep_figure import plot_sweep
from twirls.reports.sweep_points import paper_points
from twirls.stages.budget import OverBudget, check_budget
from twirls.stages.skeleton import StageOutputs, entry, open_stage
from twirls.train.device import stage_device
from twirls.train.experiment import (
    check_model,
    experiment_runs,
    flat_results,
    metric_name,
    row_identity,
    seed_runs,
)
from twirls.train.loop import SeedsResult
from twirls.train.parallel import resolve_jobs, run_all


def grid_points(grid: dict[str, list]) -> list[dict[str, Any]]:
    keys = list(grid)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*grid.values())]


def point_means(points: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``dvc metrics`` view of the points: per curve, ``"steps=8 alpha=0.1"`` (``"all"`` for a
    curve without a grid) -> its mean, 3 decimals; the runs are in ``results/<sweep>.csv``."""
    out: dict[str, dict[str, float]] = {}
    for p in points:
        key = " ".join(f"{k}={v}" for k, v in p["point"].items()) or "all"
        out.setdefault(p["curve"], {})[key] = round(p["mean"], 3)
    return out


@entry
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("group", help="the sweep's params group, e.g. table8")
    parser.add_argument("--extra", metavar="TABLE",
                        help="run the curve of the sweep's `extras` that fills TABLE")
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    args = parser.parse_args(argv)
    name = args.group
    outputs = StageOutputs.extra(name, args.extra) if args.extra else StageOutputs(name)
    params = open_stage(outputs.stage)
    sweep = params[name]
    if args.extra:  # the stage declares that curve alone
        for curve, spec in sweep["curves"].items():
            check_extra(name, args.extra, curve, spec)
    seeds, batch = int(sweep["seeds"]), int(sweep.get("batch", 1))
    row_operator = bool(sweep.get("row_operator", False))
    components = bool(sweep.get("components", False))
    for curve, spec in sweep["curves"].items():
        check_model(spec, f"{name} {curve}")
    devices = {curve: stage_device(params["device"], who=f"{name} {curve}")
               for curve in sweep["curves"]}
    jobs = min(resolve_jobs(params["jobs"], d) for d in devices.values())

    cells: list[Cell] = []
    points: list[dict[str, Any]] = []
    reason = ""
    metric = sweep.get("metric", "accuracy")
    loaded: dict[tuple, Any] = {}
    planned: list[tuple[str, dict[str, Any], str, str | None, int]] = []  # + table, runs
    probes: list[Any] = []  # every (point, seed) run of the sweep, in order, for the budget
    runs: list[Any] = []  # the same runs for the pool: with train.batch > 1, batches of seeds
    row_keys: list[tuple[dict[str, Any], str]] = []  # per planned point: its entry and split
    for data_point in grid_points(sweep.get("data_grid") or {}):
        options = {k: v for k, v in data_point.items() if k != "split"}
        split = str(data_point.get("split", sweep.get("split", "all")))
        key = tuple(sorted(options.items()))
        if key not in loaded:
            try:
                loaded[key] = load_dataset(sweep["dataset"], args.raw, options)
            except DatasetUnavailable as exc:
                loaded[key], reason = None, str(exc)
            except ValueError as exc:  # an option the dataset does not take
                raise ValueError(f"{name}.data_grid: {exc}") from None
        data = loaded[key]
        if data is not None:
            metric = metric_name(data)
        for curve, spec in sweep["curves"].items():
            for model_point in grid_points(spec.get("grid") or {}):
                point = {**data_point, **model_point}
                label = sweep.get("label", "{curve}").format(curve=curve, **point)
                table = spec.get("table", sweep.get("table"))
                if data is None:
                    if table:
                        cells.append(Cell(table, sweep["dataset"], label, metric,
                                          status="no-data", note=reason))
                    continue
                exp = sweep_entry(spec, model_point, split)
                count = curve_seeds(spec, seeds)
                point_runs = experiment_runs(exp, data, count, devices[curve], progress=False)
                planned.append((curve, point, label, table, len(point_runs)))
                row_keys.append((exp, split))
                probes += point_runs
                runs += (point_runs if batch <= 1 else
                         seed_runs(exp, data, count, devices[curve], batch, progress=False,
                                   row_operator=row_operator, components=components))
    if runs:
        try:  # one epoch of each curve timed (one seed a run): over budget_hours, nothing runs
            check_budget(name, probes, jobs, next(iter(devices.values())),
                         params["budget_hours"])
        except OverBudget as exc:
            reason = str(exc)
            print(f"{name}: {reason}", file=sys.stderr)
            cells += [Cell(table, sweep["dataset"], label, metric, status="no-data", note=reason)
                      for _, _, label, table, _ in planned if table]
            planned, runs, row_keys = [], [], []
    done = flat_results(run_all(runs, jobs, desc=f"{name}: runs", progress=True))
    rows: list[dict[str, Any]] = []
    for (curve, point, label, table, count), (exp, split) in zip(planned, row_keys, strict=True):
        result, done = SeedsResult(done[:count]), done[count:]
        identity, _ = row_identity({**exp, "dataset": sweep["dataset"]}, table or name, curve)
        grid = {k: v for k, v in point.items() if k != "split"}
        rows += run_rows(result, identity=identity, metric=metric, splits=[split],
                         device=str(devices[curve]), grid=grid)
        mean, std = 100 * result.mean(), 100 * result.std()
        print(f"{name} {curve} {point}: {result}")
        scores = {metric: (mean, std)}
        for extra in result.runs[0].extra:  # e.g. test_macro_f1 -> macro_f1
            if extra.startswith("test_"):
                scores[extra[5:]] = (100 * result.mean(extra), 100 * result.std(extra))
        points.append({"curve": curve, "point": point, "mean": mean, "std": std,
                       "runs": len(result.runs), "scores": scores})
        if table:
            cells.append(Cell(table, sweep["dataset"], label, metric, mean,
                              std, len(result.runs), note=sweep.get("note", ""),
                              extra={"grid": point,
                                     "rows": {**selector(identity, grid), "split": split}}))
    outputs.write(cells, {
        "status": "ok" if not reason else "no-data",
        **({"reason": reason} if reason else {"device": ", ".join(
            sorted({str(d) for d in devices.values()}))}),
        "points": point_means(points)}, rows)
    if not args.extra:
        plot_sweep(name, sweep, points, Path("reports/figures") / f"{name}.png", reason, metric,
                   paper=paper_points(name, sweep, read_paper()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
