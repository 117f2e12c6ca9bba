"""An epoch on the connected components that hold the nodes it reads.

Every model the batched trainer runs computes a node's logits from its own features and from
the nodes it reaches along the graph: its layers act on each node's row alone, or multiply by a
matrix with the graph's pattern (``Â``, the TWIRLS steps, attention on the graph's edges, the
closed form's ``(I + λL)⁻¹``, which is block-diagonal by component). So the logits of a node
depend on its connected component alone, and the degrees in a component are those of the
whole graph. A training step reads the training nodes' logits, an evaluation those of the
training, validation and test nodes (:func:`~twirls.train.batched.trainer.batch_scores`); on
the subgraph of the components that hold them (:func:`part`) both compute the same function
of the weights as on the whole graph, so the same losses, gradients and scores up to rounding.

Citeseer's graph falls into 438 components: 2,275 of its 3,327 nodes share a component with a
training node of the public split, 3,090 with any scored node. Cora's (78 components, one of
2,485 nodes) keeps 2,550 and 2,679 of 2,708. The attacked graphs (Pro-GNN's) are their largest
component: nothing to leave out.

The subgraph keeps the graph's order: nodes in increasing id, each row's entries in the same
relative order, so a row's sparse products sum the same terms in the same order. Dropout draws
masks of the subgraph's shape, so the random numbers differ from the whole graph's: the same
experiment, other runs.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components
from torch import Tensor

from twirls.data.graph import Split
from twirls.models.graph_ops import GraphOps
from twirls.models.layers import is_sparse


@dataclass(frozen=True)
class Part:
    """The subgraph of ``nodes`` (sorted ids of the whole graph; ``None``: the whole graph),
    with its features, labels and the split's nodes renumbered into it (those outside it left
    out)."""

    nodes: Tensor | None
    ops: GraphOps
    x: Tensor | None
    labels: Tensor
    split: Split


def epoch_reads(ops: GraphOps, x: Tensor | None, labels: Tensor, split: Split,
                components: bool) -> tuple[Part, Part]:
    """What an epoch's training step and its evaluation read: with ``components``, the
    components that hold a training node and those that hold a scored one (training,
    validation or test); else the whole graph for both."""
    if not components:
        whole = Part(None, ops, x, labels, split)
        return whole, whole
    scored = torch.unique(torch.cat([split.train, split.val, split.test]))
    return (part(ops, x, labels, split, holding(ops, split.train)),
            part(ops, x, labels, split, holding(ops, scored)))


def component_ids(ops: GraphOps) -> np.ndarray:
    """``(n,)`` the connected component of every node, cached in ``ops``."""

    def build() -> np.ndarray:
        adj = sp.coo_matrix((np.ones(ops.src.numel()), (ops.dst.cpu().numpy(),
                                                        ops.src.cpu().numpy())),
                            shape=(ops.n, ops.n))
        return connected_components(adj, directed=False)[1]

    return ops.cached(("component_ids",), build)


def holding(ops: GraphOps, targets: Tensor) -> Tensor:
    """The sorted nodes of every component that holds one of ``targets``."""
    ids = component_ids(ops)
    keep = np.isin(ids, ids[targets.cpu().numpy()])
    return torch.from_numpy(np.flatnonzero(keep))


def part(ops: GraphOps, x: Tensor | None, labels: Tensor, split: Split, nodes: Tensor) -> Part:
    """The subgraph induced by ``nodes`` (whole components, sorted, :func:`holding`)."""
    nodes = nodes.cpu()
    where = torch.full((ops.n,), -1, dtype=torch.int64)
    where[nodes] = torch.arange(nodes.numel())
    src, dst = ops.src.cpu(), ops.dst.cpu()
    inside = (where[src] >= 0) & (where[dst] >= 0)
    if int(inside.sum()) != int(((where[src] >= 0) | (where[dst] >= 0)).sum()):
        raise ValueError("components.part: the nodes are not whole components")
    sub = GraphOps(where[src[inside]], where[dst[inside]], nodes.numel(), device=ops.device,
                   dtype=ops.dtype)
    device_nodes = nodes.to(labels.device)

    def renumber(idx: Tensor) -> Tensor:
        pos = where[idx.cpu()]
        return pos[pos >= 0].to(idx.device)

    return Part(nodes, sub, None if x is None else rows_of(x, nodes),
                labels.index_select(0, device_nodes),
                Split(renumber(split.train), renumber(split.val), renumber(split.test)))


def rows_of(x: Tensor, nodes: Tensor) -> Tensor:
    """``x[nodes]`` for dense or sparse CSR ``x`` (CSR stays CSR, each row's entries in order)."""
    if not is_sparse(x):
        return x.index_select(0, nodes.to(x.device))
    crow, col = x.crow_indices(), x.col_indices()
    matrix = sp.csr_matrix((np.arange(1, col.numel() + 1), col.cpu().numpy(),
                            crow.cpu().numpy()), shape=tuple(x.shape))
    picked = matrix[nodes.numpy()]  # data: 1 + each kept entry's position in x's values
    order = torch.from_numpy(picked.data.astype(np.int64) - 1).to(x.device)
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(
            torch.from_numpy(picked.indptr).to(device=x.device, dtype=crow.dtype),
            torch.from_numpy(picked.indices).to(device=x.device, dtype=col.dtype),
            x.values().index_select(0, order), picked.shape, check_invariants=False)
