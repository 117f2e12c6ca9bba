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
from typing import Any

from torch import Tensor, nn
from torch.nn import functional as F

from twirls.compat import import_dgl_nn
from twirls.models.config import check, check_rates, resolve_config
from twirls.models.graph_ops import GraphOps
from twirls.models.layers import is_sparse, norm_layers

DEFAULTS: dict[str, Any] = {"layers": 2, "hidden": 8, "heads": 8, "out_heads": 1,
                            "dropout": 0.6, "attn_dropout": 0.6, "negative_slope": 0.2,
                            "norm": "none"}


class GAT(nn.Module):
    """Config keys: ``layers`` (2), ``hidden`` per head (8), ``heads`` (8), ``out_heads`` (1),
    ``dropout`` (0.6, features), ``attn_dropout`` (0.6), ``negative_slope`` (0.2), ``norm``
    ("none" | "batch" | "layer", on every hidden layer's concatenated heads).

    Defaults are the GAT paper's Cora setting (lr 5e-3, weight decay 5e-4).

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``.
    """

    requires_dgl = True  # DGL's GATConv kernels: CUDA only with a CUDA build of DGL

    def __init__(self, in_dim: int, out_dim: int, *, layers: int = 2, hidden: int = 8,
                 heads: int = 8, out_heads: int = 1, dropout: float = 0.6,
                 attn_dropout: float = 0.6, negative_slope: float = 0.2,
                 norm: str = "none") -> None:
        super().__init__()
        check(isinstance(layers, int) and layers >= 1, "GAT",
              f"layers must be an integer >= 1, got {layers!r}")
        check(heads >= 1 and out_heads >= 1, "GAT",
              f"heads and out_heads must be >= 1, got {heads} and {out_heads}")
        check_rates("GAT", dropout=dropout, attn_dropout=attn_dropout)
        GATConv = import_dgl_nn("GAT").GATConv
        widths = [in_dim] + [hidden * heads] * (layers - 1)
        self.convs = nn.ModuleList(
            GATConv(w, hidden, heads, feat_drop=dropout, attn_drop=attn_dropout,
                    negative_slope=negative_slope) for w in widths[:-1])
        self.out = GATConv(widths[-1], out_dim, out_heads, feat_drop=dropout,
                           attn_drop=attn_dropout, negative_slope=negative_slope)
        self.norms = norm_layers(norm, hidden * heads, layers - 1, "GAT")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> GAT:
        return cls(in_dim, out_dim, **resolve_config("GAT", cfg, DEFAULTS))

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        g = ops.dgl_graph(self_loops=True)
        h = x.to_dense() if is_sparse(x) else x
        for k, conv in enumerate(self.convs):
            h = conv(g, h).flatten(1)
            h = F.elu(h if self.norms is None else self.norms[k](h))
        return self.out(g, h).mean(1)
