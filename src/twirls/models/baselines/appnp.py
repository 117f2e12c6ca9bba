"""APPNP (Klicpera et al., 2019): an MLP, then ``K`` steps of personalised PageRank.

``H = MLP(X)``, ``Z ← (1 - a) D̃^-1/2 Ã D̃^-1/2 Z + a H`` (``K`` times, ``Z⁽⁰⁾ = H``). The
original also applies dropout to the adjacency during propagation; we do not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor, nn

from twirls.models.config import ModelConfig, check
from twirls.models.graph_ops import GraphOps, SparseMatrix
from twirls.models.layers import FeedForward, dropout


@dataclass(frozen=True)
class APPNPConfig(ModelConfig):
    """APPNP hyperparameters (the ``model_cfg`` keys of ``model: appnp``)."""

    MODEL: ClassVar[str] = "APPNP"

    steps: int = 10  # K propagation steps
    alpha: float = 0.1  # teleport probability a
    layers: int = 2  # linear layers of the MLP
    hidden: int = 64
    dropout: float = 0.5  # on the input and after the hidden activations


class APPNP(nn.Module):
    """APPNP (see module doc) with the hyperparameters of :class:`APPNPConfig`.

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``.
    """

    accepts_sparse = True  # x may be a sparse CSR matrix (bag-of-words features)

    def __init__(self, in_dim: int, out_dim: int, cfg: APPNPConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or APPNPConfig()
        check(0.0 < cfg.alpha <= 1.0, "APPNP", f"alpha must be in (0, 1], got {cfg.alpha}")
        check(cfg.steps >= 0 and cfg.layers >= 1, "APPNP",
              "steps must be >= 0 and layers >= 1")
        self.mlp = FeedForward(in_dim, cfg.hidden, out_dim, cfg.layers, dropout=cfg.dropout)
        self.steps, self.alpha, self.dropout = cfg.steps, cfg.alpha, cfg.dropout

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> APPNP:
        return cls(in_dim, out_dim, APPNPConfig.from_mapping(cfg))

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        h = self.mlp(dropout(x, self.dropout, self.training))
        adj = ops.cached(("appnp", self.alpha, ops.dtype),
                         lambda: _scaled(ops, 1.0 - self.alpha))
        teleport = self.alpha * h
        z = h
        for _ in range(self.steps):
            z = adj.addmm(teleport, z)
        return z


def _scaled(ops: GraphOps, factor: float) -> SparseMatrix:
    """``factor · D̃^-1/2 Ã D̃^-1/2`` as one sparse matrix (so a step is one kernel call)."""
    return SparseMatrix(ops, ops.gcn_norm().values * factor, symmetric=True)
