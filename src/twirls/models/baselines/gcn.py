"""GCN (Kipf & Welling, 2017): ``H ← ReLU(D̃^-1/2 Ã D̃^-1/2 H W)``, dropout before every layer.

Weights Glorot-uniform, biases zero (as in the original and DGL's ``GraphConv``). Each layer
multiplies by ``W`` first when that shrinks the width, else propagates first (same result).

The OGB example behind the ogbn-arxiv number of the paper's Table 2 (``snap-stanford/ogb``
``examples/nodeproppred/arxiv/gnn.py``: 3 layers, 256 hidden, dropout 0.5) adds batch norm
before every hidden ReLU and does not drop the input: ``norm: batch``, ``input_dropout: 0``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor, nn
from torch.nn import functional as F

from twirls.models.config import ModelConfig, check, check_rates
from twirls.models.graph_ops import GraphOps
from twirls.models.layers import dropout, is_sparse, norm_layers
from twirls.models.sparse_features import csr_matmul


@dataclass(frozen=True)
class GCNConfig(ModelConfig):
    """GCN hyperparameters (the ``model_cfg`` keys of ``model: gcn``)."""

    MODEL: ClassVar[str] = "GCN"

    layers: int = 2  # graph convolutions (the last one maps to the classes)
    hidden: int = 16
    dropout: float = 0.5  # before every layer but the first
    input_dropout: float | None = None  # on the input features; None: `dropout`
    norm: str = "none"  # "none" | "batch" | "layer", before every hidden ReLU


class GCN(nn.Module):
    """GCN (see module doc) with the hyperparameters of :class:`GCNConfig`.

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``.
    """

    accepts_sparse = True  # x may be a sparse CSR matrix (bag-of-words features)

    def __init__(self, in_dim: int, out_dim: int, cfg: GCNConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or GCNConfig()
        check(cfg.layers >= 1, "GCN", f"layers must be >= 1, got {cfg.layers}")
        check_rates("GCN", dropout=cfg.dropout, input_dropout=cfg.input_dropout)
        widths = [in_dim] + [cfg.hidden] * (cfg.layers - 1) + [out_dim]
        self.lins = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:], strict=True))
        for lin in self.lins:
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)
        self.norms = norm_layers(cfg.norm, cfg.hidden, cfg.layers - 1, "GCN")
        self.dropout = cfg.dropout
        self.input_dropout = cfg.dropout if cfg.input_dropout is None else cfg.input_dropout

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> GCN:
        return cls(in_dim, out_dim, GCNConfig.from_mapping(cfg))

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        adj = ops.gcn_norm()
        for k, lin in enumerate(self.lins):
            x = dropout(x, self.input_dropout if k == 0 else self.dropout, self.training)
            if is_sparse(x):  # bag-of-words input: X W costs O(nnz)
                x = adj @ csr_matmul(x, lin.weight.t())
            elif lin.out_features <= lin.in_features:  # Â (X W) + b
                x = adj @ F.linear(x, lin.weight)
            else:  # (Â X) W + b
                x = F.linear(adj @ x, lin.weight)
            x = x + lin.bias
            if k < len(self.lins) - 1:
                x = F.relu(x if self.norms is None else self.norms[k](x))
        return x
