"""Stage ``energy``: energy per propagation step on real data (an extra figure, beyond the paper).

TWIRLS' propagation is derived as descent on an energy, and this stage measures that it is, on
Cora, for the ``f = f(X; W)`` of a trained model. It trains one seed of TWIRLS-base
(``energy.model_cfg`` / ``train_cfg``), takes ``f`` = the output of its ``mlp_before`` in eval
mode (no dropout, no grad; the weights after the last epoch), and runs ``energy.steps`` = ``S``
propagation steps of the paper's equations (``variant: paper``, step size ``energy.alpha``, ``λ``
of ``model_cfg``) from ``Y⁽⁰⁾ = f``, recording at every iterate:

* **TWIRLS-base** (no attention), eq. 6 steps: the energy of eq. 1,
  ``ℓ_Y(Y) = ||Y - f||²_F + λ tr[Yᵀ L Y]`` (eq. 11: ``tr[Yᵀ L Y] = Σ_{i,j}∈E ||y_i - y_j||²``),
  and its minimum ``ℓ_Y(Y*)`` at the closed form of eq. 2, ``Y* = (I + λL)⁻¹ f`` (dense solve);
* **IRLS** (attention placement ``every``): the attention weights of eq. 20 recomputed before
  every eq. 21 step, with the truncated ℓp penalty of the top-level ``attention`` params; the
  robust energy of eq. 12, ``||Y - f||²_F + λ Σ_{i,j}∈E ρ(||y_i - y_j||²)``. This is the
  iteration of Lemma 3.3, which guarantees that eq. 12 never increases;
* **TWIRLS** (placement ``middle``, as the models run): one attention layer after ``S // 2``
  steps; eq. 12 per step. There is *no* guarantee in the first half (plain eq. 6 steps descend
  eq. 1, not eq. 12). After the attention layer the steps descend the quadratic upper bound of
  Lemma 3.2 that touches eq. 12 at ``Y⁽ˢᐟ²⁾``, so ``ℓ_Y(Y⁽ᵏ⁾; ρ) ≤ ℓ_Y(Y⁽ˢᐟ²⁾; ρ)`` for
  ``k > S/2``, but a single step may still increase eq. 12.

For each trace it records the largest relative increase between consecutive steps
(``max_k (ℓ⁽ᵏ⁺¹⁾ - ℓ⁽ᵏ⁾) / |ℓ⁽ᵏ⁾|``, 0 if none) and whether the trace is non-increasing (that
value ``≤ energy.monotone_rtol``, which absorbs float64 rounding once converged). It also records
Lemma 3.3's step-size bound ``α ≤ ||λ Bᵀ Γ B + I||₂⁻¹`` for the un-weighted graph (``Γ = I``)
and for ``Γ = I/τ`` (the largest weight the attention gives, so the bound that holds for every
iteration's ``Γ``), and, because eqs. 6/21 are Jacobi-preconditioned, the step size under which
the preconditioned step provably descends: ``2 / λ_max(D̃^-1/2 (I + λ L_Γ) D̃^-1/2)`` (always
``> 1``, which is why the paper's ``α = 1`` descends although it is far above the stated bound).

Energies are computed in float64 on the CPU (training uses ``device``). Writes
``results/energy/<dataset>.json`` (every trace and check), ``metrics/energy/<dataset>.json``
(scalars for ``dvc metrics``) and ``reports/figures/energy-per-step-<dataset>.png``. If the
dataset could not be fetched, all three say why and the stage exits 0.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm

from twirls.data.graph import GraphData
from twirls.data.registry import LOADERS, DatasetUnavailable, load_dataset
from twirls.models.attention import AttentionSpec
from twirls.models.config import check, resolve_config
from twirls.models.energy import (
    closed_form,
    energy,
    energy_trace,
    jacobi_alpha_limit,
    lemma33_alpha_bound,
)
from twirls.models.graph_ops import GraphOps
from twirls.models.propagation import PropagationSpec, propagate
from twirls.models.twirls import TWIRLS
from twirls.params import load_params
from twirls.reports.figure_file import save_figure
from twirls.train.device import pick_device
from twirls.train.experiment import prepare_features
from twirls.train.loop import TrainConfig, evaluate, set_seed, train_run
from twirls.train.outputs import write_json

REQUIRED = ("dataset", "split", "seed", "steps", "alpha", "model_cfg", "train_cfg")
DEFAULTS: dict[str, Any] = {"monotone_rtol": 1.0e-10}
CURVES = {  # name -> (attention placement or None, label in the figure, prefix in metrics)
    "twirls-base": (None, "TWIRLS-base: eq. 1", "base"),
    "irls-every": ("every", "IRLS, attention before every step: eq. 12", "every"),
    "twirls-middle": ("middle", "TWIRLS, attention after S/2 steps: eq. 12", "middle"),
}
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


@dataclass(frozen=True)
class EnergyConfig:
    """The ``energy`` section of ``params.yaml`` (see the module doc)."""

    dataset: str
    split: str
    seed: int
    steps: int
    alpha: float
    model_cfg: dict[str, Any]
    train_cfg: dict[str, Any]
    monotone_rtol: float = 1.0e-10

    @classmethod
    def from_params(cls, section: Mapping[str, Any] | None) -> EnergyConfig:
        """Check the section; raises ``ValueError`` naming the bad key or value."""
        c = resolve_config("energy", section, DEFAULTS, REQUIRED)
        check(c["dataset"] in LOADERS, "energy",
              f"unknown dataset {c['dataset']!r}; known: {', '.join(LOADERS)}")
        check(isinstance(c["steps"], int) and c["steps"] >= 1, "energy",
              f"steps must be an integer >= 1, got {c['steps']!r}")
        check(isinstance(c["seed"], int), "energy", f"seed must be an integer, got {c['seed']!r}")
        check(isinstance(c["alpha"], int | float) and c["alpha"] > 0, "energy",
              f"alpha must be a number > 0, got {c['alpha']!r}")
        check(isinstance(c["monotone_rtol"], int | float) and c["monotone_rtol"] >= 0, "energy",
              f"monotone_rtol must be a number >= 0, got {c['monotone_rtol']!r}")
        check(isinstance(c["model_cfg"], Mapping) and isinstance(c["train_cfg"], Mapping),
              "energy", "model_cfg and train_cfg must be mappings")
        cfg = cls(str(c["dataset"]), str(c["split"]), c["seed"], c["steps"], float(c["alpha"]),
                  dict(c["model_cfg"]), dict(c["train_cfg"]), float(c["monotone_rtol"]))
        cfg.check_model()
        return cfg

    def check_model(self) -> None:
        """The traces assume TWIRLS-base with the paper's equations on ``Y``."""
        m = self.model_cfg
        check(m.get("attention") is None, "energy",
              "model_cfg must be TWIRLS-base (no `attention`): f(X; W) is taken from it")
        check(m.get("variant", "paper") == "paper" and not m.get("normalized", False)
              and not m.get("prox_relu", False), "energy",
              "model_cfg must use the paper's eq. 6 (variant: paper, normalized: false, "
              "prox_relu: false): the traces measure eq. 1 / eq. 12 on Y")
        TWIRLS.from_config(m, 1, 1)  # unknown or missing keys fail here, before training
        TrainConfig.from_config(self.train_cfg)

    @property
    def lam(self) -> float:
        return float(self.model_cfg["lam"])


