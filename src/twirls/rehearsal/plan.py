"""Which stages use the generated datasets, how to run each with a tiny budget, and the size of
its real run (from the real ``params.yaml``).

Every stage runs its real command (``python -m twirls.stages.<stage> ...``) on the full-size
files; only ``params.yaml`` differs, and only in the keys that set the budget:

* ``train@<name>``: ``train.seeds`` and ``experiments.<name>.seeds`` -> 1,
  ``experiments.<name>.train_cfg.epochs`` -> the budget;
* ``sweep@<name>``: ``seeds`` -> 1, every curve's ``train_cfg.epochs`` -> the budget, and the
  ``data_grid`` cut to its first value (Amazon: label ratio 0.05 only; every ratio trains the
  same model on the same graph, so a point costs the same; the model grids all run). The real
  run's cost is then extrapolated to every point;
* ``timing``: ``epochs`` -> the budget, ``warmup`` -> 0 (one budget epoch = one training round
  of all ten models);
* ``datasets``: ``datasets_table.datasets`` -> the one dataset, so each loader is measured alone.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

#: datasets the rehearsal generates (twirls.rehearsal.generate.WRITERS)
GENERATED = ("pubmed", "ogbn-arxiv", "amazon", "pku")


@dataclass
class StagePlan:
    """One stage of the rehearsal.

    Attributes:
        stage: the DVC stage (``train@pubmed-gcn``; ``datasets[pku]`` for the datasets stage
            restricted to one dataset).
        kind: ``train``, ``sweep``, ``timing`` or ``datasets``.
        name: the key in ``params.yaml`` (experiment / sweep name; the dataset for ``datasets``).
        dataset: the dataset it reads.
        runs_per_epoch: training runs per budget epoch in the rehearsal (seeds x grid points).
        full: the real run: ``epochs``, ``seeds``, ``grid_points``, ``runs`` (None: no epochs).
    """

    stage: str
    kind: str
    name: str
    dataset: str
    runs_per_epoch: int = 1
    full: dict[str, Any] = field(default_factory=dict)

    @property
    def has_epochs(self) -> bool:
        return self.kind != "datasets"

    def argv(self, raw: str, out: str) -> list[str]:
        """Arguments after ``python -m``: the stage's own command line, outputs under ``out``."""
        if self.kind == "train":
            return ["twirls.stages.train", self.name, "--raw", raw, "--out", out]
        if self.kind == "sweep":  # writes results/, metrics/, reports/figures/ under its cwd
            return ["twirls.stages.sweep", self.name, "--raw", raw]
        if self.kind == "timing":
            return ["twirls.stages.timing", "--raw", raw, "--out", out]
        return ["twirls.stages.datasets", "--raw", raw, "--cells", f"{out}/results/datasets.json",
                "--tables", f"{out}/reports/tables"]

    def params(self, real: dict[str, Any], epochs: int) -> dict[str, Any]:
        """The rehearsal ``params.yaml``: the real one with this stage's budget keys changed."""
        p = copy.deepcopy(real)
        if self.kind == "train":
            p["train"]["seeds"] = 1
            exp = p["experiments"][self.name]
            exp["seeds"] = 1
            exp["train_cfg"] = {**(exp.get("train_cfg") or {}), "epochs": int(epochs)}
        elif self.kind == "sweep":
            sweep = p["sweeps"][self.name]
            sweep["seeds"] = 1
            if sweep.get("data_grid"):
                sweep["data_grid"] = {k: list(v)[:1] for k, v in sweep["data_grid"].items()}
            for spec in sweep["curves"].values():
                spec["train_cfg"] = {**(spec.get("train_cfg") or {}), "epochs": int(epochs)}
        elif self.kind == "timing":
            p["timing"]["epochs"] = int(epochs)
            p["timing"]["warmup"] = 0
        else:
            p["datasets_table"]["datasets"] = [self.name]
        return p


def _grid_size(grid: dict[str, list] | None) -> int:
    return math.prod(len(v) for v in (grid or {}).values())


def train_plans(real: dict[str, Any], datasets: tuple[str, ...]) -> list[StagePlan]:
    out = []
    default_seeds = int(real["train"]["seeds"])
    for name, exp in real["experiments"].items():
        if exp["dataset"] not in datasets:
            continue
        seeds = int(exp.get("seeds", default_seeds))
        epochs = int((exp.get("train_cfg") or {}).get("epochs", 500))
        out.append(StagePlan(f"train@{name}", "train", name, exp["dataset"], 1, {
            "epochs": epochs, "seeds": seeds, "grid_points": 1, "runs": seeds,
            "patience": (exp.get("train_cfg") or {}).get("patience")}))
    return out


def sweep_plans(real: dict[str, Any], datasets: tuple[str, ...]) -> list[StagePlan]:
    out = []
    default_seeds = int(real["train"]["seeds"])
    for name, sweep in real["sweeps"].items():
        if sweep["dataset"] not in datasets:
            continue
        data_points = _grid_size(sweep.get("data_grid"))
        model_points = sum(_grid_size(c.get("grid")) for c in sweep["curves"].values())
        points = data_points * model_points
        epochs = {int((c.get("train_cfg") or {}).get("epochs", 500))
                  for c in sweep["curves"].values()}
        seeds = int(sweep.get("seeds", default_seeds))
        out.append(StagePlan(f"sweep@{name}", "sweep", name, sweep["dataset"], model_points, {
            "epochs": max(epochs), "seeds": seeds, "grid_points": points,
            "runs": seeds * points, "note": f"{data_points} data point(s) x {model_points} "
                                            "model point(s); measured on the first data point"}))
    return out


def timing_plan(real: dict[str, Any]) -> StagePlan:
    cfg = real["timing"]
    rounds = int(cfg["epochs"]) + int(cfg.get("warmup", 2))
    dataset = "ogbn-arxiv" if cfg.get("graph", "auto") == "auto" else "random"
    return StagePlan("timing", "timing", "timing", dataset, 1, {
        "epochs": rounds, "seeds": 1, "grid_points": 1, "runs": 1, "models": len(cfg["models"]),
        "note": f"one epoch = one training epoch of each of the {len(cfg['models'])} models; "
                f"{cfg['epochs']} timed + {cfg.get('warmup', 2)} warm-up rounds"})


def datasets_plans(real: dict[str, Any], datasets: tuple[str, ...]) -> list[StagePlan]:
    listed = real["datasets_table"]["datasets"]
    return [StagePlan(f"datasets[{d}]", "datasets", d, d, 0, {})
            for d in datasets if d in listed]


def all_plans(real: dict[str, Any], datasets: tuple[str, ...] = GENERATED) -> list[StagePlan]:
    """Every stage that reads a generated dataset, cheapest kinds first."""
    plans = [*datasets_plans(real, datasets), *train_plans(real, datasets),
             *sweep_plans(real, datasets)]
    if "ogbn-arxiv" in datasets:
        plans.append(timing_plan(real))
    return plans


def select(plans: list[StagePlan], only: list[str] | None) -> list[StagePlan]:
    """Plans whose stage name contains any of ``only`` (all when ``only`` is empty)."""
    if not only:
        return plans
    return [p for p in plans if any(s in p.stage for s in only)]
