"""Complete experiment entries from ``params.yaml``'s table groups.

A stage runs one *entry*: ``dataset``, ``model`` (or a DeepRobust ``defense``), ``cells`` (paper
table -> our row label), ``model_cfg``, ``train_cfg``, ``seeds``, ``split``, ``feature_norm``
and, on attacked data, ``graph``. The groups state only what differs; this module fills in the
rest: the dataset's defaults (:data:`twirls.data.defaults.DATASET_DEFAULTS`) and, for Table 4's
combinations, the shared per-dataset TWIRLS hyperparameters (``table4.twirls``) and labels.
"""

from __future__ import annotations

from typing import Any

from twirls.data.defaults import with_dataset_defaults

#: ``table4`` model names that are our TWIRLS rather than a DeepRobust/GNNGuard defense.
TWIRLS_ROWS = ("twirls-base", "twirls")

#: The graph of Table 4's own cells (our Mettack); TWIRLS on the others fills extra tables,
#: with the attention pinned in ``table4.extra_attention`` (stage :data:`TABLE4_EXTRA`).
TABLE4_GRAPH = "fast"
#: The stage family of TWIRLS on Table 4's other graphs (``table4-twirls-extra@<dataset>``).
TABLE4_EXTRA = "table4-twirls-extra"


def train_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry of a train-kind group (``table2``, ``table3``, ``table10``, ``variants``)."""
    return with_dataset_defaults(entry)


def seeds_and_batch(exp: dict[str, Any], train: dict[str, Any]) -> tuple[int, int]:
    """A train-kind entry's (:func:`train_entry`) seeds and the seeds a batched model trains at
    a time: its own ``seeds`` and ``batch``, else ``train.seeds`` and ``train.batch``
    (``train``: ``params["train"]``)."""
    return (int(exp.get("seeds", train["seeds"])),
            int(exp.get("batch", train.get("batch", 1))))


def curve_seeds(spec: dict[str, Any], seeds: int) -> int:
    """Runs per point of one curve of a sweep group: the curve's own ``seeds``, else the
    sweep's ``seeds``."""
    return int(spec.get("seeds", seeds))


def sweep_entry(spec: dict[str, Any], point: dict[str, Any], split: str) -> dict[str, Any]:
    """The entry of one curve of a sweep group (``table8``, ``figure2``, ...) at one grid point
    of its model (``point``, e.g. ``{"steps": 8, "alpha": 0.1}``, set over its ``model_cfg``),
    on ``split``."""
    return {**spec, "model_cfg": {**(spec.get("model_cfg") or {}), **point}, "split": split}


def table4_entry(table4: dict[str, Any], dataset: str, graph: str, model: str
                 ) -> dict[str, Any]:
    """One cell of Table 4's dataset x graph x model grid.

    ``model`` is a defense (``table4.defenses``) or ``twirls-base`` / ``twirls`` (the attention
    itself is added by the stage: the global ``attention`` params on :data:`TABLE4_GRAPH`,
    ``table4.extra_attention`` on the other graphs). ``table4`` holds only
    the keys the stage declares: ``tables.<graph>``, ``labels.<model>``, ``seeds.<model>`` and,
    for TWIRLS, ``twirls.<dataset>`` and ``also.<graph>``.
    """
    cells = {table4["tables"][graph]: table4["labels"][model]}
    entry: dict[str, Any] = {"dataset": dataset, "graph": graph,
                             "seeds": table4["seeds"][model], "cells": cells}
    if model in TWIRLS_ROWS:
        hyper = table4["twirls"][dataset]
        entry.update(model="twirls", model_cfg=dict(hyper["model_cfg"]),
                     train_cfg=dict(hyper["train_cfg"]))
        if model == "twirls":
            cells.update(table4["also"][graph])
    else:
        entry["defense"] = model
    return with_dataset_defaults(entry)


def table4_graphs(graphs: list[str], model: str, extras: bool = False) -> list[str]:
    """The graphs of ``graphs`` (``table4.graphs``) that a TWIRLS stage of Table 4 runs:
    TWIRLS-base every one (``table4-twirls-base@``); TWIRLS :data:`TABLE4_GRAPH`, Table 4's
    own cells (``table4-twirls@``, the global ``attention``), or with ``extras`` the others
    (:data:`TABLE4_EXTRA`, ``table4.extra_attention``)."""
    if model == "twirls-base":
        return list(graphs)
    return [g for g in graphs if (g == TABLE4_GRAPH) != extras]


def attacked_twirls_entry(entry: dict[str, Any], table4: dict[str, Any]) -> dict[str, Any]:
    """An entry of ``table9`` / ``variants-attacked``: TWIRLS on an attacked graph with Table 4's
    hyperparameters for its dataset (``table4.twirls.<dataset>``, seeds ``table4.seeds.twirls``),
    the entry's ``model_cfg`` keys overriding them (e.g. ``variant: reference``)."""
    hyper = table4["twirls"][entry["dataset"]]
    out = {"seeds": table4["seeds"]["twirls"], "model": "twirls", **entry,
           "model_cfg": {**hyper["model_cfg"], **(entry.get("model_cfg") or {})},
           "train_cfg": dict(hyper["train_cfg"])}
    return with_dataset_defaults(out)


def table9_entry(table9: dict[str, Any], table4: dict[str, Any], dataset: str, graph: str,
                 truncation: str, variant: str = "paper") -> dict[str, Any]:
    """One cell of Table 9: TWIRLS on ``graph`` of ``dataset`` with Table 4's hyperparameters for
    the dataset and the truncation ``T = table9.truncations[truncation]`` (a number, ``inf``, or
    ``tau``: T equal to tau) as the entry's attention override; the stage adds Table 9's pinned
    ``table9.attention``. The row label is ``TWIRLS[T=<truncation>]``. ``variant``: the
    propagation (``paper`` equations or the authors' ``reference`` code); the paper variant's
    cells go to ``table9.tables.<graph>``, the reference's to ``<that table>-reference``, and the
    report puts ``table9.primary``'s in the table (:func:`twirls.reports.results.with_primary`)."""
    hyper = table4["twirls"][dataset]
    table = table9["tables"][graph] + ("" if variant == "paper" else f"-{variant}")
    return with_dataset_defaults({
        "dataset": dataset, "graph": graph, "model": "twirls", "seeds": table9["seeds"],
        "model_cfg": {**hyper["model_cfg"], "variant": variant},
        "train_cfg": dict(hyper["train_cfg"]),
        "attention": {"T": table9["truncations"][truncation]},
        "cells": {table: f"TWIRLS[T={truncation}]"}, "grid": {"truncation": truncation}})
