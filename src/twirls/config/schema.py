"""One schema for every value of ``params.yaml``, checked before anything expensive runs.

:func:`check_params` walks whatever part of the params it is given (the whole file in the
``check-params`` stage, the declared keys in every other stage) and raises :class:`ConfigError`
with one line: where the value is, what it is, what is allowed (and "did you mean" for names).
Model hyperparameters are checked by building the model on a toy size through its own
``from_config`` (its config dataclass, e.g. ``GCNConfig``, is the one place that knows its keys
and defaults); optimisation ones by
:class:`twirls.train.loop.TrainConfig`; the attention by
:class:`twirls.models.attention.AttentionSpec` (paper Table 1: 0 <= p <= 2, tau > 0, T >= tau).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

from twirls.config.checks import ConfigError, choose, fail, keys, locate, mapping, names, number
from twirls.config.table12 import check_table12

__all__ = ["ConfigError", "check_params"]

#: groups of experiment entries run by the train stage (``<group>@<name>``).
TRAIN_GROUPS = ("table2", "table3", "table10", "variants")
#: train groups whose stages save their first run's model (``models/<group>/<name>.pt``).
MODEL_GROUPS = ("table2",)
#: groups of entries on attacked graphs with Table 4's TWIRLS hyperparameters.
ATTACKED_GROUPS = ("variants-attacked",)
#: single-stage hyperparameter sweeps (``stages/sweep.py``).
SWEEP_GROUPS = ("table8", "figure2", "figure3", "chains")
GRAPHS = ("fast", "clean", "prognn")
#: TWIRLS' propagations (twirls.models.propagation.VARIANTS, named here without importing torch)
VARIANTS = ("paper", "reference")
#: Table 4's defenses (twirls.defenses.NAMES, named here without importing them: every stage
#: checks its params, so importing the defenses would make each depend on their code)
DEFENSES = ("gcn", "gcn-jaccard", "gcn-svd", "gnnguard")
DEVICES = ("auto", "cpu", "cuda")
ATTACK_IMPLEMENTATIONS = ("fast", "deeprobust", "prognn")
ATTACKED_DATASETS = ("nettack-cora", "nettack-citeseer")
ENERGY_KEYS = ("group", "entry", "dataset", "steps", "alpha", "attention", "monotone_rtol")


def _datasets() -> tuple[str, ...]:
    from twirls.data.registry import LOADERS

    return tuple(LOADERS)


def check_model(path: str, model: Any, cfg: Any) -> None:
    """``model`` names a model and ``cfg`` is a config its ``from_config`` accepts."""
    from twirls.models import MODELS, build_model

    choose(f"{path}.model", model, tuple(MODELS), "model")
    if cfg is not None:
        mapping(f"{path}.model_cfg", cfg)
    try:
        build_model(model, cfg, 8, 3, num_nodes=16)
    except ImportError:  # GAT / GraphSAGE without DGL: their stage says so when it runs
        return
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"{locate(path + '.model_cfg')}: {exc}") from None


def check_train_cfg(path: str, cfg: Any) -> None:
    from twirls.train.loop import MASKS, SELECTIONS, TrainConfig

    if cfg is None:
        return
    cfg = mapping(path, cfg)
    keys(path, cfg, ("epochs", "lr", "weight_decay", "patience", "selection", "masks"))
    if "epochs" in cfg:
        number(f"{path}.epochs", cfg["epochs"], integer=True, lo=1)
    if "lr" in cfg:
        number(f"{path}.lr", cfg["lr"], lo=0, lo_open=True)
    if "weight_decay" in cfg:
        number(f"{path}.weight_decay", cfg["weight_decay"], lo=0)
    if cfg.get("patience") is not None:
        number(f"{path}.patience", cfg["patience"], integer=True, lo=1)
    if "selection" in cfg:
        choose(f"{path}.selection", cfg["selection"], SELECTIONS, "selection")
    if "masks" in cfg:
        choose(f"{path}.masks", cfg["masks"], MASKS, "masks")
    TrainConfig.from_config(cfg)


def check_attention(path: str, att: Any, partial: bool = False) -> None:
    """IRLS attention ``{p, tau, T, placement}``; ``partial``: overrides (``T: tau`` allowed)."""
    from twirls.models.attention import AttentionSpec

    att = mapping(path, att)
    keys(path, att, ("p", "tau", "T", "placement"))
    if "p" in att:
        number(f"{path}.p", att["p"], lo=0, hi=2)
    if "tau" in att:
        number(f"{path}.tau", att["tau"], lo=0, lo_open=True)
    big_t = att.get("T")
    if big_t is not None and not (isinstance(big_t, str) and big_t in ("inf", "tau")):
        number(f"{path}.T", big_t, lo=0, lo_open=True)
    if big_t == "tau" and not partial:
        fail(f"{path}.T", big_t, "'tau' is only allowed in an entry's attention overrides")
    if "placement" in att:
        choose(f"{path}.placement", att["placement"], ("middle", "before+middle", "every"),
               "placement")
    if partial:
        return
    try:
        AttentionSpec.from_config(att)
    except ValueError as exc:
        raise ConfigError(f"{locate(path)}: {exc}") from None


def check_cells(path: str, cells: Any) -> None:
    cells = mapping(path, cells)
    for table, label in cells.items():
        if not isinstance(label, str) or not label:
            fail(f"{path}.{table}", label, "expected the row label of our cell (a string)")


def check_seeds(path: str, seeds: Any) -> None:
    number(path, seeds, integer=True, lo=1)


def check_batch(path: str, batch: Any) -> None:
    """Seeds trained as one batched model (1: one a run); set next to the seeds it batches."""
    number(path, batch, integer=True, lo=1)


def check_flag(path: str, value: Any) -> None:
    """A switch: ``true`` or ``false``."""
    if not isinstance(value, bool):
        fail(path, value, "expected true or false")


def check_train_entry(path: str, entry: Any) -> None:
    """An experiment entry of a train-kind group (see :mod:`twirls.config.entries`)."""
    entry = mapping(path, entry)
    keys(path, entry, ("dataset", "model", "cells", "model_cfg", "train_cfg", "seeds", "batch",
                       "split", "feature_norm", "note", "metric"))
    for key in ("dataset", "model", "cells"):
        if key not in entry:
            fail(f"{path}", dict(entry), f"missing key {key!r}")
    choose(f"{path}.dataset", entry["dataset"], _datasets(), "dataset")
    check_cells(f"{path}.cells", entry["cells"])
    if "seeds" in entry:
        check_seeds(f"{path}.seeds", entry["seeds"])
    if "batch" in entry:
        check_batch(f"{path}.batch", entry["batch"])
    if "feature_norm" in entry:
        choose(f"{path}.feature_norm", entry["feature_norm"], ("row", "none"), "feature_norm")
    check_train_cfg(f"{path}.train_cfg", entry.get("train_cfg"))
    check_model(path, entry["model"], entry.get("model_cfg"))


def check_attacked_entry(path: str, entry: Any) -> None:
    entry = mapping(path, entry)
    keys(path, entry, ("dataset", "graph", "attention", "model_cfg", "cells", "seeds", "note"))
    choose(f"{path}.dataset", entry.get("dataset"), ATTACKED_DATASETS, "dataset")
    choose(f"{path}.graph", entry.get("graph"), GRAPHS, "graph")
    check_cells(f"{path}.cells", entry.get("cells"))
    if "attention" in entry:
        check_attention(f"{path}.attention", entry["attention"], partial=True)
    if "model_cfg" in entry:
        mapping(f"{path}.model_cfg", entry["model_cfg"])


def check_table4(path: str, t4: Any) -> None:
    """Table 4's grid; a stage passes only the keys it declares, so each part is optional."""
    t4 = mapping(path, t4)
    rows = DEFENSES + ("twirls-base", "twirls")
    keys(path, t4, ("datasets", "graphs", "defenses", "tables", "labels", "seeds", "batch",
                    "also", "twirls", "extra_attention"))
    if "datasets" in t4:
        names(f"{path}.datasets", t4["datasets"], ATTACKED_DATASETS, "dataset")
    if "graphs" in t4:
        names(f"{path}.graphs", t4["graphs"], GRAPHS, "graph")
    if "defenses" in t4:
        names(f"{path}.defenses", t4["defenses"], DEFENSES, "defense")
    for graph, table in mapping(f"{path}.tables", t4.get("tables", {})).items():
        choose(f"{path}.tables.{graph}", graph, GRAPHS, "graph")
        if not isinstance(table, str):
            fail(f"{path}.tables.{graph}", table, "expected a report table name")
    for row, label in mapping(f"{path}.labels", t4.get("labels", {})).items():
        choose(f"{path}.labels.{row}", row, rows, "row")
        if not isinstance(label, str):
            fail(f"{path}.labels.{row}", label, "expected a row label (a string)")
    for row, seeds in mapping(f"{path}.seeds", t4.get("seeds", {})).items():
        choose(f"{path}.seeds.{row}", row, rows, "row")
        check_seeds(f"{path}.seeds.{row}", seeds)
    if "batch" in t4:
        check_batch(f"{path}.batch", t4["batch"])
    for graph, cells in mapping(f"{path}.also", t4.get("also", {})).items():
        choose(f"{path}.also.{graph}", graph, GRAPHS, "graph")
        check_cells(f"{path}.also.{graph}", cells)
    if "extra_attention" in t4:
        check_attention(f"{path}.extra_attention", t4["extra_attention"])
    for dataset, hyper in mapping(f"{path}.twirls", t4.get("twirls", {})).items():
        where = f"{path}.twirls.{dataset}"
        choose(where, dataset, ATTACKED_DATASETS, "dataset")
        hyper = mapping(where, hyper)
        keys(where, hyper, ("model_cfg", "train_cfg"))
        check_train_cfg(f"{where}.train_cfg", hyper.get("train_cfg"))
        check_model(where, "twirls", hyper.get("model_cfg"))


