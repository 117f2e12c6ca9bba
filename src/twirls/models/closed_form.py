"""TWIRLS-base at its limit: ``Y* = (I + λL)⁻¹ f(X; W)`` (eq. 2), the line of the paper's figure
"Accuracy versus propagation steps on Cora".

Eq. 6 with any ``0 < α ≤ 1`` converges to this fixed point (``(λD + I - λA) Y = f``), so this
model is what TWIRLS-base tends to as the number of steps grows. The inverse is dense and
computed once per graph (cached in the :class:`GraphOps`): for graphs up to ~20k nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from twirls.models.config import check, resolve_config
from twirls.models.energy import normalized_laplacian_dense
from twirls.models.graph_ops import GraphOps
from twirls.models.layers import FeedForward, dropout

DEFAULTS: dict[str, Any] = {"mlp_before": 1, "hidden": 128, "dropout": 0.0,
                            "input_dropout": 0.0, "normalized": False}
MAX_NODES = 20_000


class TWIRLSClosedForm(nn.Module):
    """Config keys: ``lam`` (required), ``mlp_before`` (1), ``hidden`` (128), ``dropout`` (0),
    ``input_dropout`` (0), ``normalized`` (False: ``L``; True: ``L̃`` of the appendix).

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``; ``x`` may be sparse CSR.
    """

    accepts_sparse = True

    def __init__(self, in_dim: int, out_dim: int, lam: float, *, mlp_before: int = 1,
                 hidden: int = 128, dropout: float = 0.0, input_dropout: float = 0.0,
                 normalized: bool = False) -> None:
        super().__init__()
        check(mlp_before >= 1, "TWIRLSClosedForm", "mlp_before must be >= 1")
        self.f = FeedForward(in_dim, hidden, out_dim, mlp_before, dropout=dropout)
        self.lam, self.normalized, self.input_dropout = lam, normalized, input_dropout

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> TWIRLSClosedForm:
        c = resolve_config("TWIRLSClosedForm", cfg, DEFAULTS, ("lam",))
        return cls(in_dim, out_dim, float(c["lam"]), mlp_before=int(c["mlp_before"]),
                   hidden=int(c["hidden"]), dropout=float(c["dropout"]),
                   input_dropout=float(c["input_dropout"]), normalized=bool(c["normalized"]))

    def inverse(self, ops: GraphOps) -> Tensor:
        """``(I + λL)⁻¹``, dense, computed once per graph."""
        check(ops.n <= MAX_NODES, "TWIRLSClosedForm",
              f"a dense inverse of {ops.n} nodes is too large (max {MAX_NODES})")

        def build() -> Tensor:
            lap = normalized_laplacian_dense(ops) if self.normalized else ops.laplacian_dense()
            eye = torch.eye(ops.n, dtype=torch.float64, device=ops.device)
            return torch.linalg.inv(eye + self.lam * lap.double()).to(ops.dtype)

        return ops.cached(("closed_form_inverse", self.lam, self.normalized), build)

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        x = dropout(x, self.input_dropout, self.training)
        return self.inverse(ops) @ self.f(x)
