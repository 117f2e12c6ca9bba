"""JKNet (Xu et al., ICML 2018): a GCN stack whose layer outputs all "jump" to the output.

Architecture (Xu et al.'s JK-Net for node classification, laid out as DGL's example)::

    h⁽⁰⁾ = X
    h⁽ˡ⁾ = ReLU(Â h⁽ˡ⁻¹⁾ W_l + b_l)         l = 1 … L,  Â = D̃^-1/2 Ã D̃^-1/2 (SGC eq. 7)
    z    = JK(h⁽¹⁾, …, h⁽ᴸ⁾)                  "cat": [h⁽¹⁾ ‖ … ‖ h⁽ᴸ⁾]  (n, L·hidden)
                                               "max": elementwise max_l h⁽ˡ⁾  (n, hidden)
    logits = Â z W_out + b_out               (``final_propagation``; else z W_out + b_out)

Dropout acts on the input of every layer (also the output layer). The jump lets every node pick
(max) or weigh (cat + linear map) its own neighbourhood range, which keeps deep stacks from
oversmoothing as badly as a plain GCN (paper Sec. 2.2). ``final_propagation`` is the JK-Net
paper's last aggregation over neighbours after the layer aggregation; DGL's example sums the
raw neighbours there, we use the same ``Â`` as the layers (scale-free). Weights
Glorot-uniform, biases zero (as :class:`~twirls.models.baselines.gcn.GCN`).

The ogbn-arxiv number of the paper's Table 2 is the OGB leaderboard's JKNet
(``EtoDemerzel0427/ogbn-arxiv-baselines``: 5 layers, 128 hidden, "max", lr 0.01, 500 epochs).
It differs in three switches: batch norm before every ReLU (``norm: batch``), no dropout on the
input (``input_dropout: 0``), and dropout applied once to every layer output, the dropped
output feeding both the next layer and the jump (``jump_after_dropout: true``; by default the
jump sees the undropped outputs and its result is dropped before the output layer).
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
from twirls.models.graph_ops import GraphOps, SparseMatrix
from twirls.models.layers import dropout, norm_layers

MODES = ("cat", "max")


@dataclass(frozen=True)
class JKNetConfig(ModelConfig):
    """JKNet hyperparameters (the ``model_cfg`` keys of ``model: jknet``). Defaults follow DGL's
    example for Cora (``--mode cat --num-layers 6``: 1 + 6 layers there, hidden 32, dropout 0.5,
    lr 0.01, weight decay 5e-4)."""

    MODEL: ClassVar[str] = "JKNet"

    layers: int = 6  # L GCN layers
    hidden: int = 32
    mode: str = "cat"  # the layer aggregation: "cat" | "max"
    dropout: float = 0.5
    final_propagation: bool = True  # Â before the output layer
    input_dropout: float | None = None  # on the input features; None: `dropout`
    norm: str = "none"  # "none" | "batch" | "layer", before every ReLU
    jump_after_dropout: bool = False  # see the module doc


def jumping_knowledge(hs: list[Tensor], mode: str) -> Tensor:
    """Layer aggregation of JK-Net: concatenation (``"cat"``) or elementwise max (``"max"``).

    Shapes: ``L`` tensors ``(n, h)`` → ``(n, L·h)`` ("cat") or ``(n, h)`` ("max").
    """
    if mode == "cat":
        return torch.cat(hs, dim=-1)
    if mode == "max":
        return torch.stack(hs, dim=0).amax(dim=0)
    raise ValueError(f"jumping_knowledge: mode must be one of {MODES}, got {mode!r}")


def _gcn_linear(adj: SparseMatrix, x: Tensor, lin: nn.Linear) -> Tensor:
    """``Â x W + b``, multiplying by ``W`` first when that shrinks the width (same result)."""
    if lin.out_features <= lin.in_features:
        return adj @ F.linear(x, lin.weight) + lin.bias
    return F.linear(adj @ x, lin.weight, lin.bias)


class JKNet(nn.Module):
    """JK-Net (see module doc) with the hyperparameters of :class:`JKNetConfig`.

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``;
    :meth:`layer_outputs`: ``L`` tensors ``(n, hidden)``.
    """

    def __init__(self, in_dim: int, out_dim: int, cfg: JKNetConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or JKNetConfig()
        layers, hidden, mode = cfg.layers, cfg.hidden, cfg.mode
        check(isinstance(layers, int) and layers >= 1, "JKNet",
              f"layers must be an integer >= 1, got {layers!r}")
        check(mode in MODES, "JKNet", f"mode must be one of {MODES}, got {mode!r}")
        check_rates("JKNet", dropout=cfg.dropout, input_dropout=cfg.input_dropout)
        widths = [in_dim] + [hidden] * layers
        self.convs = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:], strict=True))
        self.out = nn.Linear(hidden * layers if mode == "cat" else hidden, out_dim)
        for lin in [*self.convs, self.out]:
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)
        self.norms = norm_layers(cfg.norm, hidden, layers, "JKNet")
        self.mode, self.dropout, self.final_propagation = mode, cfg.dropout, cfg.final_propagation
        self.input_dropout = cfg.dropout if cfg.input_dropout is None else cfg.input_dropout
        self.jump_after_dropout = cfg.jump_after_dropout

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> JKNet:
        return cls(in_dim, out_dim, JKNetConfig.from_mapping(cfg))

    def _activate(self, layer: int, x: Tensor) -> Tensor:
        return F.relu(x if self.norms is None else self.norms[layer](x))

    def layer_outputs(self, ops: GraphOps, x: Tensor) -> list[Tensor]:
        """``[h⁽¹⁾, …, h⁽ᴸ⁾]``, the inputs of the jumping-knowledge aggregation (dropped out
        when ``jump_after_dropout``)."""
        adj = ops.gcn_norm()
        first = dropout_linear(ops, x, self.convs[0], self.input_dropout, self.training,
                               bias=False)
        h = self._activate(0, adj @ first + self.convs[0].bias)
        hs = []
        for layer, conv in enumerate(self.convs[1:], start=1):
            dropped = dropout(h, self.dropout, self.training)
            hs.append(dropped if self.jump_after_dropout else h)
            h = self._activate(layer, _gcn_linear(adj, dropped, conv))
        hs.append(dropout(h, self.dropout, self.training) if self.jump_after_dropout else h)
        return hs

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        z = jumping_knowledge(self.layer_outputs(ops, x), self.mode)
        if not self.jump_after_dropout:
            z = dropout(z, self.dropout, self.training)
        if self.final_propagation:
            return _gcn_linear(ops.gcn_norm(), z, self.out)
        return self.out(z)
