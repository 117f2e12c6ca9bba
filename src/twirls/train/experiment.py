"""Run one experiment entry of ``params.yaml`` (model, dataset, seeds, splits) and turn the
outcome into report cells. Shared by the stages ``train@``, ``robust@``, ``sweep@`` and
``energy``, so it lives in the library (declared as a dependency of each) and not in a stage.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from twirls.cells import Cell, run_rows, selector
from twirls.data.graph import GraphData
from twirls.models import MODELS, GraphOps, build_model
from twirls.train.loop import RunResult, SeedsResult, TrainConfig, seed_model_run, seed_run
from twirls.train.parallel import run_all

if TYPE_CHECKING:
    from twirls.train.batched import BatchConfig

SPARSE_BELOW = 0.1  # feature density under which models that accept it get sparse CSR features


def metric_name(data: GraphData) -> str:
    return "micro_f1" if data.labels.dim() == 2 else "accuracy"


def prepare_features(features: torch.Tensor, exp: dict[str, Any]) -> torch.Tensor:
    """Row-normalised features (``feature_norm: row``, the default, as DGL's loaders give the
    authors' code for bag-of-words data), or the raw ones (``feature_norm: none``; ogbn-arxiv's
    word2vec features, which the OGB scripts and the authors' code use as they are).

    Row normalisation divides by the row sum, which only means something for nonnegative
    features: signed ones (e.g. word2vec) are refused with a message instead of being blown up.
    """
    mode = exp.get("feature_norm", "row")
    if mode == "none":
        return features
    if mode != "row":
        raise ValueError(f"feature_norm must be 'row' or 'none', got {mode!r}")
    if bool((features < 0).any()):
        raise ValueError(
            f"experiment on {exp.get('dataset', '?')}: the features have negative entries, so "
            "row normalisation (divide by the row sum) is undefined; set 'feature_norm: none' "
            "in its params.yaml entry (or in twirls/data/defaults.py for the dataset).")
    return features / features.sum(1, keepdim=True).clamp(min=1e-12)


def check_model(exp: dict[str, Any], where: str) -> None:
    """An unknown model name is a ``ValueError`` naming the entry (before anything runs)."""
    if exp["model"] not in MODELS:
        raise ValueError(f"{where}: unknown model {exp['model']!r}; known: {', '.join(MODELS)}")


@dataclass(frozen=True)
class RunInputs:
    """What every run of one experiment entry shares (:func:`run_inputs`)."""

    ops: GraphOps
    x: torch.Tensor | None  # prepared features; sparse CSR for bag-of-words (SPARSE_BELOW)
    build: Callable[[], nn.Module]  # a fresh, unseeded model of the entry
    cfg: TrainConfig
    splits: list[str]  # the selected splits, in order: split ``i`` uses the seeds ``1000 i + s``


def selected_splits(exp: dict[str, Any], data: GraphData) -> list[str]:
    """The splits ``exp`` runs on (its ``split``, default ``all``: every split of ``data``)."""
    splits = list(data.splits) if exp.get("split", "all") == "all" else [exp["split"]]
    missing = [s for s in splits if s not in data.splits]
    if missing:
        raise ValueError(f"experiment on {data.name}: no split {missing[0]!r}; "
                         f"the dataset has {', '.join(data.splits)}")
    return splits


def run_inputs(exp: dict[str, Any], data: GraphData, device: torch.device,
               progress: bool = True) -> RunInputs:
    """The graph, features, model builder, training config and splits of ``exp`` on ``data``:
    everything :func:`experiment_runs` gives each run. ``progress``: each run's tqdm bar."""
    splits = selected_splits(exp, data)
    ops = GraphOps.from_graph(data.graph, device=device)
    x = None if data.features is None else prepare_features(data.features, exp).to(device)
    model_cls = MODELS[exp["model"]]
    if x is not None and getattr(model_cls, "accepts_sparse", False):
        if (x != 0).float().mean() < SPARSE_BELOW:
            with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
                warnings.simplefilter("ignore", UserWarning)
                x = x.to_sparse_csr()  # bag-of-words: the first layer costs O(nnz), ~10x faster
    if (x is None and not (exp.get("model_cfg") or {}).get("embedding")
            and not getattr(model_cls, "accepts_no_features", False)):
        raise ValueError(f"{data.name} has no node features, so model {exp['model']!r} needs a "
                         "learned input per node: set its model_cfg.embedding (the paper "
                         "learns 128 numbers per node on Amazon)")
    in_dim = 0 if data.features is None else data.num_features
    # models that need more of the dataset than its graph and features name it (meta_keys)
    meta = {key: data.meta.get(key) for key in getattr(model_cls, "meta_keys", ())}
    build = partial(build_model, exp["model"], exp.get("model_cfg"), in_dim, data.num_classes,
                    num_nodes=data.num_nodes, **meta)
    cfg = replace(TrainConfig.from_config(exp.get("train_cfg")), progress=progress)
    return RunInputs(ops, x, build, cfg, splits)


def experiment_runs(exp: dict[str, Any], data: GraphData, seeds: int, device: torch.device,
                    progress: bool = True) -> list[Callable[[], RunResult]]:
    """One seeded run (:func:`twirls.train.loop.seed_run`) per seed and selected split of
    ``data`` (:func:`run_inputs`), not yet started: split ``i`` uses the seeds ``1000 i + s``.
    ``progress``: each run's tqdm bar over its epochs."""
    return [partial(seed_run, *args) for args in _run_args(exp, data, seeds, device, progress)]


def _run_args(exp: dict[str, Any], data: GraphData, seeds: int, device: torch.device,
              progress: bool) -> list[tuple[Any, ...]]:
    """The arguments of :func:`seed_run` for each run of :func:`experiment_runs`, in order."""
    inp = run_inputs(exp, data, device, progress)
    return [(inp.build, inp.ops, inp.x, data.labels, data.splits[split], inp.cfg, 1000 * i + s)
            for i, split in enumerate(inp.splits) for s in range(seeds)]


def _keeping_model(*args: Any) -> tuple[RunResult, dict[str, torch.Tensor]]:
    """:func:`seed_run` that also returns its model's weights after the last epoch: what a
    worker sends back for the run whose model a stage saves."""
    model, result = seed_model_run(*args)
    return result, model.state_dict()


def not_batchable(inp: RunInputs, labels: torch.Tensor) -> str:
    """Why the runs of ``inp`` cannot train as batches of seeds
    (:mod:`twirls.train.batched`), or ``""`` when they can."""
    from twirls.train.batched import stack_models

    if inp.cfg.selection != "best-val":
        return f"model selection {inp.cfg.selection!r}"
    if labels.dim() != 1:
        return "multi-label targets"
    try:
        stack_models([inp.build()])
    except NotImplementedError as exc:
        return str(exc).removeprefix("batched training: ")
    return ""


def run_experiment(exp: dict[str, Any], data: GraphData, seeds: int, device: torch.device,
                   progress: bool = True, jobs: int = 1, keep_first_model: bool = False,
                   before: Callable[[list[partial]], Any] | None = None,
                   batch: int = 1, row_operator: bool = False, components: bool = False
                   ) -> SeedsResult:
    """Every seed on every selected split of ``data`` (:func:`experiment_runs`), in ``jobs``
    worker processes; one :class:`SeedsResult` over all runs, in order. ``progress``: tqdm bars
    on stderr (one over the runs; with one job, also each run's epochs). ``keep_first_model``:
    also return the first run's trained weights (``SeedsResult.first_model``). ``before``:
    called with the runs (``seed_run`` partials) before any starts, e.g. the stage's budget
    check (:func:`twirls.stages.budget.check_budget`), which may stop the stage. ``batch``
    (``train.batch``, set next to ``train.seeds``): above 1, the seeds of each split train
    ``batch`` at a time as one batched model (:func:`twirls.train.batched.run_seeds_batched`;
    the same protocol, other dropout masks), where the model allows it; else, at 1, and with
    one seed per split (a batch of one shares nothing), one seed per run. ``row_operator``
    (``train.row_operator``): batched TWIRLS-base's, SGC's and the closed form's training
    forward on the training nodes alone; ``components`` (``train.components``): batched
    training on the connected components that hold the nodes an epoch reads
    (:class:`twirls.train.batched.BatchConfig`)."""
    args = _run_args(exp, data, seeds, device, progress=progress and jobs <= 1)
    runs: list[Callable[[], Any]] = [partial(seed_run, *a) for a in args]
    if before is not None:
        before(list(runs))
    inp = batch_inputs(exp, data, seeds, device, batch)
    if inp is not None:
        from twirls.train.batched import BatchConfig

        return _batched(inp, data, seeds, BatchConfig(batch=batch, row_operator=row_operator,
                                                      components=components),
                        jobs, keep_first_model, progress)
    if keep_first_model and runs:
        runs[0] = partial(_keeping_model, *args[0])
    results = run_all(runs, jobs, desc="runs", progress=progress)
    if keep_first_model and results:
        results[0], weights = results[0]
        return SeedsResult(results, first_model=weights)
    return SeedsResult(results)


def batch_inputs(exp: dict[str, Any], data: GraphData, seeds: int, device: torch.device,
                 batch: int) -> RunInputs | None:
    """The inputs (:func:`run_inputs`) of ``exp``'s runs when its seeds train ``batch`` at a
    time as one batched model (:mod:`twirls.train.batched`); ``None`` when they train one seed
    per run: ``batch`` 1, one seed per split (a batch of one shares nothing), or a model the
    batched trainer lacks (:func:`not_batchable`, said in one line on stderr)."""
    if batch <= 1 or seeds <= 1:
        return None
    inp = run_inputs(exp, data, device, progress=False)
    why = not_batchable(inp, data.labels)
    if why:
        print(f"batch {batch}: {exp['model']} on {data.name} trains one seed per run ({why})",
              file=sys.stderr)
        return None
    return inp


def seed_runs(exp: dict[str, Any], data: GraphData, seeds: int, device: torch.device,
              batch: int = 1, progress: bool = True, row_operator: bool = False,
              components: bool = False) -> list[Callable[[], RunResult | list[RunResult]]]:
    """The runs of ``exp``, not yet started, for a pool (:func:`twirls.train.parallel.run_all`):
    with ``batch`` (set next to the seeds: ``train.batch``, a sweep's or Table 4/9's own) above
    1, ``batch`` seeds of each split at a time as one batched model
    (:func:`twirls.train.batched.batch_runs`, each returning its seeds' results) where
    :func:`batch_inputs` allows it; else one seed per run (:func:`experiment_runs`). Either
    way :func:`flat_results` of their outcomes are the runs in :func:`experiment_runs`'
    order. ``row_operator``, ``components``: see :func:`run_experiment`."""
    from twirls.train.batched import BatchConfig

    inp = batch_inputs(exp, data, seeds, device, batch)
    if inp is None:
        return experiment_runs(exp, data, seeds, device, progress=progress)
    return split_batches(inp, data, seeds, BatchConfig(batch=batch, row_operator=row_operator,
                                                       components=components))


def split_batches(inp: RunInputs, data: GraphData, seeds: int, batch: BatchConfig
                  ) -> list[Callable[[], list[RunResult]]]:
    """The batches of ``batch.batch`` seeds of every split of ``inp`` (split ``i`` with the
    seeds ``1000 i + s``), split by split, not yet started
    (:func:`twirls.train.batched.batch_runs`)."""
    from twirls.train.batched import batch_runs

    return [run for i, split in enumerate(inp.splits)
            for run in batch_runs(inp.build, inp.ops, inp.x, data.labels, data.splits[split],
                                  inp.cfg, [1000 * i + s for s in range(seeds)], batch)]


def flat_results(outcomes: list[RunResult | list[RunResult]]) -> list[RunResult]:
    """The outcomes of :func:`seed_runs` (a run's result, or a batch's list of them) as one
    list of runs, in order."""
    return [r for out in outcomes for r in (out if isinstance(out, list) else [out])]


def _batched(inp: RunInputs, data: GraphData, seeds: int, batch: BatchConfig, jobs: int,
             keep_first_model: bool, progress: bool) -> SeedsResult:
    """:func:`run_experiment`'s runs as batches of ``batch.batch`` seeds
    (:func:`split_batches`), every split's batches in one pool of ``jobs`` workers (split by
    split, a split of one batch would leave the other workers idle)."""
    from twirls.train.batched import run_batches

    inp = replace(inp, cfg=replace(inp.cfg, progress=progress))
    return run_batches(split_batches(inp, data, seeds, batch), jobs, keep_first_model, progress)


def row_identity(exp: dict[str, Any], table: str, label: str
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The identity columns and grid point of the runs of ``exp`` behind its cell ``label`` of
    ``table`` (:mod:`twirls.cells`). An entry with a ``grid`` (its values by key, e.g.
    Table 9's ``{"truncation": "inf"}``) gets those columns, and its model is the cell's label
    before the grid (``TWIRLS[T=inf]`` -> ``TWIRLS``)."""
    grid = exp.get("grid") or {}
    variant = ((exp.get("model_cfg") or {}).get("variant", "paper")
               if exp.get("model") == "twirls" else "")
    return {"table": table, "dataset": exp["dataset"], "graph": exp.get("graph", "clean"),
            "model": label.split("[", 1)[0] if grid else label, "variant": variant}, grid


def rows_for(exp: dict[str, Any], metric: str, result: SeedsResult | None, splits: list[str],
             device: str) -> list[dict[str, Any]]:
    """The rows (:mod:`twirls.cells`) of ``result``, once per cell of ``exp``: the same
    runs as :func:`cells_for`'s cells; none without a result."""
    if result is None:
        return []
    rows = []
    for table, label in exp["cells"].items():
        identity, grid = row_identity(exp, table, label)
        rows += run_rows(result, identity=identity, metric=metric, splits=splits,
                         device=device, grid=grid)
    return rows


def cells_for(exp: dict[str, Any], metric: str, result: SeedsResult | None,
              reason: str = "") -> list[Cell]:
    """The cells of ``exp`` (``cells``: table -> model label): mean and std of ``result``'s
    test scores in percent, which rows to find its runs in (``extra.rows``), or ``no-data``
    with ``reason``."""
    out = []
    for table, label in exp["cells"].items():
        if result is None:
            out.append(Cell(table, exp["dataset"], label, metric, status="no-data", note=reason))
            continue
        scores = [100 * r.test for r in result.runs]
        out.append(Cell(table, exp["dataset"], label, metric, mean=100 * result.mean(),
                        std=100 * result.std(), runs=len(result.runs),
                        note=exp.get("note", ""),
                        extra={"test_per_run": scores,
                               "best_epoch_per_run": [r.best_epoch for r in result.runs],
                               "variant": (exp.get("model_cfg") or {}).get("variant", "paper"),
                               "rows": selector(*row_identity(exp, table, label))}))
    return out
