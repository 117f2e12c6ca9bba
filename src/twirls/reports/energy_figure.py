"""The energy figure (stage ``energy``): energy per propagation step, with and without attention.

Top: every trace of :func:`twirls.reports.energy_measure.measure` over its value at
``Y⁽⁰⁾ = f``. Bottom (log y): eq. 1 minus its minimum ``ℓ_Y(Y*)`` at the closed form of eq. 2;
the eq. 12 traces minus their lowest value (for ``twirls-middle``: after its attention layer,
where its Lemma 3.2 bound starts). The first ``S/2`` steps, where the single attention layer of
TWIRLS gives no eq. 12 guarantee, are shaded; the title gives Lemma 3.3's step-size bound and the
Jacobi-preconditioned limit. Without data, a figure that says why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twirls.reports.figure_file import save_figure

#: trace name -> its legend label
LABELS = {
    "twirls-base": "TWIRLS-base: eq. 1",
    "irls-every": "IRLS, attention before every step: eq. 12",
    "twirls-middle": "TWIRLS, attention after S/2 steps: eq. 12",
}


def title_for(dataset: str) -> str:
    return (f"Energy per propagation step on {dataset.capitalize()}, with and without attention "
            "(Lemma 3.3)")


def plot_energy(result: Mapping[str, Any], path: Path, title: str, reason: str = "") -> None:
    """Draw ``result`` (the results JSON of the stage) to ``path`` (see the module doc); with a
    ``reason``, a figure that states it instead."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if reason:
        fig, ax = plt.subplots(figsize=(6.5, 2.5))
        ax.text(0.5, 0.5, f"no data:\n{reason[:300]}", ha="center", va="center", wrap=True,
                fontsize=8, transform=ax.transAxes)
        ax.set_axis_off()
        ax.set_title(title, fontsize=10)
    else:
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.5, 7), sharex=True)
        _draw_curves(top, bottom, result)
        top.set_title(title, fontsize=10)
    save_figure(fig, path)


def reference_value(name: str, curve: Mapping[str, Any], result: Mapping[str, Any]) -> float:
    """What the bottom panel subtracts from ``curve``: ``ℓ_Y(Y*)`` (eq. 2) for eq. 1, else the
    lowest value of the trace (after the attention layer for ``twirls-middle``)."""
    if name == "twirls-base":
        return result["closed_form"]["energy"]
    trace = [v for v in curve["trace"][curve.get("attention_after_step", 0):] if v is not None]
    return min(trace)


def curve_label(name: str, c: Mapping[str, Any]) -> str:
    text = (f"{LABELS[name]}\n({'non-increasing' if c['monotone'] else 'increases'}, "
            f"max rel. increase {c['max_relative_increase']:.1e}")
    if "monotone_after_attention" in c:
        text += (f"; after the layer: {c['max_relative_increase_after_attention']:.1e}, "
                 f"never above its value there: {c['never_above_attention_value']}")
    return text + ")"


def _draw_curves(top, bottom, result: Mapping[str, Any]) -> None:
    curves, steps = result["curves"], result["propagation"]["steps"]
    for i, (name, c) in enumerate(curves.items()):
        trace = [math.nan if v is None else v for v in c["trace"]]
        ref = reference_value(name, c, result)
        style = {"color": f"C{i}", "lw": 1.4, "ls": ("-", "--", ":")[i % 3]}
        scale = trace[0] if trace[0] else 1.0  # ℓ(Y⁽⁰⁾) > 0 unless f is constant on edges
        top.plot(range(len(trace)), [v / scale for v in trace], label=curve_label(name, c),
                 **style)
        gaps = [v - ref if v - ref > 0 else math.nan for v in trace]
        bottom.plot(range(len(trace)), gaps, **style)
    if 1 <= steps // 2 < steps:
        for ax in (top, bottom):
            ax.axvspan(0, steps // 2, color="0.92", zorder=0)
            ax.axvline(steps // 2, color="0.5", lw=0.8)
        top.text(steps // 4, 0.6, "TWIRLS (middle): plain eq. 6 steps,\nno eq. 12 guarantee",
                 ha="center", va="center", fontsize=7, color="0.3",
                 transform=top.get_xaxis_transform())
    top.set_ylabel(r"$\ell_Y(Y^{(k)}) \,/\, \ell_Y(Y^{(0)})$")
    handles, labels = top.get_legend_handles_labels()
    top.figure.legend(handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.03))
    bottom.set_yscale("log")
    bottom.set_xlabel("propagation step k")
    bottom.set_ylabel("energy minus its minimum")
    bottom.text(0.01, 0.02, r"eq. 1: minus $\ell_Y(Y^*)$, $Y^* = (I+\lambda L)^{-1} f$ (eq. 2)"
                "\neq. 12: minus the lowest value (middle: after the layer)",
                ha="left", va="bottom", fontsize=7, transform=bottom.transAxes)
    lem, prop = result["lemma33"], result["propagation"]
    bottom.set_title(
        f"α = {lem['alpha']:g}, λ = {prop['lam']:g}; Lemma 3.3 bound ||λBᵀΓB+I||⁻¹ = "
        f"{lem['bound_unweighted']:.2g} (Γ = I), {lem['bound_gamma_max']:.2g} (Γ = I/τ);\n"
        f"Jacobi-preconditioned step descends for α < {lem['jacobi_alpha_limit_unweighted']:.3g}"
        f" (Γ = I), {lem['jacobi_alpha_limit_gamma_max']:.3g} (Γ = I/τ)", fontsize=8)
