"""Full-batch training with model selection on validation accuracy (the paper's protocol).

One run (:func:`train_run`): Adam with L2 weight decay (``torch.optim.Adam(weight_decay=…)``, as
the reference), ``epochs`` full-batch steps on the training nodes (a model with a
``loss_nodes(train)`` method, only SSE, picks each step's labelled batch; a model with a
``divergence`` note, only SSE, is stopped at its first epoch with a non-finite training loss,
a ``ValueError`` that the stage prints in one line, and none of its epochs is scored), and after
every step one evaluation of all nodes in eval mode under ``torch.no_grad()``. The reported
numbers are those of the epoch with the best validation score (ties go to the later epoch, as in
the reference's ``best <= now``); when the split has no validation nodes (Amazon) those of the
last epoch.

The score is accuracy for ``(n,)`` class labels, and IGNN's micro-F1 for ``(n, C)`` 0/1 label
rows (loss: BCE with logits; macro-F1 is recorded as ``extra["macro_f1"]``).

:func:`run_seeds` repeats a run for several seeds (seeding before the model is built) and gives
mean ± std (population std, ``ddof = 0``, as the reference's ``main.py``).
Same seed ⇒ bit-identical results on CPU.

On CUDA the epoch loop reads nothing back to the host: every epoch's loss and scores stay on the
GPU and are read in one transfer every :data:`HOST_READ_EVERY` epochs, where model selection and
early stopping replay those epochs in order (so the selected epoch and scores are the same as
with a read every epoch; a run with ``patience`` may train up to ``HOST_READ_EVERY - 1`` epochs
past its stopping point, which only costs time). On the CPU a read costs nothing and happens
every epoch.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F
from tqdm import tqdm

from twirls.data.graph import Split
from twirls.models.config import resolve_config
from twirls.models.graph_ops import GraphOps
from twirls.models.masks import MASKS, Masks, drawing_from
from twirls.train.metrics import accuracy_tensor, multilabel_f1_tensor

HOST_READ_EVERY = 32  # epochs between reads of the scores to the host on CUDA
SELECTIONS = ("best-val", "geom-gcn")  # TrainConfig.selection
GEOM_GCN_LR_FACTOR, GEOM_GCN_LR_PATIENCE = 0.8, 50  # train_GeomGCN.py's defaults


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation hyperparameters of one run.

    Args:
        epochs: number of full-batch training steps.
        lr: Adam learning rate.
        weight_decay: L2 penalty (Adam's ``weight_decay``).
        patience: stop after this many epochs without a new best validation score
            (``None``: never; the reference's ``--patience``).
        selection: which epoch a run reports. ``"best-val"``: the best validation score (the
            paper's protocol, see the module doc). ``"geom-gcn"``: the loop of Geom-GCN's
            authors (``train_GeomGCN.py``): patience counts the epochs in which the validation
            accuracy reached no new maximum *and* the validation loss no new minimum, the
            learning rate is multiplied by 0.8 after 50 epochs without a lower validation loss
            (``ReduceLROnPlateau``), and the scores are those of the last epoch (their saved
            "early" ``state_dict`` shares the live weights, so the test reads the last epoch).
        masks: where the dropout masks of a run trained alone come from. ``"torch"``: torch's
            generator, seeded with the run's seed (``F.dropout``'s ``bernoulli_``, ~12 ns an
            entry on the CPU). ``"fast"``: on the CPU, the seed's own stream of
            :class:`twirls.models.masks.Masks` (~1 ns an entry), the very masks the batched
            trainer draws for that seed (other masks than ``"torch"``'s, from the same
            distribution); on CUDA it is ``"torch"``. Batched runs take ``BatchConfig.masks``.
        progress: show a tqdm bar.
    """

    epochs: int = 500
    lr: float = 0.01
    weight_decay: float = 0.0
    patience: int | None = None
    selection: str = "best-val"
    masks: str = "torch"
    progress: bool = False

    def __post_init__(self) -> None:
        if self.selection not in SELECTIONS:
            raise ValueError(f"train config: selection {self.selection!r} is not one of "
                             f"{', '.join(SELECTIONS)}")
        if self.masks not in MASKS:
            raise ValueError(f"train config: masks {self.masks!r} is not one of "
                             f"{', '.join(MASKS)}")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> TrainConfig:
        return cls(**resolve_config("train", cfg, asdict(cls())))


