"""GAT (Veličković et al., ICLR 2018): attention-weighted neighbour averaging, DGL's ``GATConv``.

Architecture (GAT paper, eqs. 1-6; self-loops included, as in DGL's example)::

    e_ij = LeakyReLU(a_l · W h_j + a_r · W h_i)          j ∈ N(i) ∪ {i}, per head
    α_ij = softmax_j(e_ij)
    h_i' = ‖_heads  σ( Σ_j α_ij W h_j + b )              hidden layers: heads concatenated
    logits_i = mean_heads( Σ_j α_ij W h_j + b )          output layer: heads averaged

σ is ELU, optionally after a norm (``norm: batch`` for the ogbn-arxiv-sized timing table).
Dropout acts on every layer's input (``feat_drop``) and on the attention coefficients
(``attn_drop``), as in the paper. The paper's Table 11 runs GAT; Table 3 quotes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor, nn
from torch.nn import functional as F

from twirls.compat import import_dgl_nn
from twirls.models.config import ModelConfig, check, check_rates
from twirls.models.graph_ops import GraphOps
from twirls.models.layers import is_sparse, norm_layers


@dataclass(frozen=True)
class GATConfig(ModelConfig):
    """GAT hyperparameters (the ``model_cfg`` keys of ``model: gat``). Defaults are the GAT
    paper's Cora setting (lr 5e-3, weight decay 5e-4)."""

    MODEL: ClassVar[str] = "GAT"

    layers: int = 2  # attention layers (the last one maps to the classes)
    hidden: int = 8  # per head
    heads: int = 8  # of every hidden layer (concatenated)
    out_heads: int = 1  # of the output layer (averaged)
    dropout: float = 0.6  # on every layer's input features
    attn_dropout: float = 0.6  # on the attention coefficients
    negative_slope: float = 0.2  # of the LeakyReLU in the attention scores
    norm: str = "none"  # "none" | "batch" | "layer", on every hidden layer's concatenated heads


class GAT(nn.Module):
    """GAT (see module doc) with the hyperparameters of :class:`GATConfig`.

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``.
    """

    requires_dgl = True  # DGL's GATConv kernels: CUDA only with a CUDA build of DGL

    def __init__(self, in_dim: int, out_dim: int, cfg: GATConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or GATConfig()
        check(isinstance(cfg.layers, int) and cfg.layers >= 1, "GAT",
              f"layers must be an integer >= 1, got {cfg.layers!r}")
        check(cfg.heads >= 1 and cfg.out_heads >= 1, "GAT",
              f"heads and out_heads must be >= 1, got {cfg.heads} and {cfg.out_heads}")
        check_rates("GAT", dropout=cfg.dropout, attn_dropout=cfg.attn_dropout)
        GATConv = import_dgl_nn("GAT").GATConv
        width = cfg.hidden * cfg.heads
        widths = [in_dim] + [width] * (cfg.layers - 1)
        conv_args = {"feat_drop": cfg.dropout, "attn_drop": cfg.attn_dropout,
                 "negative_slope": cfg.negative_slope}
        self.convs = nn.ModuleList(GATConv(w, cfg.hidden, cfg.heads, **conv_args)
                                   for w in widths[:-1])
        self.out = GATConv(widths[-1], out_dim, cfg.out_heads, **conv_args)
        self.norms = norm_layers(cfg.norm, width, cfg.layers - 1, "GAT")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> GAT:
        return cls(in_dim, out_dim, GATConfig.from_mapping(cfg))

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        g = ops.dgl_graph(self_loops=True)
        h = x.to_dense() if is_sparse(x) else x
        for k, conv in enumerate(self.convs):
            h = conv(g, h).flatten(1)
            h = F.elu(h if self.norms is None else self.norms[k](h))
        return self.out(g, h).mean(1)
