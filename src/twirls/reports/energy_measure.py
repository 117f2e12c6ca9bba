"""Measuring, for a given ``f = f(X; W)``, that TWIRLS' propagation descends its energies.

:func:`measure` runs ``S`` propagation steps of the paper's equations (``variant: paper``, step
size ``α``, weight ``λ``) from ``Y⁽⁰⁾ = f`` and records at every iterate
(:func:`twirls.models.energy.energy_trace`):

* **TWIRLS-base** (no attention), eq. 6 steps: the energy of eq. 1,
  ``ℓ_Y(Y) = ||Y - f||²_F + λ tr[Yᵀ L Y]`` (eq. 11: ``tr[Yᵀ L Y] = Σ_{i,j}∈E ||y_i - y_j||²``),
  and its minimum ``ℓ_Y(Y*)`` at the closed form of eq. 2, ``Y* = (I + λL)⁻¹ f`` (dense solve);
* **IRLS** (attention placement ``every``): the attention weights of eq. 20 recomputed before
  every eq. 21 step, with a truncated ℓp penalty ``ρ`` (the ``attention`` params); the robust
  energy of eq. 12, ``||Y - f||²_F + λ Σ_{i,j}∈E ρ(||y_i - y_j||²)``. This is the iteration of
  Lemma 3.3, which guarantees that eq. 12 never increases;
* **TWIRLS** (placement ``middle``, as the models run): one attention layer after ``S // 2``
  steps; eq. 12 per step. There is *no* guarantee in the first half (plain eq. 6 steps descend
  eq. 1, not eq. 12). After the attention layer the steps descend the quadratic upper bound of
  Lemma 3.2 that touches eq. 12 at ``Y⁽ˢᐟ²⁾``, so ``ℓ_Y(Y⁽ᵏ⁾; ρ) ≤ ℓ_Y(Y⁽ˢᐟ²⁾; ρ)`` for
  ``k > S/2``, but a single step may still increase eq. 12.

For each trace it records the largest relative increase between consecutive steps
(``max_k (ℓ⁽ᵏ⁺¹⁾ - ℓ⁽ᵏ⁾) / |ℓ⁽ᵏ⁾|``, 0 if none) and whether the trace is non-increasing (that
value ``≤ rtol``, which absorbs float64 rounding once converged). It also records Lemma 3.3's
step-size bound ``α ≤ ||λ Bᵀ Γ B + I||₂⁻¹`` for the un-weighted graph (``Γ = I``) and for
``Γ = I/τ`` (the largest weight the attention gives, so the bound that holds for every
iteration's ``Γ``), and, because eqs. 6/21 are Jacobi-preconditioned, the step size under which
the preconditioned step provably descends: ``2 / λ_max(D̃^-1/2 (I + λ L_Γ) D̃^-1/2)`` (always
``> 1``, which is why the paper's ``α = 1`` descends although it is far above the stated bound).
Use float64 ``ops`` and ``f``: the checks compare energies to ``rtol = 1e-10``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm

from twirls.models.attention import AttentionSpec
from twirls.models.energy import (
    closed_form,
    energy,
    energy_trace,
    jacobi_alpha_limit,
    lemma33_alpha_bound,
)
from twirls.models.graph_ops import GraphOps
from twirls.models.propagation import PropagationSpec, propagate

#: trace name -> attention placement (``None``: TWIRLS-base, whose energy is eq. 1; else eq. 12)
CURVES: dict[str, str | None] = {"twirls-base": None, "irls-every": "every",
                                 "twirls-middle": "middle"}
GUARANTEES = {
    "twirls-base": "eq. 6 is a Jacobi-preconditioned gradient step on eq. 1: it descends for "
                   "alpha < jacobi_alpha_limit_unweighted (> 1)",
    "irls-every": "Lemma 3.3: eq. 20 then eq. 21 before every step never increases eq. 12 "
                  "(alpha <= ||lam B'GB + I||^-1 as stated; with the Jacobi preconditioner any "
                  "alpha below the preconditioned limit, > 1)",
    "twirls-middle": "no guarantee for eq. 12 in the first S//2 steps (plain eq. 6 steps descend "
                     "eq. 1, not eq. 12); after the attention layer eq. 12 stays <= its value at "
                     "the layer (Lemma 3.2 bound), single steps may still increase it",
}


def max_relative_increase(values: Sequence[float]) -> float:
    """``max_k max(0, (v_{k+1} - v_k) / |v_k|)``: 0 for a non-increasing sequence, ``inf`` once
    a value is not finite."""
    worst = 0.0
    for before, after in zip(values[:-1], values[1:], strict=True):
        if not (math.isfinite(before) and math.isfinite(after)):
            return math.inf
        worst = max(worst, (after - before) / max(abs(before), 1e-300))
    return worst


def curve_record(name: str, trace: list[float], rtol: float, steps: int) -> dict[str, Any]:
    """One trace with its checks (see the module doc); ``twirls-middle`` also gets the checks
    of the half after its attention layer (the Lemma 3.2 bound)."""
    rise = max_relative_increase(trace)
    out: dict[str, Any] = {
        "energy": "eq. 1" if CURVES[name] is None else "eq. 12",
        "placement": CURVES[name], "trace": [v if math.isfinite(v) else None for v in trace],
        "initial": trace[0], "final": trace[-1], "minimum": min(trace),
        "max_relative_increase": rise, "monotone": rise <= rtol, "guarantee": GUARANTEES[name]}
    if CURVES[name] == "middle" and 1 <= steps // 2 < steps:
        m = steps // 2
        after = trace[m:]
        out["attention_after_step"] = m
        out["max_relative_increase_after_attention"] = max_relative_increase(after)
        out["monotone_after_attention"] = out["max_relative_increase_after_attention"] <= rtol
        out["max_relative_increase_before_attention"] = max_relative_increase(trace[:m + 1])
        out["never_above_attention_value"] = max(after) <= after[0] * (1 + rtol)
    return out


def measure(ops: GraphOps, f: Tensor, lam: float, alpha: float, steps: int,
            attention: Mapping[str, Any], rtol: float = 1.0e-10) -> dict[str, Any]:
    """Every trace and check of the module doc for ``f`` on ``ops``: ``steps`` = ``S`` steps of
    size ``alpha`` with weight ``lam``; ``attention``: ``{p, tau, T}`` of ``ρ`` (eq. 12)."""
    if not (isinstance(steps, int) and steps >= 1):
        raise ValueError(f"energy: steps must be an integer >= 1, got {steps!r}")
    f = f.to(ops.dtype)
    rho = AttentionSpec.from_config({**attention, "placement": "middle"}).rho
    specs = {name: PropagationSpec(steps, lam, alpha, attention=None if placement is None
                                   else AttentionSpec(rho, placement))
             for name, placement in CURVES.items()}
    tasks: list[tuple[str, Callable[[], Any]]] = [
        (name, lambda s=spec: energy_trace(ops, f, s, None if s.attention is None else rho.rho))
        for name, spec in specs.items()]
    tasks.append(("closed form", lambda: closed_form(ops, f, lam)))
    gamma_max = torch.full((ops.num_edges,), 1.0 / rho.tau, dtype=ops.dtype)
    tasks += [("lemma33 unweighted", lambda: lemma33_alpha_bound(ops, lam, method="dense")),
              ("lemma33 gamma max", lambda: lemma33_alpha_bound(ops, lam, gamma_max,
                                                                method="dense")),
              ("jacobi unweighted", lambda: jacobi_alpha_limit(ops, lam)),
              ("jacobi gamma max", lambda: jacobi_alpha_limit(ops, lam, gamma_max))]
    done, seconds = {}, {}
    for name, task in tqdm(tasks, desc="energy: measure", leave=False, dynamic_ncols=True):
        start = time.perf_counter()
        done[name] = task()
        seconds[name] = round(time.perf_counter() - start, 3)
    curves = {n: curve_record(n, done[n], rtol, steps) for n in CURVES}
    y_star, y_last = done["closed form"], propagate(ops, f, specs["twirls-base"])
    minimum = float(energy(ops, y_star, f, lam))
    return {
        "propagation": {"variant": "paper", "steps": steps, "lam": lam, "alpha": alpha},
        "attention": {"p": rho.p, "tau": rho.tau, "T": _finite(rho.T), "tau_bar": rho.tau_bar,
                      "T_bar": _finite(rho.T_bar)},
        "curves": curves,
        "closed_form": {
            "energy": minimum,
            "final_relative_gap": (curves["twirls-base"]["final"] - minimum) / abs(minimum),
            "y_relative_distance": float((y_last - y_star).norm() / y_star.norm())},
        "lemma33": {
            "alpha": alpha, "gamma_max": 1.0 / rho.tau,
            "bound_unweighted": done["lemma33 unweighted"],
            "bound_gamma_max": done["lemma33 gamma max"],
            "alpha_within_bound_unweighted": alpha <= done["lemma33 unweighted"],
            "alpha_within_bound_gamma_max": alpha <= done["lemma33 gamma max"],
            "jacobi_alpha_limit_unweighted": done["jacobi unweighted"],
            "jacobi_alpha_limit_gamma_max": done["jacobi gamma max"]},
        "monotone_rtol": rtol,
        "seconds": seconds,
    }


def _finite(value: float) -> float | str:
    return value if math.isfinite(value) else "inf"