@dataclass
class RunResult:
    """Outcome of one run; ``train/val/test`` are the scores at ``best_epoch`` (0-based)."""

    seed: int | None
    best_epoch: int
    train: float
    val: float
    test: float
    extra: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self, with_history: bool = False) -> dict[str, Any]:
        out = asdict(self)
        if not with_history:
            out.pop("history")
        return out


@dataclass
class SeedsResult:
    """Runs over several seeds with mean and (population) std of their scores; ``first_model``:
    the first run's weights after its last epoch (its ``state_dict``), when they were asked
    for."""

    runs: list[RunResult]
    first_model: dict[str, Tensor] | None = field(default=None, repr=False)

    def mean(self, key: str = "test") -> float:
        return statistics.fmean(self._values(key))

    def std(self, key: str = "test") -> float:
        return statistics.pstdev(self._values(key))

    def _values(self, key: str) -> list[float]:
        return [getattr(r, key) if hasattr(r, key) else r.extra[key] for r in self.runs]

    def summary(self) -> dict[str, Any]:
        keys = ["train", "val", "test", *self.runs[0].extra] if self.runs else []
        keys = [k for k in keys if not any(math.isnan(v) for v in self._values(k))]  # not scored
        return {
            "runs": len(self.runs),
            **{f"{k}_mean": self.mean(k) for k in keys},
            **{f"{k}_std": self.std(k) for k in keys},
            "seconds_mean": statistics.fmean(r.seconds for r in self.runs) if self.runs else 0.0,
        }

    def __str__(self) -> str:
        return f"test {100 * self.mean():.2f} ± {100 * self.std():.2f} ({len(self.runs)} runs)"


