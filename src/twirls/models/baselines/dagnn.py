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

For ogbn-arxiv the authors' script (``mengliu1998/DeeperGNN`` ``main_ogbnarxiv.py``: K 16,
hidden 256, dropout 0.2, lr 5e-3, 1000 epochs) puts batch norm before the hidden ReLU and does
not drop the input: ``norm: batch``, ``input_dropout: 0``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from twirls.models.baselines.gcnii import dropout_linear
from twirls.models.config import ModelConfig, check, check_rates
from twirls.models.graph_ops import GraphOps
from twirls.models.layers import dropout, norm_layers


@dataclass(frozen=True)
class DAGNNConfig(ModelConfig):
    """DAGNN hyperparameters (the ``model_cfg`` keys of ``model: dagnn``).

    Defaults are the DAGNN paper's Cora setting (lr 0.01, weight decay 5e-3); Citeseer: K 10,
    dropout 0.5, weight decay 0.02; Pubmed: K 20, dropout 0.8, weight decay 5e-3.
    """

    MODEL: ClassVar[str] = "DAGNN"

    steps: int = 10  # K propagations
    hidden: int = 64
    dropout: float = 0.8  # after the hidden activations
    input_dropout: float | None = None  # on the input features; None: `dropout`
    norm: str = "none"  # "none" | "batch" | "layer", before every hidden ReLU
    layers: int = 2  # linear layers of the MLP (the paper's Table 11 uses 3)


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
    """DAGNN (see module doc) with the hyperparameters of :class:`DAGNNConfig`.

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``.
    """

    def __init__(self, in_dim: int, out_dim: int, cfg: DAGNNConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or DAGNNConfig()
        check(isinstance(cfg.steps, int) and cfg.steps >= 0, "DAGNN",
              f"steps must be an integer >= 0, got {cfg.steps!r}")
        check_rates("DAGNN", dropout=cfg.dropout, input_dropout=cfg.input_dropout)
        check(isinstance(cfg.layers, int) and cfg.layers >= 2, "DAGNN",
              f"layers must be an integer >= 2, got {cfg.layers!r}")
        widths = [in_dim] + [cfg.hidden] * (cfg.layers - 1) + [out_dim]
        self.lins = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:], strict=True))
        self.adjust = AdaptiveAdjustment(out_dim, cfg.steps)
        self.norms = norm_layers(cfg.norm, cfg.hidden, cfg.layers - 1, "DAGNN")
        self.dropout = cfg.dropout
        self.input_dropout = cfg.dropout if cfg.input_dropout is None else cfg.input_dropout

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> DAGNN:
        return cls(in_dim, out_dim, DAGNNConfig.from_mapping(cfg))

    def mlp(self, ops: GraphOps, x: Tensor) -> Tensor:
        """``Z = Dropout → Linear → ([Norm →] ReLU → Dropout → Linear) × (layers - 1)`` of
        ``x``: ``(n, in_dim) → (n, c)``."""
        h = dropout_linear(ops, x, self.lins[0], self.input_dropout, self.training)
        for k, lin in enumerate(self.lins[1:]):
            h = F.relu(h if self.norms is None else self.norms[k](h))
            h = lin(dropout(h, self.dropout, self.training))
        return h

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        return self.adjust(ops, self.mlp(ops, x))
