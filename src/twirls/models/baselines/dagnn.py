"""DAGNN (Liu, Gao & Ji, KDD 2020): decoupled MLP + K propagations + adaptive adjustment.

Architecture (the DAGNN model of Liu et al., Sec. "Deep Adaptive Graph Neural Network")::

    Z  = MLP(X)                                   (n, c)   two linear layers, ReLU, dropout
    H  = [Z, Â Z, Â² Z, …, Â^K Z]                 (n, K+1, c),  Â = D̃^-1/2 Ã D̃^-1/2 (eq. 7)
    S  = σ(H s + b)                               (n, K+1)  a learned retainment score per
                                                            node and propagation depth
    logits_i = Σ_k S_ik H_ik                      (n, c)

Unlike SGC/APPNP, which fix the weight of every depth, each node weighs its own receptive
fields ``Â^k Z`` through the shared projection ``s ∈ R^c`` (gated by a sigmoid), so a large K
does not oversmooth (TWIRLS paper Sec. 2.2). Dropout acts on the input and on the hidden
activation of the MLP; its layers keep PyTorch's default initialisation, as in the authors'
code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from twirls.models.baselines.gcnii import dropout_linear
from twirls.models.config import check, resolve_config
from twirls.models.graph_ops import GraphOps

DEFAULTS: dict[str, Any] = {"steps": 10, "hidden": 64, "dropout": 0.8}


class AdaptiveAdjustment(nn.Module):
    r"""DAGNN's adaptive combination of the representations ``H_k = Â^k Z`` (k = 0 … K):

    .. math::
        \text{out}_i = \sum_{k=0}^{K} \sigma(H_{ik} s + b)\, H_{ik}

    Args:
        channels: width ``c`` of ``Z`` (the number of classes in DAGNN).
        steps: ``K ≥ 0`` propagation steps.

    Shapes: ``forward(ops, z)``: ``z (n, c) → (n, c)``; :meth:`scores`: ``(n, K+1)``.
    """

    def __init__(self, channels: int, steps: int) -> None:
        super().__init__()
        self.proj = nn.Linear(channels, 1)
        self.steps = steps

    def representations(self, ops: GraphOps, z: Tensor) -> Tensor:
        """``[Z, Â Z, …, Â^K Z]`` stacked as ``(n, K+1, c)``."""
        adj = ops.gcn_norm()
        hs = [z]
        for _ in range(self.steps):
            hs.append(adj @ hs[-1])
        return torch.stack(hs, dim=1)

    def scores(self, hs: Tensor) -> Tensor:
        """Retainment scores ``σ(H s + b)``: ``(n, K+1, c) → (n, K+1)``."""
        return torch.sigmoid(self.proj(hs)).squeeze(-1)

    def forward(self, ops: GraphOps, z: Tensor) -> Tensor:
        hs = self.representations(ops, z)
        return torch.einsum("nk,nkc->nc", self.scores(hs), hs)


class DAGNN(nn.Module):
    """Config keys: ``steps`` = K (10), ``hidden`` (64), ``dropout`` (0.8).

    Defaults are the DAGNN paper's Cora setting (lr 0.01, weight decay 5e-3); Citeseer: K 10,
    dropout 0.5, weight decay 0.02; Pubmed: K 20, dropout 0.8, weight decay 5e-3.

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``.
    """

    def __init__(self, in_dim: int, out_dim: int, *, steps: int = 10, hidden: int = 64,
                 dropout: float = 0.8) -> None:
        super().__init__()
        check(isinstance(steps, int) and steps >= 0, "DAGNN",
              f"steps must be an integer >= 0, got {steps!r}")
        check(0.0 <= dropout < 1.0, "DAGNN", f"dropout must be in [0, 1), got {dropout}")
        self.lin1, self.lin2 = nn.Linear(in_dim, hidden), nn.Linear(hidden, out_dim)
        self.adjust = AdaptiveAdjustment(out_dim, steps)
        self.dropout = dropout

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> DAGNN:
        return cls(in_dim, out_dim, **resolve_config("DAGNN", cfg, DEFAULTS))

    def mlp(self, ops: GraphOps, x: Tensor) -> Tensor:
        """``Z = Dropout → Linear → ReLU → Dropout → Linear`` of ``x``: ``(n, in_dim) → (n, c)``."""
        h = F.relu(dropout_linear(ops, x, self.lin1, self.dropout, self.training))
        return self.lin2(F.dropout(h, self.dropout, self.training))

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        return self.adjust(ops, self.mlp(ops, x))