def set_seed(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _loss(logits: Tensor, labels: Tensor) -> Tensor:
    if labels.dim() == 2:
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
    return F.cross_entropy(logits, labels)


def score_names(labels: Tensor) -> list[str]:
    """Names of the entries of :func:`evaluate_tensor`, in order."""
    if labels.dim() == 2:
        return [f"{part}{suffix}" for part in ("train", "val", "test")
                for suffix in ("", "_macro_f1")]
    return ["train", "val", "test"]


def evaluate_tensor(model: nn.Module, ops: GraphOps, x: Tensor | None, labels: Tensor,
                    split: Split, val_loss: bool = False) -> Tensor:
    """Scores of :func:`evaluate` as one float64 tensor on the model's device (named by
    :func:`score_names`), so that training reads nothing back to the host; ``val_loss``: the
    validation loss of the same forward pass follows them."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(ops, x)
    model.train(was_training)
    parts = []
    for part in ("train", "val", "test"):
        idx = getattr(split, part)
        if labels.dim() == 2:
            parts.append(multilabel_f1_tensor(logits[idx], labels[idx]))
        else:
            parts.append(accuracy_tensor(logits[idx], labels[idx]).reshape(1))
    if val_loss:
        parts.append(_loss(logits[split.val], labels[split.val]).double().reshape(1))
    return torch.cat(parts)


def evaluate(model: nn.Module, ops: GraphOps, x: Tensor | None, labels: Tensor,
             split: Split) -> dict[str, float]:
    """Scores on ``train``/``val``/``test`` (one eval-mode forward, no grad); keys
    ``train, val, test`` and, for multi-label data, ``<part>_macro_f1``. The score is accuracy
    for class labels, micro-F1 for multi-label rows."""
    values = evaluate_tensor(model, ops, x, labels, split).tolist()
    return dict(zip(score_names(labels), values, strict=True))


def train_run(model: nn.Module, ops: GraphOps, x: Tensor | None, labels: Tensor, split: Split,
              cfg: TrainConfig, *, seed: int | None = None, desc: str = "",
              read_every: int | None = None) -> RunResult:
    """Train ``model`` once (see module doc). ``seed`` re-seeds torch before training (dropout;
    with ``cfg.masks == "fast"`` on the CPU it seeds the run's own mask stream instead, and is
    required); the model's initialisation is the caller's (see :func:`run_seeds`).
    ``read_every``: epochs between host reads of the scores (default: 1 on the CPU,
    :data:`HOST_READ_EVERY` else)."""
    if split.train.numel() == 0:
        raise ValueError("train_run: the split has no training nodes")
    device = ops.device
    model.to(device)
    x = None if x is None else x.to(device)
    labels = labels.to(device)
    split = Split(split.train.to(device), split.val.to(device), split.test.to(device))
    if seed is not None:
        set_seed(seed)
    with drawing_from(run_masks(cfg, seed, ops)):
        return _train(model, ops, x, labels, split, cfg, seed, desc, read_every)


def run_masks(cfg: TrainConfig, seed: int | None, ops: GraphOps) -> Masks | None:
    """The stream a run of ``seed`` draws its dropout masks from (``cfg.masks == "fast"`` on the
    CPU), or ``None``: torch's generator."""
    if cfg.masks != "fast" or ops.device.type != "cpu":
        return None
    if seed is None:
        raise ValueError("train_run: masks 'fast' draws from the run's seed; give seed=")
    return Masks([seed], "fast", ops.device, ops.dtype)


def run_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """A run's Adam with L2 weight decay; models with several weight-decay groups (GCNII:
    convolutions vs dense layers) say so (``param_groups``)."""
    params = (model.param_groups(cfg.weight_decay) if hasattr(model, "param_groups")
              else model.parameters())
    return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def _train(model: nn.Module, ops: GraphOps, x: Tensor | None, labels: Tensor, split: Split,
           cfg: TrainConfig, seed: int | None, desc: str, read_every: int | None) -> RunResult:
    """The epochs of :func:`train_run`, on the device's tensors."""
    device = ops.device
    optimizer = run_optimizer(model, cfg)
    has_val = split.val.numel() > 0
    best: dict[str, float] | None = None
    best_epoch, since_best = -1, 0
    history: list[dict[str, float]] = []
    names = ["loss", *score_names(labels)]
    read_every = read_every or (1 if device.type == "cpu" else HOST_READ_EVERY)
    geom = GeomGCNSelection(optimizer, split, labels) if cfg.selection == "geom-gcn" else None
    if geom is not None:
        names.append("val_loss")
        read_every = 1  # the learning rate follows each epoch's validation loss
    pending: list[Tensor] = []  # per epoch: loss and scores, still on the device
    start = time.perf_counter()
    bar = tqdm(total=cfg.epochs, desc=desc or type(model).__name__, disable=not cfg.progress,
               leave=False, dynamic_ncols=True)
    stop = False
    # SSE samples the labelled nodes of each parameter update; every other model takes them all
    sample_rows = getattr(model, "loss_nodes", None)
    # a model that names how it diverges (only SSE) is stopped, unscored, at a non-finite loss
    divergence = getattr(model, "divergence", None)
    for epoch in range(cfg.epochs):
        model.train()
        optimizer.zero_grad()
        batch = split.train if sample_rows is None else sample_rows(split.train)
        loss = _loss(model(ops, x)[batch], labels[batch])
        loss.backward()
        optimizer.step()
        scores = evaluate_tensor(model, ops, x, labels, split, val_loss=geom is not None)
        pending.append(torch.cat([loss.detach().double().reshape(1), scores]))
        if len(pending) < read_every and epoch < cfg.epochs - 1:
            continue
        first = epoch + 1 - len(pending)
        rows = torch.stack(pending).tolist()  # the one host read of these epochs
        pending = []
        for offset, row in enumerate(rows):
            record = {"epoch": first + offset, **dict(zip(names, row, strict=True))}
            if divergence is not None and not math.isfinite(record["loss"]):
                raise ValueError(
                    f"train_run: {type(model).__name__} diverged at epoch {record['epoch']} "
                    f"(training loss {record['loss']}): {divergence}; the run is stopped and "
                    "none of its epochs is scored")
            history.append(record)
            if geom is not None:  # the last epoch is reported; patience as Geom-GCN counts it
                best, best_epoch = record, record["epoch"]
                since_best = 0 if geom.step(record["val"], record["val_loss"]) else since_best + 1
            elif not has_val or best is None or record["val"] >= best["val"]:
                best, best_epoch, since_best = record, record["epoch"], 0
            else:
                since_best += 1
            if cfg.patience is not None and since_best >= cfg.patience:
                stop = True
                break
        bar.update(len(rows))
        if cfg.progress and best is not None:
            bar.set_postfix(loss=f"{history[-1]['loss']:.3f}", val=f"{history[-1]['val']:.3f}",
                            test_at_best=f"{best['test']:.3f}")
        if stop:
            break
    bar.close()
    if best is None:
        raise ValueError("train_run: epochs must be >= 1")
    extra = {k: v for k, v in best.items()
             if k not in ("epoch", "loss", "train", "val", "test", "val_loss")}
    return RunResult(seed=seed, best_epoch=best_epoch, train=best["train"], val=best["val"],
                     test=best["test"], extra=extra, history=history,
                     seconds=time.perf_counter() - start)


class GeomGCNSelection:
    """The bookkeeping of ``selection: geom-gcn`` (see :class:`TrainConfig`): the running maximum
    of the validation accuracy and minimum of the validation loss, and the learning-rate decay."""

    def __init__(self, optimizer: torch.optim.Optimizer, split: Split, labels: Tensor) -> None:
        if labels.dim() != 1 or split.val.numel() == 0:
            raise ValueError("train_run: selection 'geom-gcn' needs class labels and validation "
                             "nodes")
        self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, factor=GEOM_GCN_LR_FACTOR, patience=GEOM_GCN_LR_PATIENCE)
        self.max_acc, self.min_loss = 0.0, math.inf

    def step(self, val_acc: float, val_loss: float) -> bool:
        """Record one epoch; True when it reached a new best accuracy or loss (ties count)."""
        self.scheduler.step(val_loss)
        improved = val_acc >= self.max_acc or val_loss <= self.min_loss
        self.max_acc, self.min_loss = max(val_acc, self.max_acc), min(val_loss, self.min_loss)
        return improved