def check_table9(path: str, t9: Any) -> None:
    """Table 9's dataset x graph x truncation grid with its pinned attention; a stage passes
    only the keys it declares, so each part is optional."""
    t9 = mapping(path, t9)
    keys(path, t9, ("datasets", "graphs", "tables", "variants", "primary", "seeds", "batch",
                    "attention", "truncations"))
    if "variants" in t9:
        names(f"{path}.variants", t9["variants"], VARIANTS, "variant")
    if "primary" in t9:
        choose(f"{path}.primary", t9["primary"], tuple(t9.get("variants", VARIANTS)), "variant")
    if "datasets" in t9:
        names(f"{path}.datasets", t9["datasets"], ATTACKED_DATASETS, "dataset")
    if "graphs" in t9:
        names(f"{path}.graphs", t9["graphs"], GRAPHS, "graph")
    for graph, table in mapping(f"{path}.tables", t9.get("tables", {})).items():
        choose(f"{path}.tables.{graph}", graph, GRAPHS, "graph")
        if not isinstance(table, str):
            fail(f"{path}.tables.{graph}", table, "expected a report table name")
    if "seeds" in t9:
        check_seeds(f"{path}.seeds", t9["seeds"])
    if "batch" in t9:
        check_batch(f"{path}.batch", t9["batch"])
    if "attention" in t9:
        check_attention(f"{path}.attention", t9["attention"])
    for name, big_t in mapping(f"{path}.truncations", t9.get("truncations", {})).items():
        if not (isinstance(big_t, str) and big_t in ("inf", "tau")):
            number(f"{path}.truncations.{name}", big_t, lo=0, lo_open=True)


