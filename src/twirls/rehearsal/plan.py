"""Which stages use the generated datasets, how to run each with a tiny budget, and the size of
its real run (from the real ``params.yaml``).

Every stage runs its real command (``python -m twirls.stages.<module> ...``) on the full-size
files; only ``params.yaml`` differs, and only in the keys that set the budget:

* ``<group>@<name>`` of a train-kind group (``table2``, ``table10``, ...): ``train.seeds`` and
  ``<group>.<name>.seeds`` -> 1, ``<group>.<name>.train_cfg.epochs`` -> the budget;
* ``<group>[<curve>]``, one curve of a sweep group (``figure3[IGNN]``): the other curves
  dropped, ``seeds`` (the sweep's, and the curve's own if it sets them) -> 1, the curve's
  ``train_cfg.epochs`` -> the budget, and the ``data_grid`` cut to its first value (Amazon:
  label ratio 0.05 only; every ratio trains the same model on the same graph, so a point costs
  the same; the model grid all runs). The real run's cost is then extrapolated to every point
  with the curve's own epochs;
* ``table11``: ``epochs`` -> the budget, ``warmup`` -> 0 (one budget epoch = one training round
  of all ten models);
* ``table5[<dataset>]``: ``table5.datasets`` -> the one dataset, so each loader is measured
  alone;
* ``table12`` (Chinese word segmentation on PKU): ``seeds`` -> 1 and ``epochs`` of both
  protocols -> the budget, for every model of the group; the generated PKU folder has the
  training file and the embedding, so the paper's protocol runs. One budget epoch = one epoch
  of each model, so the real run is extrapolated to models x seeds x the paper's epochs.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from typing import Any

from twirls.config.entries import curve_seeds, seeds_and_batch, train_entry
from twirls.config.schema import MODEL_GROUPS, SWEEP_GROUPS, TRAIN_GROUPS

#: datasets the rehearsal generates (twirls.rehearsal.generate.WRITERS)
GENERATED = ("pubmed", "ogbn-arxiv", "amazon", "pku")
#: the params groups (= stages) of Table 11's timing and of Table 5's dataset statistics
TIMING_GROUP, DATASETS_GROUP = "table11", "table5"
#: the params group (= stage) of Table 12's word segmentation, and the protocol it runs here
CWS_GROUP, CWS_PROTOCOL = "table12", "paper"


@dataclass
class StagePlan:
    """One stage of the rehearsal.

    Attributes:
        stage: the DVC stage (``table2@pubmed-gcn``, ``table11``, ``table12``), or part of one:
            ``table5[pku]`` (the table5 stage restricted to one dataset),
            ``figure3[IGNN]`` (one curve of a sweep).
        kind: ``train``, ``sweep``, ``timing``, ``cws`` (``table12``) or ``datasets``.
        name: the entry's key in its group (train), the curve (sweep), the dataset (datasets),
            else the group.
        dataset: the dataset it reads.
        runs_per_epoch: training runs per budget epoch in the rehearsal (seeds x grid points;
            ``cws``: one per model).
        full: the real run: ``epochs``, ``seeds``, ``grid_points``, ``runs`` (None: no epochs).
        extra: for a sweep curve of the sweep's ``extras``, its table: the curve runs in stage
            ``<group>-extra@<table>`` (``table8-extra@table8-paper-k2``).
    """

    stage: str
    kind: str
    name: str
    dataset: str
    runs_per_epoch: int = 1
    full: dict[str, Any] = field(default_factory=dict)
    extra: str = ""

    @property
    def group(self) -> str:
        """The ``params.yaml`` group the stage reads: its name up to ``@`` or ``[``
        (``table2``, ``figure3``, ``table11``, ``table12``, ``table5``)."""
        return re.split(r"[@\[]", self.stage, maxsplit=1)[0]

    @property
    def has_epochs(self) -> bool:
        return self.kind != "datasets"

    def argv(self, raw: str, out: str) -> list[str]:
        """Arguments after ``python -m``: the stage's own command line, outputs under ``out``."""
        if self.kind == "train":
            save = ["--save-model"] if self.group in MODEL_GROUPS else []  # as in dvc.yaml
            return ["twirls.stages.train", self.group, self.name, *save, "--raw", raw,
                    "--out", out]
        if self.kind == "sweep":  # writes results/, metrics/, reports/figures/ under its cwd
            extra = ["--extra", self.extra] if self.extra else []  # stage <group>-extra@<table>
            return ["twirls.stages.sweep", self.group, *extra, "--raw", raw]
        if self.kind == "timing":
            return ["twirls.stages.table11", "--raw", raw, "--out", out]
        if self.kind == "cws":
            return ["twirls.stages.table12", "--raw", raw, "--out", out]
        return ["twirls.stages.table5", "--raw", raw,
                "--cells", f"{out}/results/{DATASETS_GROUP}.json",
                "--overview", f"{out}/reports/datasets"]

    def params(self, real: dict[str, Any], epochs: int) -> dict[str, Any]:
        """The rehearsal ``params.yaml``: the real one with this stage's budget keys changed."""
        p = copy.deepcopy(real)
        if self.kind == "train":
            p["train"]["seeds"] = 1
            exp = p[self.group][self.name]
            exp["seeds"] = 1
            exp["train_cfg"] = {**(exp.get("train_cfg") or {}), "epochs": int(epochs)}
        elif self.kind == "sweep":
            sweep = p[self.group]
            sweep["seeds"] = 1
            sweep["curves"] = {self.name: sweep["curves"][self.name]}
            if sweep.get("data_grid"):
                sweep["data_grid"] = {k: list(v)[:1] for k, v in sweep["data_grid"].items()}
            for spec in sweep["curves"].values():
                spec["train_cfg"] = {**(spec.get("train_cfg") or {}), "epochs": int(epochs)}
                if "seeds" in spec:  # a curve's own seeds
                    spec["seeds"] = 1
        elif self.kind == "timing":
            p[self.group]["epochs"] = int(epochs)
            p[self.group]["warmup"] = 0
        elif self.kind == "cws":
            p[self.group]["seeds"] = 1
            p[self.group]["epochs"] = {k: int(epochs) for k in p[self.group]["epochs"]}
        else:
            p[self.group]["datasets"] = [self.name]
        return p


def _grid_size(grid: dict[str, list] | None) -> int:
    return math.prod(len(v) for v in (grid or {}).values())


def train_plans(real: dict[str, Any], datasets: tuple[str, ...]) -> list[StagePlan]:
    """``<group>@<name>`` of every train-kind group's entry on one of ``datasets``."""
    out = []
    for group in TRAIN_GROUPS:
        for name, entry in (real.get(group) or {}).items():
            exp = train_entry(entry)  # seeds: the entry's, else its dataset's, else train.seeds
            if exp["dataset"] not in datasets:
                continue
            seeds, _ = seeds_and_batch(exp, real["train"])
            train_cfg = exp.get("train_cfg") or {}
            out.append(StagePlan(f"{group}@{name}", "train", name, exp["dataset"], 1, {
                "epochs": int(train_cfg.get("epochs", 500)), "seeds": seeds, "grid_points": 1,
                "runs": seeds, "patience": train_cfg.get("patience")}))
    return out


def sweep_plans(real: dict[str, Any], datasets: tuple[str, ...]) -> list[StagePlan]:
    """The sweep groups (stage = group, e.g. ``figure3``) on one of ``datasets``: one plan per
    curve (``figure3[IGNN]``), since curves train for different epochs (IGNN 5000, the others
    500) and so extrapolate separately."""
    out = []
    default_seeds = int(real["train"]["seeds"])
    for group in SWEEP_GROUPS:
        sweep = real.get(group)
        if not sweep or sweep["dataset"] not in datasets:
            continue
        data_points = _grid_size(sweep.get("data_grid"))
        seeds = int(sweep.get("seeds", default_seeds))
        extras = {curve: table for table, curve in (sweep.get("extras") or {}).items()}
        for curve, spec in sweep["curves"].items():
            model_points = _grid_size(spec.get("grid"))
            points = data_points * model_points
            epochs = int((spec.get("train_cfg") or {}).get("epochs", 500))
            count = curve_seeds(spec, seeds)
            out.append(StagePlan(f"{group}[{curve}]", "sweep", curve, sweep["dataset"],
                                 model_points, {
                "epochs": epochs, "seeds": count, "grid_points": points,
                "runs": count * points,
                "note": f"curve {curve} alone: {data_points} data point(s) x {model_points} "
                        "model point(s); measured on the first data point"},
                                 extra=extras.get(curve, "")))
    return out


def timing_plan(real: dict[str, Any]) -> StagePlan:
    """Stage ``table11``."""
    cfg = real[TIMING_GROUP]
    rounds = int(cfg["epochs"]) + int(cfg.get("warmup", 2))
    dataset = "ogbn-arxiv" if cfg.get("graph", "auto") == "auto" else "random"
    return StagePlan(TIMING_GROUP, "timing", TIMING_GROUP, dataset, 1, {
        "epochs": rounds, "seeds": 1, "grid_points": 1, "runs": 1, "models": len(cfg["models"]),
        "note": f"one epoch = one training epoch of each of the {len(cfg['models'])} models; "
                f"{cfg['epochs']} timed + {cfg.get('warmup', 2)} warm-up rounds"})


def cws_plan(real: dict[str, Any]) -> StagePlan:
    """Stage ``table12``: every model of the group, one budget epoch = one epoch of each."""
    cfg = real[CWS_GROUP]
    models, seeds = len(cfg["models"]), int(cfg["seeds"])
    epochs = int(cfg["epochs"][CWS_PROTOCOL])
    return StagePlan(CWS_GROUP, "cws", CWS_GROUP, "pku", models, {
        "epochs": epochs, "seeds": seeds, "grid_points": models, "runs": seeds * models,
        "models": models, "protocol": CWS_PROTOCOL,
        "note": f"{models} models x {seeds} seeds x {epochs} epochs ({CWS_PROTOCOL} protocol); "
                "seconds_per_epoch is one model's epoch (mean over the models)"})


def datasets_plans(real: dict[str, Any], datasets: tuple[str, ...]) -> list[StagePlan]:
    """Stage ``table5`` once per generated dataset it lists: ``table5[<dataset>]``."""
    listed = real[DATASETS_GROUP]["datasets"]
    return [StagePlan(f"{DATASETS_GROUP}[{d}]", "datasets", d, d, 0, {})
            for d in datasets if d in listed]


def all_plans(real: dict[str, Any], datasets: tuple[str, ...] = GENERATED) -> list[StagePlan]:
    """Every stage that reads a generated dataset, cheapest kinds first."""
    plans = [*datasets_plans(real, datasets), *train_plans(real, datasets),
             *sweep_plans(real, datasets)]
    if "ogbn-arxiv" in datasets:
        plans.append(timing_plan(real))
    if "pku" in datasets and CWS_GROUP in real:
        plans.append(cws_plan(real))
    return plans


def select(plans: list[StagePlan], only: list[str] | None) -> list[StagePlan]:
    """Plans whose stage name contains any of ``only`` (all when ``only`` is empty), in the
    order of ``only``: those matching its first entry first (a time-limited run, e.g. on a
    borrowed GPU, lists the stages that matter most first)."""
    if not only:
        return plans
    chosen: dict[str, StagePlan] = {}
    for part in only:
        chosen.update((p.stage, p) for p in plans if part in p.stage and p.stage not in chosen)
    return list(chosen.values())