# ---------------------------------------------------------------------------- f(X; W)
def train_f(data: GraphData, cfg: EnergyConfig, device: torch.device
            ) -> tuple[Tensor, dict[str, Any]]:
    """Train one TWIRLS-base (seed ``cfg.seed``) and return ``f(X; W)`` on all nodes (float64,
    CPU; eval mode, no grad) with a summary of the training run."""
    check(data.features is not None, "energy", f"{data.name} has no node features")
    check(cfg.split in data.splits, "energy",
          f"{data.name} has no split {cfg.split!r}; it has {', '.join(data.splits)}")
    ops = GraphOps.from_graph(data.graph, device=device)
    x = prepare_features(data.features, {}).to(device)
    set_seed(cfg.seed)
    model = TWIRLS.from_config(cfg.model_cfg, data.num_features, data.num_classes)
    train_cfg = replace(TrainConfig.from_config(cfg.train_cfg), progress=True)
    run = train_run(model, ops, x, data.labels, data.splits[cfg.split], train_cfg,
                    seed=cfg.seed, desc="energy: train TWIRLS-base")
    last = evaluate(model, ops, x, data.labels, data.splits[cfg.split])
    model.eval()
    with torch.no_grad():
        f = model.mlp_before(x)
    summary = {"seed": cfg.seed, "epochs": len(run.history), "best_epoch": run.best_epoch,
               "val_at_best": run.val, "test_at_best": run.test, "val_last": last["val"],
               "test_last": last["test"], "seconds": round(run.seconds, 2),
               "f_shape": list(f.shape)}
    return f.detach().to("cpu", torch.float64), summary


