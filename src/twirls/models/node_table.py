"""A learned input vector per node, for graphs without node features (the paper's Amazon setting).

Paper, appendix ("Long-Range Dependency/Sparse Label Tests"), following IGNN: "because there
are no node features, we learn a 128-dim feature vector for each node". TWIRLS has this built in
(its ``embedding`` key); every other model gets it from :class:`NodeTable`, which feeds the
wrapped model a table ``E ∈ R^{n×d}`` trained with it::

    logits = model(ops, E)

``E`` starts as ``N(0, 1e-3²)``, like TWIRLS' ``embedding``. Against IGNN's identity features
(``X = I``, so the first layer's ``X W = W`` is a table of width ``hidden``) the difference is
one factorisation: ``E W`` with ``d ≥`` the first layer's width spans the same matrices.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from twirls.models.graph_ops import GraphOps


class NodeTable(nn.Module):
    """``model`` on a learned ``(num_nodes, width)`` input instead of node features.

    Args:
        model: any model with ``forward(ops, x)`` built for ``in_dim = width``.
        num_nodes: rows of the table (the graph's nodes, in its order).
        width: ``d``, the learned vector's length (the paper: 128).

    Shapes: ``forward(ops, x)``: ``x`` must be ``None`` → the model's output ``(n, out_dim)``.
    """

    def __init__(self, model: nn.Module, num_nodes: int, width: int) -> None:
        super().__init__()
        if num_nodes < 1 or width < 1:
            raise ValueError(f"NodeTable: num_nodes and width must be >= 1, got {num_nodes} and "
                             f"{width}")
        self.model = model
        self.table = nn.Parameter(torch.empty(num_nodes, width))
        nn.init.normal_(self.table, 0.0, 1e-3)

    def forward(self, ops: GraphOps, x: Tensor | None = None) -> Tensor:
        if x is not None:
            raise ValueError("NodeTable: the model learns its input per node (model_cfg."
                             "embedding), so it takes no features; got x of shape "
                             f"{tuple(x.shape)}")
        if ops.n != self.table.shape[0]:
            raise ValueError(f"NodeTable: the table has {self.table.shape[0]} rows but the graph "
                             f"has {ops.n} nodes")
        return self.model(ops, self.table)
