"""GCNII's ogbn-arxiv model (Chen et al., ICML 2020; the authors' ``PyG/ogbn-arxiv`` script).

The ogbn-arxiv number of the TWIRLS paper's Table 2 (72.74 ± 0.16) is the GCNII authors'
leaderboard entry, which is not the GCNII layer of the paper (:mod:`.gcnii`) but a residual
variant with two weight matrices per layer and batch norm (their ``GCNIIdenseConv``)::

    h⁽⁰⁾ = ReLU(Dropout(X) W_in + b_in)
    u⁽ˡ⁾ = Norm( Â (d + d W1_l) + α h⁽⁰⁾ + h⁽⁰⁾ W2_l ),    d = Dropout(h⁽ˡ⁻¹⁾)
    h⁽ˡ⁾ = ReLU(u⁽ˡ⁾) + h⁽ˡ⁻¹⁾                              l = 1 … L
    logits = Dropout(h⁽ᴸ⁾) W_out + b_out

with ``Â = D̃^-1/2 Ã D̃^-1/2`` (SGC eq. 7 of the TWIRLS paper). As in GCNII, the graph term keeps
an identity path (``d`` next to ``d W1``) and every layer sees the initial representation
``h⁽⁰⁾``; unlike it, nothing decays with depth (no ``β_l``), and a plain residual ``+ h⁽ˡ⁻¹⁾``
follows the activation. The authors' setting: 16 layers, hidden 256, α 0.5, dropout 0.1,
batch norm, lr 1e-3, no weight decay, 1000 epochs with patience 200.
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
class GCNIIDenseConfig(ModelConfig):
    """Hyperparameters of GCNII's ogbn-arxiv model (the ``model_cfg`` keys of
    ``model: gcnii-dense``). Defaults are the authors' ogbn-arxiv setting."""

    MODEL: ClassVar[str] = "GCNIIDense"

    layers: int = 16  # L layers
    hidden: int = 256
    alpha: float = 0.5  # α, weight of the initial representation's identity path
    dropout: float = 0.1  # before every linear map
    norm: str = "batch"  # "batch" | "layer" | "none", after every layer's sum


class GCNIIDenseConv(nn.Module):
    r"""One layer of the GCNII authors' ogbn-arxiv model (before its norm and activation):

    .. math::
        \text{out} = \hat A (h + h W_1) + \alpha h^{(0)} + h^{(0)} W_2

    Args:
        channels: width of ``h`` and ``h⁽⁰⁾`` (the layer keeps it).
        alpha: weight ``α`` of the initial representation's identity path.

    Shapes: ``forward(ops, h, h0)``: ``h, h0 (n, channels) → (n, channels)``.

    ``W1``, ``W2`` are Glorot-uniform, without bias (as the authors').
    """

    def __init__(self, channels: int, alpha: float) -> None:
        super().__init__()
        self.weight1 = nn.Parameter(torch.empty(channels, channels))
        self.weight2 = nn.Parameter(torch.empty(channels, channels))
        self.alpha = alpha
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.weight1)
        nn.init.xavier_uniform_(self.weight2)

    def forward(self, ops: GraphOps, h: Tensor, h0: Tensor) -> Tensor:
        support = torch.addmm(h, h, self.weight1)
        initial = torch.addmm(h0, h0, self.weight2, beta=self.alpha)
        return ops.gcn_norm() @ support + initial

    def extra_repr(self) -> str:
        return f"{self.weight1.shape[0]}, alpha={self.alpha}"


class GCNIIDense(nn.Module):
    """GCNII's ogbn-arxiv model (see module doc) with the hyperparameters of
    :class:`GCNIIDenseConfig`.

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``.
    """

    def __init__(self, in_dim: int, out_dim: int, cfg: GCNIIDenseConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or GCNIIDenseConfig()
        check(isinstance(cfg.layers, int) and cfg.layers >= 0, "GCNIIDense",
              f"layers must be an integer >= 0, got {cfg.layers!r}")
        check(cfg.alpha >= 0.0, "GCNIIDense", f"alpha must be >= 0, got {cfg.alpha}")
        check_rates("GCNIIDense", dropout=cfg.dropout)
        self.lin_in = nn.Linear(in_dim, cfg.hidden)
        self.convs = nn.ModuleList(GCNIIDenseConv(cfg.hidden, cfg.alpha)
                                   for _ in range(cfg.layers))
        self.lin_out = nn.Linear(cfg.hidden, out_dim)
        self.norms = norm_layers(cfg.norm, cfg.hidden, cfg.layers, "GCNIIDense")
        self.dropout = cfg.dropout

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> GCNIIDense:
        return cls(in_dim, out_dim, GCNIIDenseConfig.from_mapping(cfg))

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        h0 = F.relu(dropout_linear(ops, x, self.lin_in, self.dropout, self.training))
        h = h0
        for layer, conv in enumerate(self.convs):
            u = conv(ops, dropout(h, self.dropout, self.training), h0)
            h = F.relu(u if self.norms is None else self.norms[layer](u)) + h
        return self.lin_out(dropout(h, self.dropout, self.training))
