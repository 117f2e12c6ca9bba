"""One seeded, deterministic training run of a Table 12 model on mini-batches of sentences.

Adam on the mean cross-entropy over the characters of a batch (a batch = ``batch_size``
sentences as one block-diagonal chain graph, reshuffled every epoch by a generator seeded with
the run's seed). After every epoch the model is scored on the validation sentences (macro F1);
the reported test score is that of the epoch with the best validation score (ties: the later
epoch, as :mod:`twirls.train.loop`), or of the last epoch when there are no validation
sentences. Same seed ⇒ identical results on the CPU.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F
from tqdm import tqdm

from twirls.cws.batching import SentenceBatch, Sentences, batch_order, make_batch
from twirls.cws.metrics import macro_f1
from twirls.cws.models import CWSTagger
from twirls.train.loop import set_seed


@dataclass(frozen=True)
class CWSTrainConfig:
    """``epochs``, ``lr`` (Adam), ``weight_decay`` (Adam's L2), ``batch_size`` (sentences),
    ``bucket`` (batches per length-sorted chunk, :func:`twirls.cws.batching.batch_order`)."""

    epochs: int = 10
    lr: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int = 32
    bucket: int = 16

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> CWSTrainConfig:
        known = set(asdict(cls()))
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ValueError(f"table12 training config: unknown key {unknown[0]!r}; accepted: "
                             f"{', '.join(sorted(known))}")
        return cls(**{k: cfg[k] for k in known if k in cfg})


@dataclass
class CWSRun:
    """Scores (macro F1 in [0, 1]) at ``best_epoch`` (0-based) of one run."""

    seed: int
    best_epoch: int
    val: float
    test: float
    seconds: float
    history: list[dict[str, float]] = field(default_factory=list)


def evaluate(model: CWSTagger, batches: list[SentenceBatch]) -> float:
    """Macro F1 of ``model`` over every character of ``batches`` (eval mode, no grad)."""
    if not batches:
        return float("nan")
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model(b).argmax(1) for b in batches])
    gold = torch.cat([b.tags for b in batches])
    return macro_f1(pred, gold)


def fixed_batches(sentences: Sentences, batch_size: int,
                  device: str | torch.device) -> list[SentenceBatch]:
    """Evaluation batches, of sentences of similar lengths (the order of characters does not
    change the score)."""
    order = np.argsort(sentences.lengths, kind="stable")
    return [make_batch(sentences, order[k:k + batch_size], device)
            for k in range(0, len(sentences), batch_size)]


def train_run(model: CWSTagger, train: Sentences, val: Sentences, test: Sentences,
              cfg: CWSTrainConfig, seed: int, device: str | torch.device = "cpu",
              progress: bool = False, desc: str = "") -> CWSRun:
    """Train ``model`` (built after :func:`twirls.train.loop.set_seed`) and score it."""
    start = time.perf_counter()
    model.to(device)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad],
                                 lr=cfg.lr, weight_decay=cfg.weight_decay)
    val_batches = fixed_batches(val, cfg.batch_size, device)
    best_val, best_epoch, best_state = -np.inf, -1, None
    history = []
    bar = tqdm(range(cfg.epochs), desc=desc or "epochs", disable=not progress, leave=False)
    for epoch in bar:
        model.train()
        # the summed loss stays on the device (float64, the same sums as Python floats): one
        # host read per epoch, not one per batch
        total, count = torch.zeros((), dtype=torch.float64, device=device), 0
        for index in batch_order(train.lengths, cfg.batch_size, generator, cfg.bucket):
            batch = make_batch(train, index, device)
            loss = F.cross_entropy(model(batch), batch.tags)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.detach().double() * batch.tags.numel()
            count += batch.tags.numel()
        mean_loss = float(total) / count
        val_f1 = evaluate(model, val_batches)
        history.append({"epoch": epoch, "loss": mean_loss, "val_macro_f1": val_f1})
        bar.set_postfix(loss=f"{mean_loss:.4f}", val=f"{val_f1:.4f}")
        if not val_batches or val_f1 >= best_val:
            best_val, best_epoch = val_f1, epoch
            best_state = copy.deepcopy(model.state_dict())
    if best_state is not None:
        model.load_state_dict(best_state)
    test_f1 = evaluate(model, fixed_batches(test, cfg.batch_size, device))
    return CWSRun(seed=seed, best_epoch=best_epoch, val=float(best_val), test=test_f1,
                  seconds=time.perf_counter() - start, history=history)


def seeded_run(build, train: Sentences, val: Sentences, test: Sentences,
               cfg: CWSTrainConfig, seed: int, device: str | torch.device = "cpu",
               progress: bool = False, desc: str = "") -> CWSRun:
    """:func:`set_seed` ``seed``, ``build()`` the model, then :func:`train_run`."""
    set_seed(seed)
    return train_run(build(), train, val, test, cfg, seed, device, progress, desc)
