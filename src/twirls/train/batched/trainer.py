"""Train ``K`` seeds of one configuration at once: :func:`run_seeds_batched` is
:func:`twirls.train.loop.run_seeds` with the seeds of a batch trained in one process, as one
batched model (:mod:`twirls.train.batched.models`).

Per seed, as :func:`~twirls.train.loop.train_run` does for one:

* initialisation: ``set_seed(s); build_model()``, exactly today's model of seed ``s``
  (:func:`~twirls.train.loop.seed_run`), whose parameters are then stacked;
* dropout masks: seed ``s``'s own random stream (:class:`~twirls.models.masks.Masks`;
  ``masks="torch"``: the very masks today's run of seed ``s`` draws);
* optimizer: one ``torch.optim.Adam`` over the stacked ``(K, ...)`` parameters with the loss
  ``Σ_k loss_k``. Adam (and its L2 ``weight_decay``) is elementwise and ``∂(Σ_j loss_j)/∂θ_k =
  ∂loss_k/∂θ_k`` (seed ``k``'s logits depend on ``θ_k`` alone), so this is ``K`` independent
  Adams, step counts included (all seeds step together);
* model selection and early stopping (:class:`Selection`): the best validation epoch, ties to
  the later one, ``patience`` counted per seed. A seed that has stopped leaves the batch
  (:func:`drop_stopped`: its slices of the parameters, Adam's moments and its mask stream are
  dropped, so the others train on without it: early-stopped configurations such as JKNet's
  spent 30-40 % of a batch's epochs on seeds that had stopped); the batch stops when every seed
  has stopped or the epochs run out.

The result of a seed does not depend on the other seeds of its batch, up to the rounding of the
batched kernels (which may round a seed's sums differently for another number of seeds in the
batch, so also once its batch-mates stop); a rerun of the same batch is bit-identical on the
same machine. Batches are ``batch`` consecutive seeds (a parameter, never the machine's core
count); ``jobs`` worker processes share the batches (:func:`twirls.train.parallel.run_all`:
the same results for any ``jobs``).

``RunResult.seconds`` is the batch's wall time divided by its number of seeds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from twirls.data.graph import Split
from twirls.models.graph_ops import GraphOps
from twirls.models.masks import MASKS, Masks
from twirls.train.batched.components import epoch_reads
from twirls.train.batched.models import Batched, stack_models
from twirls.train.loop import HOST_READ_EVERY, RunResult, SeedsResult, TrainConfig, set_seed
from twirls.train.parallel import run_all


@dataclass(frozen=True)
class BatchConfig:
    """How seeds are batched.

    Args:
        batch: seeds per batch (``None``: all seeds of a call in one batch).
        masks: dropout masks, ``"fast"`` or ``"torch"`` (today's masks), see
            :class:`~twirls.models.masks.Masks`.
        row_operator: the training forward computes the logits of the training nodes only,
            TWIRLS-base's through its dense row operator where that pays
            (:meth:`~twirls.train.batched.models.BatchedTWIRLS.forward_rows`), SGC's from
            those rows of its features alone, the closed form's from those rows of its
            inverse (and its evaluation forward the scored nodes' alone): the same function,
            other rounding, so other results than ``False`` (SGC's came out the same bits on
            this project's EPYC).
        components: the training step on the connected components that hold a training node,
            the evaluation on those that hold a scored node
            (:mod:`~twirls.train.batched.components`): the same function, fewer rows where the
            graph has components without such nodes (Citeseer: 68 % and 93 % of its rows),
            other masks and rounding, so other results than ``False``.
    """

    batch: int | None = None
    masks: str = "fast"
    row_operator: bool = False
    components: bool = False

    def __post_init__(self) -> None:
        if self.batch is not None and (isinstance(self.batch, bool) or self.batch < 1):
            raise ValueError(f"batch must be None or an integer >= 1, got {self.batch!r}")
        if self.masks not in MASKS:
            raise ValueError(f"masks must be one of {MASKS}, got {self.masks!r}")


@dataclass
class Selection:
    """One seed's model selection, record by record, exactly as ``train_run``'s ``best-val``:
    the best validation score wins, ties go to the later epoch, every epoch is best without
    validation nodes; ``patience`` epochs without a new best stop the seed."""

    has_val: bool = True
    patience: int | None = None
    best: dict[str, float] | None = None
    since_best: int = 0
    stopped: bool = False
    history: list[dict[str, float]] = field(default_factory=list)

    def update(self, record: dict[str, float]) -> None:
        """Record one epoch (ignored once stopped)."""
        if self.stopped:
            return
        self.history.append(record)
        if not self.has_val or self.best is None or record["val"] >= self.best["val"]:
            self.best, self.since_best = record, 0
        else:
            self.since_best += 1
        if self.patience is not None and self.since_best >= self.patience:
            self.stopped = True


def batch_loss(logits: Tensor, labels: Tensor, idx: Tensor | None = None) -> Tensor:
    """``(K,)`` per-seed cross-entropy on the nodes ``idx`` (each seed's mean); ``idx=None``:
    ``logits`` ``(K, r, C)`` are those nodes' already, ``labels`` their ``(r,)`` labels."""
    num, _, classes = logits.shape
    part = logits if idx is None else logits.index_select(1, idx)
    target = (labels if idx is None else labels.index_select(0, idx)).repeat(num)
    losses = F.cross_entropy(part.reshape(-1, classes), target, reduction="none")
    return losses.view(num, -1).mean(1)


def scored_rows(split: Split) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor]]:
    """The nodes an epoch's scores read (train, val and test, sorted, each once) and the
    positions of the train, val and test nodes among them."""
    parts = (split.train, split.val, split.test)
    rows = torch.unique(torch.cat(parts))
    return rows, tuple(torch.searchsorted(rows, idx) for idx in parts)  # type: ignore[return-value]


def eval_rows_of(net: Batched, split: Split, row_operator: bool
                 ) -> tuple[Tensor, tuple[Tensor, ...]] | None:
    """What :func:`batch_scores` is given as ``rows`` in a batch: :func:`scored_rows` under
    ``row_operator`` for a model whose evaluation reads them (:attr:`Batched.scores_rows`),
    else ``None``."""
    return scored_rows(split) if row_operator and net.scores_rows else None


def batch_scores(net: Batched, ops: GraphOps, x: Tensor | None, labels: Tensor,
                 split: Split, rows: tuple[Tensor, tuple[Tensor, ...]] | None = None) -> Tensor:
    """``(K, 3)`` float64 accuracies on train, val, test (one eval forward, no grad), as
    :func:`twirls.train.metrics.accuracy_tensor` computes them. ``rows``
    (:func:`scored_rows`): the eval forward computes the logits of those nodes alone
    (:meth:`Batched.forward_rows`); ``None``: of every node."""
    parts = (split.train, split.val, split.test)
    was_training = net.training
    net.eval()
    with torch.no_grad():
        if rows is None:
            pred, at = net(ops, x).argmax(-1), parts
        else:
            pred, at = net.forward_rows(ops, x, None, rows[0]).argmax(-1), rows[1]
    net.train(was_training)
    cols = [(pred.index_select(1, pos) == labels.index_select(0, idx)).sum(1, dtype=torch.float64)
            / idx.numel() for pos, idx in zip(at, parts, strict=True)]
    return torch.stack(cols, 1)


def make_optimizer(net: Batched, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam with L2 weight decay over the stacked parameters, as ``train_run``'s
    (:func:`~twirls.train.loop.run_optimizer`, the model's weight-decay groups included:
    :meth:`Batched.param_groups`), fused: one pass over memory a step instead of ~10 (the same
    update up to rounding)."""
    return torch.optim.Adam(net.param_groups(cfg.weight_decay), lr=cfg.lr,
                            weight_decay=cfg.weight_decay, fused=True)


def stacked_model(build_model: Callable[[], nn.Module], seeds: Sequence[int],
                  device: torch.device) -> Batched:
    """Today's initialisation of each seed (``set_seed(s); build_model()``, as
    :func:`~twirls.train.loop.seed_run`), stacked into one batched model."""
    models = []
    for seed in seeds:
        set_seed(seed)
        models.append(build_model().to(device))
    return stack_models(models)


def train_step(net: Batched, ops: GraphOps, x: Tensor | None, labels: Tensor, split: Split,
               draws: Masks, optimizer: torch.optim.Optimizer, *, row_operator: bool = False,
               train_labels: Tensor | None = None) -> Tensor:
    """One training epoch of every seed of ``net``: forward with the seeds' dropout masks
    ``draws``, ``(K,)`` losses on the training nodes, backward of their sum, one optimizer step.
    ``row_operator``: the logits of the training nodes alone (:meth:`Batched.forward_rows`);
    ``train_labels``: their labels, if already gathered. Returns the losses."""
    net.train()
    optimizer.zero_grad()
    if row_operator:
        if train_labels is None:
            train_labels = labels.index_select(0, split.train)
        losses = batch_loss(net.forward_rows(ops, x, draws, split.train), train_labels)
    else:
        losses = batch_loss(net(ops, x, draws), labels, split.train)
    losses.sum().backward()
    optimizer.step()
    return losses


def train_batch(build_model: Callable[[], nn.Module], ops: GraphOps, x: Tensor | None,
                labels: Tensor, split: Split, cfg: TrainConfig, seeds: Sequence[int],
                masks: str = "fast", *, row_operator: bool = False, components: bool = False,
                keep_models: bool = False, read_every: int | None = None
                ) -> list[RunResult] | tuple[list[RunResult], Any]:
    """Train the seeds ``seeds`` as one batch (see module doc); one :class:`RunResult` per seed,
    in order. ``row_operator``, ``components``: see :class:`BatchConfig`. ``keep_models``: also
    return each seed's weights after its last epoch (its ``state_dict``; the epoch it stopped
    at, or the last)."""
    if cfg.selection != "best-val":
        raise NotImplementedError("batched training: only selection 'best-val'")
    if labels.dim() != 1:
        raise NotImplementedError("batched training: only class labels (no multi-label F1)")
    if split.train.numel() == 0:
        raise ValueError("train_batch: the split has no training nodes")
    if cfg.epochs < 1:
        raise ValueError("train_batch: epochs must be >= 1")
    device = ops.device
    net = stacked_model(build_model, seeds, device)
    x = None if x is None else x.to(device)
    labels = labels.to(device)
    split = Split(split.train.to(device), split.val.to(device), split.test.to(device))
    draws = Masks(seeds, masks, device, ops.dtype)
    trains, scores = epoch_reads(ops, x, labels, split, components)
    train_labels = labels.index_select(0, split.train)
    eval_rows = eval_rows_of(net, scores.split, row_operator)
    optimizer = make_optimizer(net, cfg)
    selections = [Selection(split.val.numel() > 0, cfg.patience) for _ in seeds]
    kept: list[dict[str, Tensor] | None] = [None] * len(seeds)
    active = list(range(len(seeds)))  # the seeds (their index in ``seeds``) still in the batch
    read_every = read_every or (1 if device.type == "cpu" else HOST_READ_EVERY)
    pending: list[Tensor] = []
    start = time.perf_counter()
    for epoch in range(cfg.epochs):
        losses = train_step(net, trains.ops, trains.x, trains.labels, trains.split, draws,
                            optimizer, row_operator=row_operator, train_labels=train_labels)
        accuracies = batch_scores(net, scores.ops, scores.x, scores.labels, scores.split,
                                  eval_rows)
        pending.append(torch.cat([losses.detach().double().unsqueeze(1), accuracies], 1))
        if len(pending) < read_every and epoch < cfg.epochs - 1:
            continue
        first = epoch + 1 - len(pending)
        rows = torch.stack(pending).tolist()  # (epochs, K, 4): the one host read
        pending = []
        for offset, row in enumerate(rows):
            for pos, values in enumerate(row):
                sel = selections[active[pos]]
                was_stopped = sel.stopped
                sel.update({"epoch": first + offset,
                            **dict(zip(("loss", "train", "val", "test"), values, strict=True))})
                if keep_models and sel.stopped and not was_stopped:
                    kept[active[pos]] = net.seed_state(pos)  # as train_run leaves it
        if all(sel.stopped for sel in selections):
            break
        alive = [pos for pos, k in enumerate(active) if not selections[k].stopped]
        if len(alive) < len(active):
            optimizer = drop_stopped(net, optimizer, draws, alive, cfg)
            active = [active[pos] for pos in alive]
    seconds = (time.perf_counter() - start) / len(seeds)
    results = []
    for seed, sel in zip(seeds, selections, strict=True):
        best = sel.best
        assert best is not None
        results.append(RunResult(seed=seed, best_epoch=best["epoch"], train=best["train"],
                                 val=best["val"], test=best["test"], history=sel.history,
                                 seconds=seconds))
    if not keep_models:
        return results
    return results, [net.seed_state(active.index(k)) if w is None else w
                     for k, w in enumerate(kept)]


def drop_stopped(net: Batched, optimizer: torch.optim.Optimizer, draws: Masks,
                 alive: Sequence[int], cfg: TrainConfig) -> torch.optim.Optimizer:
    """Keep only the seeds at positions ``alive`` of the batch: their slices of ``net``'s
    stacked parameters (:meth:`Batched.keep_seeds`) and their mask streams. Returns the
    optimizer over the new parameters, with their slices of ``optimizer``'s state (Adam's
    moments; the step count is shared)."""
    index = torch.tensor(list(alive), device=next(net.parameters()).device)
    pairs = net.keep_seeds(index)
    draws.keep(alive)
    fresh = make_optimizer(net, cfg)
    for old, new in pairs:
        state = optimizer.state.get(old)
        if state:
            fresh.state[new] = {name: value.index_select(0, index)
                                if torch.is_tensor(value) and value.shape == old.shape else value
                                for name, value in state.items()}
    return fresh


def batch_runs(build_model: Callable[[], nn.Module], ops: GraphOps, x: Tensor | None,
               labels: Tensor, split: Split, cfg: TrainConfig, seeds: Sequence[int],
               batch: BatchConfig | None = None) -> list[Callable[[], list[RunResult]]]:
    """The batches of ``batch.batch`` seeds of ``seeds`` (in order), each a :func:`train_batch`
    not yet started."""
    batch = batch or BatchConfig()
    seeds = list(seeds)
    size = batch.batch or max(len(seeds), 1)
    return [partial(train_batch, build_model, ops, x, labels, split, cfg, seeds[i:i + size],
                    batch.masks, row_operator=batch.row_operator,
                    components=batch.components)
            for i in range(0, len(seeds), size)]


def run_seeds_batched(build_model: Callable[[], nn.Module], ops: GraphOps, x: Tensor | None,
                      labels: Tensor, split: Split, cfg: TrainConfig, seeds: Sequence[int],
                      batch: BatchConfig | None = None, jobs: int = 1,
                      keep_first_model: bool = False) -> SeedsResult:
    """:func:`twirls.train.loop.run_seeds` in batches of ``batch.batch`` seeds
    (:func:`train_batch`), the batches in ``jobs`` worker processes; one :class:`SeedsResult`
    over all seeds, in order. ``keep_first_model``: also the first seed's weights after its last
    epoch (``SeedsResult.first_model``)."""
    return run_batches(batch_runs(build_model, ops, x, labels, split, cfg, seeds, batch), jobs,
                       keep_first_model, cfg.progress)


def run_batches(batches: Sequence[Callable[[], list[RunResult]]], jobs: int = 1,
                keep_first_model: bool = False, progress: bool = False) -> SeedsResult:
    """The batches of :func:`batch_runs` (of one split or of several), in ``jobs`` worker
    processes; one :class:`SeedsResult` over all their seeds, in order. ``keep_first_model``:
    also the first seed's weights after its last epoch (``SeedsResult.first_model``)."""
    runs: list[Callable[[], Any]] = list(batches)
    if keep_first_model and runs:
        runs[0] = partial(runs[0], keep_models=True)
    results = run_all(runs, jobs, desc="batches", progress=progress)
    first_model = None
    if keep_first_model and results:
        results[0], weights = results[0]
        first_model = weights[0]
    return SeedsResult([r for chunk in results for r in chunk], first_model=first_model)
