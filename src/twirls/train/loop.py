"""Full-batch training with model selection on validation accuracy (the paper's protocol).

One run (:func:`train_run`): Adam with L2 weight decay (``torch.optim.Adam(weight_decay=…)``, as
the reference), ``epochs`` full-batch steps on the training nodes, and after every step one
evaluation of all nodes in eval mode under ``torch.no_grad()``. The reported numbers are those
of the epoch with the best validation score (ties go to the later epoch, as in the reference's
``best <= now``); when the split has no validation nodes (Amazon) those of the last epoch.

The score is accuracy for ``(n,)`` class labels, and IGNN's micro-F1 for ``(n, C)`` 0/1 label
rows (loss: BCE with logits; macro-F1 is recorded as ``extra["macro_f1"]``).

:func:`run_seeds` repeats a run for several seeds (seeding before the model is built) and gives
mean ± std (population std, ``ddof = 0``, as the reference's ``main.py``).
Same seed ⇒ bit-identical results on CPU.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F
from tqdm import tqdm

from twirls.data.graph import Split
from twirls.models.config import resolve_config
from twirls.models.graph_ops import GraphOps
from twirls.train.metrics import accuracy, multilabel_f1


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation hyperparameters of one run.

    Args:
        epochs: number of full-batch training steps.
        lr: Adam learning rate.
        weight_decay: L2 penalty (Adam's ``weight_decay``).
        patience: stop after this many epochs without a new best validation score
            (``None``: never; the reference's ``--patience``).
        progress: show a tqdm bar.
    """

    epochs: int = 500
    lr: float = 0.01
    weight_decay: float = 0.0
    patience: int | None = None
    progress: bool = False

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
    """Runs over several seeds with mean and (population) std of their scores."""

    runs: list[RunResult]

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


def _score(logits: Tensor, labels: Tensor) -> tuple[float, dict[str, float]]:
    if labels.dim() == 2:
        micro, macro = multilabel_f1(logits, labels)
        return micro, {"macro_f1": macro}
    return accuracy(logits, labels), {}


def evaluate(model: nn.Module, ops: GraphOps, x: Tensor | None, labels: Tensor,
             split: Split) -> dict[str, float]:
    """Scores on ``train``/``val``/``test`` (one eval-mode forward, no grad); keys
    ``train, val, test`` and, for multi-label data, ``<part>_macro_f1``."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(ops, x)
    model.train(was_training)
    out: dict[str, float] = {}
    for part in ("train", "val", "test"):
        idx = getattr(split, part)
        score, extra = _score(logits[idx], labels[idx])
        out[part] = score
        out.update({f"{part}_{k}": v for k, v in extra.items()})
    return out


def train_run(model: nn.Module, ops: GraphOps, x: Tensor | None, labels: Tensor, split: Split,
              cfg: TrainConfig, *, seed: int | None = None, desc: str = "") -> RunResult:
    """Train ``model`` once (see module doc). ``seed`` re-seeds torch before training (dropout);
    the model's initialisation is the caller's (see :func:`run_seeds`)."""
    if split.train.numel() == 0:
        raise ValueError("train_run: the split has no training nodes")
    device = ops.device
    model.to(device)
    x = None if x is None else x.to(device)
    labels = labels.to(device)
    split = Split(split.train.to(device), split.val.to(device), split.test.to(device))
    if seed is not None:
        set_seed(seed)
    # models with several weight-decay groups (GCNII: convolutions vs dense layers) say so
    params = (model.param_groups(cfg.weight_decay) if hasattr(model, "param_groups")
              else model.parameters())
    optimizer = torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    has_val = split.val.numel() > 0
    best: dict[str, float] | None = None
    best_epoch, since_best = -1, 0
    history: list[dict[str, float]] = []
    start = time.perf_counter()
    bar = tqdm(range(cfg.epochs), desc=desc or type(model).__name__, disable=not cfg.progress,
               leave=False, dynamic_ncols=True)
    for epoch in bar:
        model.train()
        optimizer.zero_grad()
        loss = _loss(model(ops, x)[split.train], labels[split.train])
        loss.backward()
        optimizer.step()
        scores = evaluate(model, ops, x, labels, split)
        history.append({"epoch": epoch, "loss": float(loss), **scores})
        if not has_val or best is None or scores["val"] >= best["val"]:
            best, best_epoch, since_best = scores, epoch, 0
        else:
            since_best += 1
        if cfg.progress:
            bar.set_postfix(loss=f"{float(loss):.3f}", val=f"{scores['val']:.3f}",
                            test_at_best=f"{best['test']:.3f}")
        if cfg.patience is not None and since_best >= cfg.patience:
            break
    bar.close()
    if best is None:
        raise ValueError("train_run: epochs must be >= 1")
    extra = {k: v for k, v in best.items() if k not in ("train", "val", "test")}
    return RunResult(seed=seed, best_epoch=best_epoch, train=best["train"], val=best["val"],
                     test=best["test"], extra=extra, history=history,
                     seconds=time.perf_counter() - start)


def run_seeds(build_model: Callable[[], nn.Module], ops: GraphOps, x: Tensor | None,
              labels: Tensor, split: Split, cfg: TrainConfig, seeds: Sequence[int]
              ) -> SeedsResult:
    """For each seed: :func:`set_seed`, ``build_model()``, :func:`train_run`."""
    runs = []
    for seed in tqdm(seeds, desc="seeds", disable=not cfg.progress or len(seeds) < 2):
        set_seed(seed)
        model = build_model()
        runs.append(train_run(model, ops, x, labels, split, cfg, seed=seed,
                              desc=f"seed {seed}"))
    return SeedsResult(runs)
