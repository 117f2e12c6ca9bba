"""No legend hides data (issue: the legend covered IGNN's drop at length 100 on Chains and the
alpha = 0.1, S = 32 point of Table 8). Every sweep of params/ is drawn with points over its whole
grid, at the extremes of the axis; the legend box must not meet any panel."""

from __future__ import annotations

import itertools

import matplotlib
import pytest

from twirls.config.schema import SWEEP_GROUPS
from twirls.params import read_all
from twirls.reports.results import read_paper
from twirls.reports.sweep_figure import draw_sweep
from twirls.reports.sweep_points import paper_points

from fixtures import REPO

matplotlib.use("Agg")


def grid(spec: dict) -> list[dict]:
    keys = list(spec)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*spec.values())]


def corner_points(sweep: dict) -> list[dict]:
    """A point for every curve x grid value, at 0 %, 100 % and in between, with error bars."""
    panels = (sweep.get("figure") or {}).get("panels") or ["accuracy"]
    out = []
    for i, (curve, spec) in enumerate(sweep["curves"].items()):
        for j, point in enumerate(grid({**(sweep.get("data_grid") or {}),
                                        **(spec.get("grid") or {})})):
            mean = (0.0, 100.0, 50.0)[(i + j) % 3]
            out.append({"curve": curve, "point": point,
                        "scores": {p: (mean, 5.0) for p in panels}})
    return out


@pytest.mark.parametrize("name", SWEEP_GROUPS)
def test_the_legend_of_every_sweep_figure_stays_off_the_panels(name):
    sweep = read_all(REPO)[name]
    fig = draw_sweep(name, sweep, corner_points(sweep), metric="accuracy",
                     paper=paper_points(name, sweep, read_paper()))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert legends, f"{name}: no legend drawn"
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(renderer)), (
                f"{name}: the legend overlaps a panel")


def test_a_legend_inside_the_axes_would_be_caught():
    """The check above fails where it should: matplotlib's default placement is inside."""
    sweep = read_all(REPO)["chains"]
    fig = draw_sweep("chains", sweep, corner_points(sweep))
    ax = fig.axes[0]
    ax.legend(*ax.get_legend_handles_labels())  # back to the default, inside the axes
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert ax.get_legend().get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
