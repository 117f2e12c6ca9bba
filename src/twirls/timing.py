"""Per-epoch wall-clock time of models on one graph (appendix "Running Time", Table 11).

Shared by the stage ``table11`` and the benchmarks ``twirls.bench.epoch_time`` and
``twirls.bench.gpu``. One training epoch = forward + loss + backward + Adam step, full batch;
one test epoch = a no-grad forward in eval mode. Models are timed round-robin (one epoch of
each per round, after warm-up epochs), so load changes on a shared machine hit all of them
alike; medians are reported with every sample.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from twirls.data.graph import Graph, undirected_graph

#: ogbn-arxiv's sizes (paper Table 5; OGB's time split has 90,941 training nodes).
ARXIV = {"nodes": 169_343, "edges": 1_166_243, "features": 128, "classes": 40, "train": 90_941}


def random_graph(nodes: int, edges: int, seed: int = 0) -> Graph:
    """A uniformly random simple undirected graph with exactly ``edges`` edges."""
    gen = torch.Generator().manual_seed(seed)
    want = int(edges * 1.02) + 100
    src = torch.randint(0, nodes, (want,), generator=gen)
    dst = torch.randint(0, nodes, (want,), generator=gen)
    keep = src != dst
    lo, hi = torch.minimum(src, dst)[keep], torch.maximum(src, dst)[keep]
    key = torch.unique(lo * nodes + hi)
    key = key[torch.randperm(key.numel(), generator=gen)[:edges]]
    return undirected_graph(key // nodes, key % nodes, nodes)


def random_task(nodes: int, edges: int, features: int, classes: int, train: int,
                seed: int = 2) -> tuple[Graph, Tensor, Tensor, Tensor]:
    """``(graph, features, labels, train_idx)``, all random, with the given sizes."""
    gen = torch.Generator().manual_seed(seed)
    g = random_graph(nodes, edges, seed=seed)
    x = torch.randn(nodes, features, generator=gen)
    labels = torch.randint(0, classes, (nodes,), generator=gen)
    return g, x, labels, torch.randperm(nodes, generator=gen)[:train]


def arxiv_sized(seed: int = 2) -> tuple[Graph, Tensor, Tensor, Tensor]:
    """:func:`random_task` with ogbn-arxiv's sizes."""
    return random_task(**ARXIV, seed=seed)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


class EpochTimer:
    """One model on one graph, with its optimiser; times training and test epochs.

    Args:
        name: label in the report.
        model: the model.
        forward: closure computing the logits of every node.
        labels, train: targets and training node ids.
    """

    def __init__(self, name: str, model: nn.Module, forward: Callable[[], Tensor],
                 labels: Tensor, train: Tensor, *, lr: float = 0.01,
                 weight_decay: float = 5e-4) -> None:
        self.name, self.model, self.forward = name, model, forward
        self.labels, self.train = labels, train
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
        self.train_s: list[float] = []
        self.test_s: list[float] = []

    def _sync(self) -> None:
        """Wait for queued CUDA kernels, so that a time covers the work and not its launch."""
        if self.labels.is_cuda:
            torch.cuda.synchronize(self.labels.device)

    def train_epoch(self) -> float:
        self._sync()
        start = time.perf_counter()
        self.model.train()
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.forward()[self.train], self.labels[self.train])
        loss.backward()
        self.optimizer.step()
        self._sync()
        return time.perf_counter() - start

    def test_epoch(self) -> float:
        self._sync()
        start = time.perf_counter()
        self.model.eval()
        with torch.no_grad():
            self.forward()
        self._sync()
        return time.perf_counter() - start

    def summary(self) -> dict[str, Any]:
        return {"model": self.name, "parameters": count_parameters(self.model),
                "train_seconds_median": statistics.median(self.train_s),
                "test_seconds_median": statistics.median(self.test_s),
                "train_seconds_all": [round(t, 6) for t in self.train_s],
                "test_seconds_all": [round(t, 6) for t in self.test_s]}


def time_round_robin(timers: list[EpochTimer], epochs: int, *, warmup: int = 2,
                     test_epochs: int | None = None,
                     progress: Callable[[str], None] | None = None) -> None:
    """``warmup`` untimed training epochs per model, then ``epochs`` timed rounds of one
    training epoch each, then ``test_epochs`` (default ``max(3, epochs // 3)``) test rounds.
    ``progress`` is called with a short message after every round."""
    for timer in timers:
        for _ in range(warmup):
            timer.train_epoch()
    for i in range(epochs):
        for timer in timers:
            timer.train_s.append(timer.train_epoch())
        if progress:
            progress(f"train round {i + 1}/{epochs}")
    for i in range(max(3, epochs // 3) if test_epochs is None else test_epochs):
        for timer in timers:
            timer.test_s.append(timer.test_epoch())
        if progress:
            progress(f"test round {i + 1}")