def check_sweep(path: str, sweep: Any) -> None:
    sweep = mapping(path, sweep)
    keys(path, sweep, ("dataset", "split", "table", "label", "note", "seeds", "batch",
                       "row_operator", "components", "curves", "extras", "figure",
                       "data_grid"))
    if "dataset" in sweep:  # a stage declares the keys it reads (the report: `extras` alone)
        choose(f"{path}.dataset", sweep["dataset"], _datasets(), "dataset")
    if "seeds" in sweep:  # a sweep sets its own (and its batch)
        check_seeds(f"{path}.seeds", sweep["seeds"])
    if "batch" in sweep:
        check_batch(f"{path}.batch", sweep["batch"])
    for flag in ("row_operator", "components"):
        if flag in sweep:
            check_flag(f"{path}.{flag}", sweep[flag])
    curves = mapping(f"{path}.curves", sweep.get("curves", {}))
    for name, curve in curves.items():
        where = f"{path}.curves.{name}"
        curve = mapping(where, curve)
        keys(where, curve, ("model", "model_cfg", "train_cfg", "grid", "table", "seeds"))
        if "seeds" in curve:
            check_seeds(f"{where}.seeds", curve["seeds"])
        if "table" in curve and not isinstance(curve["table"], str):
            fail(f"{where}.table", curve["table"], "expected a report table name")
        check_train_cfg(f"{where}.train_cfg", curve.get("train_cfg"))
        check_model(where, curve.get("model"), curve.get("model_cfg"))
        for key, values in mapping(f"{where}.grid", curve.get("grid", {})).items():
            if not isinstance(values, list) or not values:
                fail(f"{where}.grid.{key}", values, "expected a non-empty list of values")
    for key, values in mapping(f"{path}.data_grid", sweep.get("data_grid", {})).items():
        if not isinstance(values, list) or not values:
            fail(f"{path}.data_grid.{key}", values, "expected a non-empty list of values")
    for table, curve in mapping(f"{path}.extras", sweep.get("extras", {})).items():
        if curves:  # the stage that reads the curve too (check-params: the whole file)
            choose(f"{path}.extras.{table}", curve, tuple(curves), "curve")
            check_extra(path, table, curve, curves[curve])


