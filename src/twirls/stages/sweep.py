"""Stages ``table8``, ``figure2``, ``figure3``, ``chains``: one model over a grid of
hyperparameters, every point in one stage.

The sweep is the group of the same name in ``params.yaml``::

    citeseer-alpha-steps:
      dataset: citeseer
      split: public
      table: citeseer-alpha-steps              # paper table of the cells (or omit: figure only)
      label: "TWIRLS-base[S={steps},alpha={alpha}]"
      curves:                                  # one or more models, each with its grid
        TWIRLS-base:
          model: twirls
          model_cfg: {...}
          train_cfg: {...}
          grid: {steps: [8, 16, 32, 64], alpha: [0.1, 0.25, 0.5, 1.0]}
      figure: {x: steps, title: ...}           # reports/figures/<name>.png (x: grid key)
      seeds: 3
      data_grid: {length: [10, 20]}            # optional: dataset options (the generated
                                               # Chains' length) or `split` (Amazon's label
                                               # ratio), crossed with every curve

Writes ``results/<name>.json`` (cells), ``metrics/<name>.json`` (all points) and
``reports/figures/<name>.png``. A curve without ``grid`` is drawn as a horizontal line (e.g. the
closed-form solution). Grid and data-grid keys together name a point (label, figure axis).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import textwrap
from pathlib import Path
from typing import Any

from twirls.data.registry import DatasetUnavailable, load_dataset
from twirls.reports.figure_file import save_figure
from twirls.reports.results import Cell
from twirls.stages.skeleton import StageOutputs, entry, open_stage
from twirls.train.device import stage_device
from twirls.train.experiment import metric_name, model_needs_dgl, run_experiment

METRIC_LABELS = {"accuracy": "accuracy", "micro_f1": "micro F1", "macro_f1": "macro F1"}


def grid_points(grid: dict[str, list]) -> list[dict[str, Any]]:
    keys = list(grid)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*grid.values())]


def plot(name: str, sweep: dict[str, Any], points: list[dict[str, Any]], out: Path,
         reason: str = "", metric: str = "accuracy") -> None:
    """The score against ``figure.x``: one line per curve and per value of the other grid keys;
    a curve without a grid along ``x`` is a horizontal line. ``figure.panels`` lists metrics to
    draw side by side (default: ``metric`` alone); ``figure.xscale``: ``log2`` (default) or
    ``linear``. Without data, a figure that says why."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig_cfg = sweep.get("figure") or {}
    x = fig_cfg.get("x", "steps")
    panels = list(fig_cfg.get("panels") or [metric])
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.5), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        if reason:
            ax.text(0.5, 0.5, "no data:\n" + textwrap.fill(reason[:240], 60), ha="center",
                    va="center", fontsize=7, transform=ax.transAxes)
        for curve in sweep["curves"]:
            pts = [p for p in points if p["curve"] == curve and panel in p["scores"]]
            if not pts:
                continue
            if not any(x in p["point"] for p in pts):  # no grid along x: a horizontal line
                ax.axhline(pts[0]["scores"][panel][0], ls="--", color="grey", label=curve)
                continue
            others = sorted({tuple((k, v) for k, v in p["point"].items() if k != x)
                             for p in pts})
            for other in others:
                line = sorted((p for p in pts if tuple(
                    (k, v) for k, v in p["point"].items() if k != x) == other),
                    key=lambda p: p["point"][x])
                label = curve + "".join(f", {k}={v}" for k, v in other)
                ax.errorbar([p["point"][x] for p in line],
                            [p["scores"][panel][0] for p in line],
                            yerr=[p["scores"][panel][1] for p in line], marker="o", capsize=2,
                            label=label)
        if fig_cfg.get("xscale", "log2") == "log2":
            ax.set_xscale("log", base=2)
        ax.set_xlabel(fig_cfg.get("xlabel", x))
        label = METRIC_LABELS.get(panel, panel)
        ax.set_ylabel(f"test {label} (%)")
        ax.set_title(fig_cfg.get("title", name) if len(panels) == 1
                     else f"{fig_cfg.get('title', name)}: {label}")
        if points:
            ax.legend(fontsize=7)
    save_figure(fig, out)


@entry
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("group", help="the sweep's params group, e.g. table8")
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    args = parser.parse_args(argv)
    name = args.group
    params = open_stage(name)
    sweep = params[name]
    seeds = int(sweep.get("seeds", params["train"]["seeds"]))
    devices = {curve: stage_device(params["device"],
                                   needs_dgl=model_needs_dgl(spec, f"{name} {curve}"),
                                   who=f"{name} {curve}")
               for curve, spec in sweep["curves"].items()}

    cells: list[Cell] = []
    points: list[dict[str, Any]] = []
    reason = ""
    metric = sweep.get("metric", "accuracy")
    loaded: dict[tuple, Any] = {}
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
                if data is None:
                    if "table" in sweep:
                        cells.append(Cell(sweep["table"], sweep["dataset"], label, metric,
                                          status="no-data", note=reason))
                    continue
                cfg = {**(spec.get("model_cfg") or {}), **model_point}
                exp = {**spec, "model_cfg": cfg, "split": split}
                result = run_experiment(exp, data, seeds, devices[curve])
                mean, std = 100 * result.mean(), 100 * result.std()
                print(f"{name} {curve} {point}: {result}")
                scores = {metric: (mean, std)}
                for extra in result.runs[0].extra:  # e.g. test_macro_f1 -> macro_f1
                    if extra.startswith("test_"):
                        scores[extra[5:]] = (100 * result.mean(extra), 100 * result.std(extra))
                points.append({"curve": curve, "point": point, "mean": mean, "std": std,
                               "runs": len(result.runs), "scores": scores})
                if "table" in sweep:
                    cells.append(Cell(sweep["table"], sweep["dataset"], label, metric, mean,
                                      std, len(result.runs), note=sweep.get("note", "")))
    out = StageOutputs(name)
    out.write_cells(cells)
    out.write_metrics(
               {"status": "ok" if not reason else "no-data",
                **({} if reason else {"device": ", ".join(sorted({str(d) for d in
                                                                  devices.values()}))}),
                "points": {f"{p['curve']} {p['point']}": round(p["mean"], 3) for p in points}})
    plot(name, sweep, points, Path("reports/figures") / f"{name}.png", reason, metric)
    return 0


if __name__ == "__main__":
    sys.exit(main())
