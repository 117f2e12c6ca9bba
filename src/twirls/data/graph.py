"""The one graph type every loader returns and every model consumes."""

from __future__ import annotations

from dataclasses import dataclass, field

import dgl
import torch


@dataclass(frozen=True)
class Split:
    """Node indices of one train / validation / test split (``val`` may be empty)."""

    train: torch.Tensor
    val: torch.Tensor
    test: torch.Tensor

    def sizes(self) -> tuple[int, int, int]:
        return len(self.train), len(self.val), len(self.test)


@dataclass
class GraphData:
    """A node-classification dataset.

    Attributes:
        name: dataset name as used in ``params.yaml`` (``cora``, ``texas``, ...).
        graph: DGL graph holding every undirected edge in both directions, no self-loops,
            no duplicates (the paper's :math:`A`, eq. 1).
        features: float node features ``(n, d)``, or ``None`` when the dataset has none
            (Amazon: the model learns an embedding per node).
        labels: ``(n,)`` class ids, or ``(n, C)`` 0/1 rows for multi-label data (Amazon).
        splits: named splits, e.g. ``{"public": ...}`` for Planetoid, ``{"0": ..., "9": ...}``
            for the ten Geom-GCN splits.
        tokens: optional ``(n,)`` integer token ids (PKU characters) for embedding models.
        meta: free-form facts about the source (raw edge counts, files, notes).
    """

    name: str
    graph: dgl.DGLGraph
    features: torch.Tensor | None
    labels: torch.Tensor
    splits: dict[str, Split]
    tokens: torch.Tensor | None = None
    meta: dict = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes()

    @property
    def num_undirected_edges(self) -> int:
        return self.graph.num_edges() // 2

    @property
    def num_classes(self) -> int:
        if self.labels.dim() == 2:
            return int(self.labels.shape[1])
        return int(self.labels.max().item()) + 1

    @property
    def num_features(self) -> int:
        return 0 if self.features is None else int(self.features.shape[1])


def undirected_graph(src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> dgl.DGLGraph:
    """Build the symmetric, self-loop-free, duplicate-free graph of an edge list."""
    src = torch.as_tensor(src, dtype=torch.int64)
    dst = torch.as_tensor(dst, dtype=torch.int64)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    lo, hi = torch.minimum(src, dst), torch.maximum(src, dst)
    key = torch.unique(lo * num_nodes + hi)
    lo, hi = key // num_nodes, key % num_nodes
    return dgl.graph((torch.cat([lo, hi]), torch.cat([hi, lo])), num_nodes=num_nodes)
