"""MLP baseline: node features only, no graph (paper Table "Result on heterophily graphs")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor, nn

from twirls.models.config import ModelConfig
from twirls.models.graph_ops import GraphOps
from twirls.models.layers import FeedForward, dropout


@dataclass(frozen=True)
class MLPConfig(ModelConfig):
    """MLP hyperparameters (the ``model_cfg`` keys of ``model: mlp``)."""

    MODEL: ClassVar[str] = "MLP"

    layers: int = 2  # linear layers
    hidden: int = 64
    dropout: float = 0.5  # after every hidden activation
    input_dropout: float = 0.0  # on the input features
    norm: str = "none"  # "none" | "batch" | "layer", before every hidden ReLU


class MLP(nn.Module):
    """``layers`` linear layers with ReLU and dropout (:class:`FeedForward`); ignores the graph.
    Hyperparameters: :class:`MLPConfig`.

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``.
    """

    accepts_sparse = True  # x may be a sparse CSR matrix (bag-of-words features)

    def __init__(self, in_dim: int, out_dim: int, cfg: MLPConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or MLPConfig()
        if cfg.layers < 1:
            raise ValueError(f"MLP config: layers must be >= 1, got {cfg.layers}")
        self.net = FeedForward(in_dim, cfg.hidden, out_dim, cfg.layers, dropout=cfg.dropout,
                               norm=cfg.norm)
        self.input_dropout = cfg.input_dropout

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> MLP:
        return cls(in_dim, out_dim, MLPConfig.from_mapping(cfg))

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        return self.net(dropout(x, self.input_dropout, self.training))