def check_extra(path: str, table: str, name: str, curve: dict[str, Any]) -> None:
    """Curve ``name`` of sweep ``path`` fills the extra table ``table`` (the sweep's ``extras``):
    its ``table`` must say so. Checked on the whole file by check-params, and by stage
    ``<path>-extra@<table>`` on the one curve it declares (``--extra table``)."""
    if curve.get("table") != table:
        fail(f"{path}.curves.{name}.table", curve.get("table"),
             f"expected {table!r}: the curve fills table {table!r} (stage {path}-extra@{table} "
             f"writes results/{path}-extra/{table}.json)")


def check_timing(path: str, cfg: Any) -> None:
    cfg = mapping(path, cfg)
    keys(path, cfg, ("graph", "random_sizes", "epochs", "warmup", "threads", "lr", "models"))
    if "graph" in cfg:
        choose(f"{path}.graph", cfg["graph"], ("auto", "random"), "graph")
    for key, lo in (("epochs", 1), ("warmup", 0), ("threads", 0)):
        if key in cfg:
            number(f"{path}.{key}", cfg[key], integer=True, lo=lo)
    if "lr" in cfg:
        number(f"{path}.lr", cfg["lr"], lo=0, lo_open=True)
    for key, value in mapping(f"{path}.random_sizes", cfg.get("random_sizes", {})).items():
        number(f"{path}.random_sizes.{key}", value, integer=True, lo=1)
    for label, spec in mapping(f"{path}.models", cfg.get("models", {})).items():
        spec = mapping(f"{path}.models.{label}", spec)
        check_model(f"{path}.models.{label}", spec.get("model"), spec.get("model_cfg"))


def check_energy(path: str, cfg: Any) -> None:
    """The ``energy`` section: which train entry's model it measures (``group``, ``entry``), the
    dataset that names its outputs in ``dvc.yaml``, and the traces' ``steps``, ``alpha``,
    ``attention`` (``ρ`` of eq. 12) and ``monotone_rtol``. That the entry exists and fits is
    :func:`check_energy_entry`."""
    cfg = mapping(path, cfg)
    keys(path, cfg, ENERGY_KEYS)
    for key in ENERGY_KEYS[:-1]:  # monotone_rtol has a default
        if key not in cfg:
            fail(path, dict(cfg), f"missing key {key!r}")
    # only Table 2's stages save their first run's model (dvc.yaml: --save-model)
    choose(f"{path}.group", cfg["group"], MODEL_GROUPS, "model-saving group")
    if not isinstance(cfg["entry"], str) or not cfg["entry"]:
        fail(f"{path}.entry", cfg["entry"], f"expected the name of an entry of {cfg['group']}")
    choose(f"{path}.dataset", cfg["dataset"], _datasets(), "dataset")
    number(f"{path}.steps", cfg["steps"], integer=True, lo=1)
    number(f"{path}.alpha", cfg["alpha"], lo=0, lo_open=True)
    check_attention(f"{path}.attention", cfg["attention"])
    if "monotone_rtol" in cfg:
        number(f"{path}.monotone_rtol", cfg["monotone_rtol"], lo=0)