# ---------------------------------------------------------------------------- checks
def max_relative_increase(values: Sequence[float]) -> float:
    """``max_k max(0, (v_{k+1} - v_k) / |v_k|)``: 0 for a non-increasing sequence."""
    worst = 0.0
    for before, after in zip(values[:-1], values[1:], strict=True):
        if not (math.isfinite(before) and math.isfinite(after)):
            return math.inf
        worst = max(worst, (after - before) / max(abs(before), 1e-300))
    return worst


def curve_record(name: str, trace: list[float], rtol: float, steps: int) -> dict[str, Any]:
    """One trace with its checks (see the module doc); ``twirls-middle`` also gets the checks
    of the half after its attention layer."""
    rise = max_relative_increase(trace)
    out: dict[str, Any] = {
        "energy": "eq. 1" if name == "twirls-base" else "eq. 12",
        "placement": CURVES[name][0], "trace": [v if math.isfinite(v) else None for v in trace],
        "initial": trace[0], "final": trace[-1], "minimum": min(trace),
        "max_relative_increase": rise, "monotone": rise <= rtol, "guarantee": GUARANTEES[name]}
    if name == "twirls-middle" and 1 <= steps // 2 < steps:
        m = steps // 2
        after = trace[m:]
        out["attention_after_step"] = m
        out["max_relative_increase_after_attention"] = max_relative_increase(after)
        out["monotone_after_attention"] = out["max_relative_increase_after_attention"] <= rtol
        out["max_relative_increase_before_attention"] = max_relative_increase(trace[:m + 1])
        out["never_above_attention_value"] = max(after) <= after[0] * (1 + rtol)
    return out


# ---------------------------------------------------------------------------- measuring
def measure(ops: GraphOps, f: Tensor, lam: float, alpha: float, steps: int,
            attention: Mapping[str, Any], rtol: float = 1.0e-10) -> dict[str, Any]:
    """Every trace and check of the module doc for ``f`` on ``ops`` (float64 recommended)."""
    f = f.to(ops.dtype)
    rho = AttentionSpec.from_config({**attention, "placement": "middle"}).rho
    tasks: list[tuple[str, Callable[[], Any]]] = []
    specs = {name: PropagationSpec(steps, lam, alpha, attention=None if placement is None
                                   else AttentionSpec(rho, placement))
             for name, (placement, *_) in CURVES.items()}
    for name, spec in specs.items():
        tasks.append((name, lambda s=spec, n=name: energy_trace(
            ops, f, s, None if n == "twirls-base" else rho.rho)))
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


