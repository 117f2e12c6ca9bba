"""GAT (Veličković et al., ICLR 2018): attention-weighted neighbour averaging.

Architecture (GAT paper, eqs. 1-6; self-loops included, as in DGL's example)::

    e_ij = LeakyReLU(a_l · W h_j + a_r · W h_i)          j ∈ N(i) ∪ {i}, per head
    α_ij = softmax_j(e_ij)
    h_i' = ‖_heads  σ( Σ_j α_ij W h_j + b )              hidden layers: heads concatenated
    logits_i = mean_heads( Σ_j α_ij W h_j + b )          output layer: heads averaged

σ is ELU, optionally after a norm (``norm: batch`` for the ogbn-arxiv-sized timing table).
Dropout acts on every layer's input (``feat_drop``) and on the attention coefficients
(``attn_drop``), as in the paper. The paper's Table 11 runs GAT; Table 3 quotes it.

:class:`GATConv` is torch-native on :class:`~twirls.models.graph_ops.GraphOps`, so GAT runs
wherever torch does (any GPU, no DGL). It is DGL 2.1's ``dgl.nn.GATConv`` (the layer our
committed GAT numbers were computed with) operation for operation: the same parameters and
initialisation (so the same draws from the same seed), the same dropout draws over the edges
in the same order, the same outputs to float32 rounding (``tests/test_gat_sage.py`` checks it
against DGL in ``make test-reference``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from twirls.models.config import ModelConfig, check, check_rates
from twirls.models.graph_ops import GraphOps, SparseMatrix
from twirls.models.layers import dropout, is_sparse, norm_layers
from twirls.models.sparse_features import csr_matmul


def edge_softmax(scores: Tensor, dst: Tensor, num_nodes: int) -> Tensor:
    """``softmax`` of ``scores`` ``(E, heads)`` over the edges that share a destination node
    ``dst`` ``(E,)``: ``α_e = exp(s_e - m_i) / Σ_{e' → i} exp(s_e' - m_i)`` with ``m_i`` the
    largest score into ``i`` (held constant: the softmax does not depend on it)."""
    heads = scores.shape[1]
    index = dst[:, None].expand(-1, heads)
    top = scores.new_full((num_nodes, heads), -torch.inf).scatter_reduce(
        0, index, scores.detach(), "amax", include_self=True)
    exp = (scores - top.index_select(0, dst)).exp()
    total = exp.new_zeros((num_nodes, heads)).index_add(0, dst, exp)
    return exp / total.index_select(0, dst)


class GATConv(nn.Module):
    r"""One multi-head graph attention layer on the ``Ã = A + I`` pattern of a ``GraphOps``.

    .. math::
        z = W\,\mathrm{drop}(h), \quad
        e_{ij} = \mathrm{LeakyReLU}(a_l^\top z_j + a_r^\top z_i), \quad
        h_i' = \sum_{j \in N(i) \cup \{i\}} \mathrm{drop}(\mathrm{softmax}_j e_{ij})\, z_j + b

    Parameters (named as in DGL): ``fc.weight`` ``(heads·out, in)``, ``attn_l`` and ``attn_r``
    ``(1, heads, out)``, ``bias`` ``(heads·out,)``; Xavier-normal with ReLU's gain, bias zero.

    Shapes: ``forward(ops, h)``: ``(n, in_dim) → (n, heads, out_dim)``.
    """

    def __init__(self, in_dim: int, out_dim: int, heads: int, *, feat_drop: float = 0.0,
                 attn_drop: float = 0.0, negative_slope: float = 0.2) -> None:
        super().__init__()
        self.heads, self.out_dim = heads, out_dim
        self.fc = nn.Linear(in_dim, out_dim * heads, bias=False)
        self.attn_l = nn.Parameter(torch.empty(1, heads, out_dim))
        self.attn_r = nn.Parameter(torch.empty(1, heads, out_dim))
        self.feat_drop, self.attn_drop = feat_drop, attn_drop
        self.leaky_relu = nn.LeakyReLU(negative_slope)
        self.bias = nn.Parameter(torch.empty(heads * out_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        gain = nn.init.calculate_gain("relu")
        nn.init.xavier_normal_(self.fc.weight, gain=gain)
        nn.init.xavier_normal_(self.attn_l, gain=gain)
        nn.init.xavier_normal_(self.attn_r, gain=gain)
        nn.init.constant_(self.bias, 0.0)

    def forward(self, ops: GraphOps, h: Tensor) -> Tensor:
        if is_sparse(h):  # bag-of-words input: dropout on the stored entries, a CSR product
            z = csr_matmul(dropout(h, self.feat_drop, self.training), self.fc.weight.t())
        else:
            z = self.fc(dropout(h, self.feat_drop, self.training))
        z = z.view(-1, self.heads, self.out_dim)
        src, dst = ops.col, ops.row  # the pattern's entries (i, j): j sends to i
        left = (z * self.attn_l).sum(-1)  # (n, heads): the sender's part
        right = (z * self.attn_r).sum(-1)  # the receiver's part
        scores = self.leaky_relu(left.index_select(0, src) + right.index_select(0, dst))
        alpha = dropout(edge_softmax(scores, dst, ops.n), self.attn_drop, self.training)
        alpha = alpha.t().contiguous()
        out = torch.stack([SparseMatrix(ops, alpha[k]) @ z[:, k] for k in range(self.heads)],
                          dim=1)
        return out + self.bias.view(1, self.heads, self.out_dim)

    def extra_repr(self) -> str:
        return f"heads={self.heads}, out_dim={self.out_dim}"


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

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``; ``x`` may be sparse CSR (the
    first layer's dropout then acts on the stored entries, and its product is a CSR product).
    """

    accepts_sparse = True

    def __init__(self, in_dim: int, out_dim: int, cfg: GATConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or GATConfig()
        check(isinstance(cfg.layers, int) and cfg.layers >= 1, "GAT",
              f"layers must be an integer >= 1, got {cfg.layers!r}")
        check(cfg.heads >= 1 and cfg.out_heads >= 1, "GAT",
              f"heads and out_heads must be >= 1, got {cfg.heads} and {cfg.out_heads}")
        check_rates("GAT", dropout=cfg.dropout, attn_dropout=cfg.attn_dropout)
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
        h = x
        for k, conv in enumerate(self.convs):
            h = conv(ops, h).flatten(1)
            h = F.elu(h if self.norms is None else self.norms[k](h))
        return self.out(ops, h).mean(1)