def check_energy_entry(params: Mapping[str, Any]) -> None:
    """``energy.group`` / ``energy.entry`` name an entry present in ``params`` whose model is
    TWIRLS-base on the paper's eq. 6 (the traces measure eq. 1 / eq. 12 on its ``f(X; W)``), on
    ``energy.dataset``. Run on whole params (``check-params``) and on the ``energy`` stage's
    declared ones, which hold exactly that entry."""
    from twirls.params import params_file

    cfg = params["energy"]
    group, name = cfg["group"], cfg["entry"]
    entries = params.get(group) or {}
    if name not in entries:
        close = difflib.get_close_matches(name, list(entries), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        fail("energy.entry", name, f"no entry {name!r} in {params_file(group)}{hint}")
    entry = entries[name]
    model_cfg = entry.get("model_cfg") or {}
    where = f"{group}.{name}"
    if entry.get("model") != "twirls" or model_cfg.get("attention") is not None:
        fail("energy.entry", name, f"{where} must be TWIRLS-base (model: twirls, no attention): "
             "the traces start from its f(X; W)")
    if (model_cfg.get("variant", "paper") != "paper" or model_cfg.get("normalized", False)
            or model_cfg.get("prox_relu", False) or model_cfg.get("embedding", 0)):
        fail("energy.entry", name, f"{where} must use the paper's eq. 6 on node features "
             "(variant: paper, normalized/prox_relu/embedding unset): the traces measure "
             "eq. 1 / eq. 12 on Y")
    if entry.get("dataset") != cfg["dataset"]:
        fail("energy.dataset", cfg["dataset"], f"must be the dataset of {where} "
             f"({entry.get('dataset')!r}); dvc.yaml names the outputs and the data after it")


def _each(check: Callable[[str, Any], None]) -> Callable[[str, Any], None]:
    def run(path: str, group: Any) -> None:
        for name, entry in mapping(path, group).items():
            check(f"{path}.{name}", entry)
    return run


def _device(path: str, value: Any) -> None:
    if isinstance(value, str) and value.startswith("cuda:") and value[5:].isdigit():
        return
    choose(path, value, DEVICES, "device")


def _jobs(path: str, value: Any) -> None:
    if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        fail(path, value, "expected 'auto' (one worker per CPU core) or an integer >= 1")


def _train(path: str, value: Any) -> None:
    value = mapping(path, value)
    keys(path, value, ("seeds", "batch", "row_operator", "components"))
    if "seeds" in value:
        check_seeds(f"{path}.seeds", value["seeds"])
    if "batch" in value:
        check_batch(f"{path}.batch", value["batch"])
    for flag in ("row_operator", "components"):
        if flag in value:
            check_flag(f"{path}.{flag}", value[flag])


def _attack(path: str, value: Any) -> None:
    value = mapping(path, value)
    keys(path, value, ("datasets", "rate", "seed", "implementation", "device"))
    if "datasets" in value:
        names(f"{path}.datasets", value["datasets"], ATTACKED_DATASETS, "dataset")
    if "rate" in value:
        number(f"{path}.rate", value["rate"], lo=0, hi=1, lo_open=True, hi_open=True)
    if "seed" in value:
        number(f"{path}.seed", value["seed"], integer=True, lo=0)
    if "implementation" in value:
        choose(f"{path}.implementation", value["implementation"], ATTACK_IMPLEMENTATIONS,
               "implementation")
    if "device" in value:
        _device(f"{path}.device", value["device"])


def _datasets_list(path: str, value: Any) -> None:
    value = mapping(path, value)
    keys(path, value, ("datasets",))
    if "datasets" in value:
        names(f"{path}.datasets", value["datasets"], _datasets(), "dataset")


def _report(path: str, value: Any) -> None:
    value = mapping(path, value)
    keys(path, value, ("cells", "figures"))
    for key in ("cells", "figures"):
        items = value.get(key, [])
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            fail(f"{path}.{key}", items, "expected a list of names")


#: top-level key -> its check.
SECTIONS: dict[str, Callable[[str, Any], None]] = {
    "threads": lambda p, v: number(p, v, integer=True, lo=1),
    "jobs": _jobs,
    "budget_hours": lambda p, v: number(p, v, lo=0, lo_open=True),
    "device": _device,
    "train": _train,
    "attention": lambda p, v: check_attention(p, v),
    "attack": _attack,
    "fetch": _datasets_list,
    **{group: _each(check_train_entry) for group in TRAIN_GROUPS},
    "table4": check_table4,
    "table5": _datasets_list,
    **{group: check_sweep for group in SWEEP_GROUPS},
    **{group: _each(check_attacked_entry) for group in ATTACKED_GROUPS},
    "table9": check_table9,
    "table11": check_timing,
    "table12": check_table12,
    "energy": check_energy,
    "report": _report,
}


def check_params(params: Mapping[str, Any]) -> None:
    """Check every section present in ``params``; raise :class:`ConfigError` on the first bad
    value. An unknown top-level key is an error too (a misspelt group would be ignored)."""
    for key, value in mapping("(top level)", params).items():
        choose(key, key, tuple(SECTIONS), "top-level key")
        SECTIONS[key](key, value)
    if "energy" in params:
        check_energy_entry(params)
