"""The one graph type every loader returns and every model consumes.

The graph is plain torch tensors (an edge list), so loading, training and attacking need no DGL;
:meth:`Graph.to_dgl` builds a DGL graph for the code that calls DGL's layers (GAT, GraphSAGE) and
for the reference oracles in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    import dgl


@dataclass(frozen=True, eq=False)
class Graph:
    """An undirected graph stored as its directed edge list (both directions of every edge).

    The method names are DGL's (``num_nodes()``, ``num_edges()``, ``edges()``), with the same
    meaning and edge order, so code written against either reads the same.

    Attributes:
        src, dst: ``(E,)`` int64 endpoints of every directed edge ``src[e] → dst[e]``.
        n: number of nodes (isolated nodes included).
    """

    src: torch.Tensor
    dst: torch.Tensor
    n: int

    def __post_init__(self) -> None:
        if self.src.shape != self.dst.shape or self.src.dim() != 1:
            raise ValueError(f"Graph: src and dst must be 1-D of equal length, got "
                             f"{tuple(self.src.shape)} and {tuple(self.dst.shape)}")

    def num_nodes(self) -> int:
        return int(self.n)

    def num_edges(self) -> int:
        """Number of directed edges (twice the undirected count for a symmetric graph)."""
        return int(self.src.numel())

    def edges(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(src, dst)``, in edge-id order."""
        return self.src, self.dst

    @property
    def edge_index(self) -> torch.Tensor:
        """``(2, E)`` as PyG writes it: row 0 the sources, row 1 the targets."""
        return torch.stack([self.src, self.dst])

    def to_dgl(self, device: str | torch.device = "cpu") -> dgl.DGLGraph:
        """The same graph (same edge ids) as a ``dgl.DGLGraph``; imports DGL only here."""
        import dgl

        return dgl.graph((self.src, self.dst), num_nodes=self.n, device=device)


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
        graph: every undirected edge in both directions, no self-loops, no duplicates (the
            paper's :math:`A`, eq. 1).
        features: float node features ``(n, d)``, or ``None`` when the dataset has none
            (Amazon: the model learns an embedding per node).
        labels: ``(n,)`` class ids, or ``(n, C)`` 0/1 rows for multi-label data (Amazon).
        splits: named splits, e.g. ``{"public": ...}`` for Planetoid, ``{"0": ..., "9": ...}``
            for the ten Geom-GCN splits.
        tokens: optional ``(n,)`` integer token ids (PKU characters) for embedding models.
        meta: free-form facts about the source (raw edge counts, files, notes).
    """

    name: str
    graph: Graph
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


def undirected_graph(src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> Graph:
    """Build the symmetric, self-loop-free, duplicate-free graph of an edge list."""
    src = torch.as_tensor(src, dtype=torch.int64)
    dst = torch.as_tensor(dst, dtype=torch.int64)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    lo, hi = torch.minimum(src, dst), torch.maximum(src, dst)
    key = torch.unique(lo * num_nodes + hi)
    lo, hi = key // num_nodes, key % num_nodes
    return Graph(torch.cat([lo, hi]), torch.cat([hi, lo]), int(num_nodes))
