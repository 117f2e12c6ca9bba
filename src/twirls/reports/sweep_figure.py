"""A sweep's figure: the score against one grid key, ours with error bars, the paper's values
overlaid where the paper gives them (hollow markers, dashed; a stated level as a dotted line).

The x axis is linear or log (``figure.xscale``: ``log2``, ``log`` or ``linear``; by default log
when the grid spans a factor of 8 or more) and its ticks are the grid's own values, so a log axis
still shows lengths 10/20/50/100. Scores are in percent, on a 0-100 axis when there is no data
(the placeholder then states the whole reason, wrapped).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from twirls.reports.figure_file import save_figure

METRIC_LABELS = {"accuracy": "accuracy", "micro_f1": "micro F1", "macro_f1": "macro F1"}


def _others(point: dict[str, Any], x: str) -> tuple:
    return tuple((k, v) for k, v in point.items() if k != x)


def _scores(p: dict[str, Any], panel: str) -> tuple[float, float] | None:
    if "scores" in p:
        return tuple(p["scores"][panel]) if panel in p["scores"] else None
    return (p["mean"], p.get("std", 0.0)) if "mean" in p else None


def _xscale(fig_cfg: dict[str, Any], xs: list[float]) -> str:
    scale = fig_cfg.get("xscale")
    if scale is None:
        pos = [v for v in xs if v > 0]
        scale = "log2" if pos and len(pos) == len(xs) and max(pos) / min(pos) >= 8 else "linear"
    if scale not in ("log2", "log", "linear"):
        raise ValueError(f"figure.xscale must be log2, log or linear, got {scale!r}")
    return scale


def plot_sweep(name: str, sweep: dict[str, Any], points: list[dict[str, Any]], out: Path,
               reason: str = "", metric: str = "accuracy",
               paper: list[dict[str, Any]] | None = None) -> None:
    """:func:`draw_sweep`, written to ``out``."""
    save_figure(draw_sweep(name, sweep, points, reason, metric, paper), out)


def draw_sweep(name: str, sweep: dict[str, Any], points: list[dict[str, Any]],
               reason: str = "", metric: str = "accuracy",
               paper: list[dict[str, Any]] | None = None):
    """The figure of ``points`` (``{"curve", "point": {grid key: value}, "scores": {metric: (mean,
    std)}}``) against ``figure.x``: one line per curve and per value of the other grid keys; a
    curve without a grid along x is a horizontal line. ``figure.panels`` lists metrics drawn
    side by side (default: ``metric``); ``figure.curves`` the curves drawn (default: all).
    ``paper`` (see :mod:`twirls.reports.sweep_points`):
    the paper's values, drawn in the colour of the matching line. Without data (``reason``),
    a figure that says why. One legend for all panels, outside the axes on the right, so it
    hides no point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator

    fig_cfg = sweep.get("figure") or {}
    x = fig_cfg.get("x", "steps")
    panels = list(fig_cfg.get("panels") or [metric])
    paper = paper or []
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.5), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        label = METRIC_LABELS.get(panel, panel)
        colors: dict[tuple, str] = {}
        xs: set = set()
        if reason:
            ax.text(0.5, 0.5, "no data:\n" + textwrap.fill(reason, 70), ha="center",
                    va="center", fontsize=6, wrap=True, transform=ax.transAxes)
            ax.set_ylim(0, 100)
        for curve in fig_cfg.get("curves") or sweep["curves"]:
            pts = [p for p in points if p["curve"] == curve and _scores(p, panel)]
            if not pts:
                continue
            if not any(x in p["point"] for p in pts):  # no grid along x: a horizontal line
                ax.axhline(_scores(pts[0], panel)[0], ls="--", color="grey", label=curve)
                continue
            for other in sorted({_others(p["point"], x) for p in pts}):
                line = sorted((p for p in pts if _others(p["point"], x) == other),
                              key=lambda p: p["point"][x])
                xs |= {p["point"][x] for p in line}
                handle = ax.errorbar([p["point"][x] for p in line],
                                     [_scores(p, panel)[0] for p in line],
                                     yerr=[_scores(p, panel)[1] for p in line], marker="o",
                                     capsize=2, label=curve + "".join(f", {k}={v}"
                                                                      for k, v in other))
                colors[(curve, other)] = handle.lines[0].get_color()
        if panel == metric:
            _overlay_paper(ax, paper, x, colors)
            xs |= {p["point"][x] for p in paper if x in p["point"]}
        if xs:
            ticks = sorted(xs)
            scale = _xscale(fig_cfg, ticks)
            if scale != "linear":
                ax.set_xscale("log", base=2 if scale == "log2" else 10)
            ax.xaxis.set_major_locator(FixedLocator(ticks))
            ax.set_xticklabels([f"{t:g}" for t in ticks])
            ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel(fig_cfg.get("xlabel", x))
        ax.set_ylabel(f"test {label} (%)")
        ax.set_title(fig_cfg.get("title", name) if len(panels) == 1
                     else f"{fig_cfg.get('title', name)}: {label}")
    legend: dict[str, Any] = {}
    for ax in axes[0]:
        for handle, text in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(text, handle)
    if legend:  # ours first, then the paper's
        legend = dict(sorted(legend.items(), key=lambda kv: kv[0].startswith("paper: ")))
        axes[0][-1].legend(list(legend.values()), list(legend), fontsize=7, loc="upper left",
                           bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return fig


def _overlay_paper(ax, paper: list[dict[str, Any]], x: str, colors: dict[tuple, str]) -> None:
    """The paper's values: a dashed line of hollow squares per matching line of ours, a dotted
    horizontal line for a level stated for every x."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for p in paper:
        key = (p["curve"], _others(p["point"], x)) if x in p["point"] else (p["curve"], None)
        groups.setdefault(key, []).append(p)
    for (curve, other), pts in groups.items():
        if other is None:
            for p in pts:
                ax.axhline(p["mean"], ls=":", color="black", label=f"paper: {curve}")
            continue
        pts.sort(key=lambda p: p["point"][x])
        color = colors.get((curve, other), "black")
        ax.plot([p["point"][x] for p in pts], [p["mean"] for p in pts], ls="--", marker="s",
                mfc="none", color=color, alpha=0.8,
                label="paper: " + curve + "".join(f", {k}={v}" for k, v in other))