def jsonable(obj: Any) -> Any:
    """``obj`` with non-finite floats as strings (``"inf"``, ``"nan"``): strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, Mapping):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    return obj


def metrics_of(result: Mapping[str, Any]) -> dict[str, Any]:
    """The scalars for ``dvc metrics`` (flags as 0/1)."""
    curves = result["curves"]
    out: dict[str, Any] = {"status": "ok",
                           "closed_form_energy": result["closed_form"]["energy"],
                           "base_final_relative_gap": result["closed_form"]["final_relative_gap"],
                           "lemma33_bound_unweighted": result["lemma33"]["bound_unweighted"],
                           "lemma33_bound_gamma_max": result["lemma33"]["bound_gamma_max"],
                           "test_accuracy_last": result["model"]["test_last"]}
    for name, c in curves.items():
        prefix = CURVES[name][2]
        out[f"{prefix}_final_energy"] = c["final"]
        out[f"{prefix}_max_relative_increase"] = c["max_relative_increase"]
        out[f"{prefix}_monotone"] = int(c["monotone"])
    middle = curves["twirls-middle"]
    if "monotone_after_attention" in middle:
        out["middle_max_relative_increase_after_attention"] = middle[
            "max_relative_increase_after_attention"]
        out["middle_monotone_after_attention"] = int(middle["monotone_after_attention"])
    return jsonable(out)


# ---------------------------------------------------------------------------- figure
def plot(result: Mapping[str, Any], path: Path, title: str, reason: str = "") -> None:
    """Top: every energy over its value at ``Y⁽⁰⁾ = f``. Bottom (log y): eq. 1 minus its minimum
    ``ℓ_Y(Y*)`` (eq. 2); eq. 12 curves minus their lowest value (for ``middle``: after its
    attention layer, where its guarantee starts). Without data, a figure that says why."""
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
    """What the bottom panel subtracts from ``curve`` (see :func:`plot`)."""
    if name == "twirls-base":
        return result["closed_form"]["energy"]
    trace = [v for v in curve["trace"][curve.get("attention_after_step", 0):] if v is not None]
    return min(trace)


def curve_label(name: str, c: Mapping[str, Any]) -> str:
    text = (f"{CURVES[name][1]}\n({'non-increasing' if c['monotone'] else 'increases'}, "
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


# ---------------------------------------------------------------------------- stage
def run(cfg: EnergyConfig, attention: Mapping[str, Any], raw: Path, out: Path,
        device: torch.device) -> dict[str, Any]:
    """Train, measure, write the three outputs under ``out``; returns the results JSON."""
    name = cfg.dataset
    paths = {"results": out / "results" / "energy" / f"{name}.json",
             "metrics": out / "metrics" / "energy" / f"{name}.json",
             "figure": out / "reports" / "figures" / f"energy-per-step-{name}.png"}
    title = (f"Energy per propagation step on {name.capitalize()}, with and without attention "
             "(Lemma 3.3)")
    try:
        data = load_dataset(name, raw)
    except DatasetUnavailable as exc:
        result = {"status": "no-data", "dataset": name, "reason": str(exc)}
        write_json(paths["results"], result)
        write_json(paths["metrics"], {"status": "no-data", "reason": str(exc)})
        plot(result, paths["figure"], title, reason=str(exc))
        return result
    f, model = train_f(data, cfg, device)
    ops = GraphOps.from_graph(data.graph, dtype=torch.float64)
    result = {"status": "ok", "dataset": name, "split": cfg.split, "num_nodes": ops.n,
              "num_undirected_edges": ops.num_edges // 2,
              "model": {"model_cfg": cfg.model_cfg, "train_cfg": cfg.train_cfg, **model},
              **measure(ops, f, cfg.lam, cfg.alpha, cfg.steps, attention, cfg.monotone_rtol)}
    write_json(paths["results"], jsonable(result))
    write_json(paths["metrics"], {**metrics_of(result), "device": str(device)})
    plot(result, paths["figure"], title)
    return result


def summary_line(result: Mapping[str, Any]) -> str:
    if result["status"] != "ok":
        return f"energy: no data ({result['reason']})"
    parts = [f"{n}: final {c['final']:.6g}, max rel. increase {c['max_relative_increase']:.2e}"
             for n, c in result["curves"].items()]
    gap = result["closed_form"]["final_relative_gap"]
    return "energy: " + "; ".join(parts) + f"; eq. 1 vs closed form: relative gap {gap:.2e}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args(argv)
    params = load_params("energy")
    torch.set_num_threads(int(params["threads"]))
    try:  # bad params: one message, no traceback
        cfg = EnergyConfig.from_params(params["energy"])
        AttentionSpec.from_config(params["attention"])
        device = pick_device(params["device"])
    except (ValueError, RuntimeError) as exc:
        raise SystemExit(f"stage energy: {exc}") from None
    try:
        result = run(cfg, params["attention"], args.raw, args.out, device)
    except ValueError as exc:  # e.g. a split or features the dataset lacks
        raise SystemExit(f"stage energy: {exc}") from None
    print(summary_line(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
