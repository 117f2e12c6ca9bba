"""SGC (Wu et al., 2019), paper eq. 7: ``K`` parameter-free GCN propagations, then one linear map.

``logits = (D̃^-1/2 Ã D̃^-1/2)^K X W``. The propagated features do not depend on parameters, so
they are computed once and cached in the :class:`GraphOps` (training costs a logistic
regression's); a learned input (``embedding``, :class:`~twirls.models.node_table.NodeTable`) is
propagated on every call instead, with its gradient. As ``K → ∞`` the rows of
``D̃^-1/2 (…)^K X`` collapse to one vector (oversmoothing, paper Sec. 2.2), unlike TWIRLS whose
propagation converges to eq. 2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from twirls.models.config import ModelConfig, check
from twirls.models.graph_ops import GraphOps
from twirls.models.layers import dropout


@dataclass(frozen=True)
class SGCConfig(ModelConfig):
    """SGC hyperparameters (the ``model_cfg`` keys of ``model: sgc``)."""

    MODEL: ClassVar[str] = "SGC"

    steps: int = 2  # K, the power of the normalised adjacency (eq. 7)
    dropout: float = 0.0  # on the propagated features


def sgc_features(ops: GraphOps, x: Tensor, steps: int) -> Tensor:
    """``(D̃^-1/2 Ã D̃^-1/2)^steps x`` (with a gradient only when ``x`` has one)."""
    adj = ops.gcn_norm()
    with torch.set_grad_enabled(x.requires_grad and torch.is_grad_enabled()):
        for _ in range(steps):
            x = adj @ x
    return x


class SGC(nn.Module):
    """SGC (see module doc) with the hyperparameters of :class:`SGCConfig`.

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``.
    """

    def __init__(self, in_dim: int, out_dim: int, cfg: SGCConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or SGCConfig()
        check(isinstance(cfg.steps, int) and cfg.steps >= 0, "SGC",
              f"steps must be >= 0, got {cfg.steps}")
        self.steps, self.dropout = cfg.steps, cfg.dropout
        self.lin = nn.Linear(in_dim, out_dim)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> SGC:
        return cls(in_dim, out_dim, SGCConfig.from_mapping(cfg))

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        if x.requires_grad:  # a learned input: propagate it now, with its gradient
            h = sgc_features(ops, x, self.steps)
        else:
            h = ops.cached_for(("sgc", self.steps), x, lambda: sgc_features(ops, x, self.steps))
        return self.lin(dropout(h, self.dropout, self.training))
