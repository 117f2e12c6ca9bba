"""APPNP (Klicpera et al., 2019): an MLP, then ``K`` steps of personalised PageRank.

``H = MLP(X)``, ``Z ← (1 - a) D̃^-1/2 Ã D̃^-1/2 Z + a H`` (``K`` times, ``Z⁽⁰⁾ = H``). The
original also applies dropout to the adjacency during propagation; we do not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor, nn

from twirls.models.config import check, resolve_config
from twirls.models.graph_ops import GraphOps, SparseMatrix
from twirls.models.layers import FeedForward, dropout

DEFAULTS: dict[str, Any] = {"steps": 10, "alpha": 0.1, "layers": 2, "hidden": 64,
                            "dropout": 0.5}


class APPNP(nn.Module):
    """Config keys: ``steps`` = K (10), ``alpha`` = teleport ``a`` (0.1), ``layers`` (2),
    ``hidden`` (64), ``dropout`` (0.5, on the input and after hidden activations).

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``.
    """

    accepts_sparse = True  # x may be a sparse CSR matrix (bag-of-words features)

    def __init__(self, in_dim: int, out_dim: int, *, steps: int = 10, alpha: float = 0.1,
                 layers: int = 2, hidden: int = 64, dropout: float = 0.5) -> None:
        super().__init__()
        check(0.0 < alpha <= 1.0, "APPNP", f"alpha must be in (0, 1], got {alpha}")
        check(steps >= 0 and layers >= 1, "APPNP", "steps must be >= 0 and layers >= 1")
        self.mlp = FeedForward(in_dim, hidden, out_dim, layers, dropout=dropout)
        self.steps, self.alpha, self.dropout = steps, alpha, dropout

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> APPNP:
        return cls(in_dim, out_dim, **resolve_config("APPNP", cfg, DEFAULTS))

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