def seed_run(build_model: Callable[[], nn.Module], ops: GraphOps, x: Tensor | None,
             labels: Tensor, split: Split, cfg: TrainConfig, seed: int) -> RunResult:
    """One seeded run: :func:`set_seed`, ``build_model()``, :func:`train_run`. Everything random
    in it follows from ``seed``, so it gives the same result in any process (see
    :mod:`twirls.train.parallel`)."""
    return seed_model_run(build_model, ops, x, labels, split, cfg, seed)[1]


def seed_model_run(build_model: Callable[[], nn.Module], ops: GraphOps, x: Tensor | None,
                   labels: Tensor, split: Split, cfg: TrainConfig, seed: int
                   ) -> tuple[nn.Module, RunResult]:
    """:func:`seed_run` that also returns the trained model (its weights after the last epoch,
    as the run leaves them; the scores of ``RunResult`` are those of the best epoch)."""
    set_seed(seed)
    model = build_model()
    return model, train_run(model, ops, x, labels, split, cfg, seed=seed, desc=f"seed {seed}")


def run_seeds(build_model: Callable[[], nn.Module], ops: GraphOps, x: Tensor | None,
              labels: Tensor, split: Split, cfg: TrainConfig, seeds: Sequence[int],
              jobs: int = 1) -> SeedsResult:
    """:func:`seed_run` for each seed, in ``jobs`` worker processes (same results as one)."""
    from twirls.train.parallel import run_all

    if jobs > 1:
        cfg = replace(cfg, progress=False)  # one bar over the seeds, not one per worker
    runs = [partial(seed_run, build_model, ops, x, labels, split, cfg, seed) for seed in seeds]
    return SeedsResult(run_all(runs, jobs, desc="seeds", progress=cfg.progress or jobs > 1))
