"""MLP baseline: node features only, no graph (paper Table "Result on heterophily graphs")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor, nn

from twirls.models.config import resolve_config
from twirls.models.graph_ops import GraphOps
from twirls.models.layers import FeedForward, dropout

DEFAULTS: dict[str, Any] = {"layers": 2, "hidden": 64, "dropout": 0.5, "input_dropout": 0.0,
                            "norm": "none"}


class MLP(nn.Module):
    """``layers`` linear layers with ReLU and dropout (:class:`FeedForward`); ignores the graph.

    Config keys: ``layers`` (2), ``hidden`` (64), ``dropout`` (0.5), ``input_dropout`` (0),
    ``norm`` ("none").

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``.
    """

    accepts_sparse = True  # x may be a sparse CSR matrix (bag-of-words features)

    def __init__(self, in_dim: int, out_dim: int, *, layers: int = 2, hidden: int = 64,
                 dropout: float = 0.5, input_dropout: float = 0.0, norm: str = "none") -> None:
        super().__init__()
        if layers < 1:
            raise ValueError(f"MLP config: layers must be >= 1, got {layers}")
        self.net = FeedForward(in_dim, hidden, out_dim, layers, dropout=dropout, norm=norm)
        self.input_dropout = input_dropout

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> MLP:
        return cls(in_dim, out_dim, **resolve_config("MLP", cfg, DEFAULTS))

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        return self.net(dropout(x, self.input_dropout, self.training))
