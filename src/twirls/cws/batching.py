"""Sentences as chain graphs; a mini-batch of sentences as one block-diagonal chain graph.

Sentence ``s`` of a batch occupies nodes ``ptr[s]:ptr[s+1]`` (its characters in order); the
graph has the edges ``(i, i + 1)`` between neighbouring characters of the same sentence (both
directions, built by :func:`twirls.data.graph.undirected_graph`) and none between sentences, so
its adjacency matrix is block diagonal with one path graph per sentence. Propagating on it is
propagating on every sentence separately.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from twirls.data.graph import Graph, undirected_graph
from twirls.data.pku import chain_edges
from twirls.models.graph_ops import GraphOps


@dataclass(frozen=True)
class Sentences:
    """Sentences of one part of the corpus: per sentence, token ids and B/M/E/S tag ids."""

    tokens: list[np.ndarray]
    tags: list[np.ndarray]

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.tags):
            raise ValueError(f"Sentences: {len(self.tokens)} token arrays but "
                             f"{len(self.tags)} tag arrays")
        for k, (t, y) in enumerate(zip(self.tokens, self.tags, strict=True)):
            if len(t) != len(y) or len(t) == 0:
                raise ValueError(f"Sentences: sentence {k} has {len(t)} tokens and {len(y)} "
                                 "tags (must be equal and > 0)")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def num_characters(self) -> int:
        return int(sum(len(t) for t in self.tokens))

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(t) for t in self.tokens), dtype=np.int64, count=len(self.tokens))

    def subset(self, index: Sequence[int] | np.ndarray) -> Sentences:
        return Sentences([self.tokens[i] for i in index], [self.tags[i] for i in index])


def chain_graph(lengths: Sequence[int] | np.ndarray) -> Graph:
    """The block-diagonal graph of sentences of the given lengths (a path graph each)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    src, dst = chain_edges(lengths)
    return undirected_graph(torch.from_numpy(src), torch.from_numpy(dst), int(lengths.sum()))


@dataclass
class SentenceBatch:
    """Several sentences as one graph: ``tokens``/``tags`` ``(n,)``, ``ptr`` ``(S + 1,)``, the
    :class:`GraphOps` of their block-diagonal chain graph, and ``lengths`` for the LSTM."""

    tokens: Tensor
    tags: Tensor
    ptr: Tensor
    ops: GraphOps

    @property
    def lengths(self) -> Tensor:
        return self.ptr[1:] - self.ptr[:-1]

    @property
    def num_sentences(self) -> int:
        return int(self.ptr.numel() - 1)


def make_batch(sentences: Sentences, index: Sequence[int] | np.ndarray,
               device: str | torch.device = "cpu") -> SentenceBatch:
    """The batch of sentences ``index`` (in that order)."""
    tokens = [sentences.tokens[i] for i in index]
    lengths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
    ptr = np.concatenate([[0], np.cumsum(lengths)])
    graph = chain_graph(lengths)
    return SentenceBatch(
        tokens=torch.from_numpy(np.concatenate(tokens)).to(device),
        tags=torch.from_numpy(np.concatenate([sentences.tags[i] for i in index])).to(device),
        ptr=torch.from_numpy(ptr).to(device),
        ops=GraphOps.from_graph(graph, device=device),
    )


def batch_order(lengths: Sequence[int] | np.ndarray, batch_size: int,
                generator: torch.Generator | None = None, bucket: int = 0) -> list[np.ndarray]:
    """Sentence indices cut into batches of ``batch_size``.

    ``generator=None`` (evaluation): in order. Otherwise (a training epoch) a random permutation;
    with ``bucket = k > 0`` it is cut into chunks of ``k * batch_size`` sentences, each chunk
    sorted by sentence length (stable) and cut into batches, and the batches are shuffled (the
    bucketing of fastNLP's ``BucketSampler``): sentences of a batch have similar lengths, so the
    bi-LSTM runs far fewer padded time steps, while batches still change every epoch.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    lengths = np.asarray(lengths)
    n = len(lengths)
    if generator is None:
        order = np.arange(n)
        return [order[k:k + batch_size] for k in range(0, n, batch_size)]
    order = torch.randperm(n, generator=generator).numpy()
    if bucket <= 0:
        return [order[k:k + batch_size] for k in range(0, n, batch_size)]
    chunk = bucket * batch_size
    batches = []
    for start in range(0, n, chunk):
        part = order[start:start + chunk]
        part = part[np.argsort(lengths[part], kind="stable")]
        batches += [part[k:k + batch_size] for k in range(0, len(part), batch_size)]
    shuffle = torch.randperm(len(batches), generator=generator).numpy()
    return [batches[i] for i in shuffle]


def iterate_batches(sentences: Sentences, batch_size: int,
                    generator: torch.Generator | None = None, bucket: int = 0,
                    device: str | torch.device = "cpu") -> Iterator[SentenceBatch]:
    for index in batch_order(sentences.lengths, batch_size, generator, bucket):
        yield make_batch(sentences, index, device)
