"""GraphSAGE (Hamilton et al., NeurIPS 2017), full batch with the mean aggregator.

Architecture (GraphSAGE paper, Algorithm 1 with the "mean" aggregator, as DGL implements it)::

    h_i' = W_self h_i + W_neigh mean_{j ∈ N(i)} h_j + b      (N(i): neighbours, no self-loop)
    h    = ReLU(h') between layers;  logits = last layer's h'

Keeping the node's own representation apart from its neighbours' (``W_self`` vs ``W_neigh``)
is what H2GCN credits for GraphSAGE's strength on heterophily graphs (the paper's Table 3
quotes GraphSAGE from there). Dropout acts on every layer's input (``feat_drop``).

:class:`SAGEConv` is torch-native on :class:`~twirls.models.graph_ops.GraphOps` (no DGL): DGL
2.1's ``dgl.nn.SAGEConv(..., "mean")``, which our committed GraphSAGE numbers were computed
with, operation for operation: the same parameters and initialisation, the same order of the
linear map and the mean (the narrower side first), 0 for a node without neighbours, the same
outputs to float32 rounding (``tests/test_gat_sage.py``, against DGL in ``make test-reference``).
Sparse CSR features (bag-of-words: Actor's are 0.6 % nonzero) stay sparse: the first layer's
dropout acts on the stored entries and its products are CSR products, the same map as the dense
one at a fraction of the work (other rounding than DGL's dense product).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor, nn
from torch.nn import functional as F

from twirls.models.config import ModelConfig, check, check_rates
from twirls.models.graph_ops import GraphOps, SparseMatrix
from twirls.models.layers import dropout, is_sparse
from twirls.models.sparse_features import csr_matmul


def mean_matrix(ops: GraphOps) -> SparseMatrix:
    """``M h`` = the mean of ``h`` over each node's neighbours (no self-loop; 0 without any):
    ``M_ij = 1 / deg(i)`` on the edges of ``A``, 0 on the diagonal of the pattern (cached)."""

    def build() -> SparseMatrix:
        inv = 1.0 / ops.deg.clamp(min=1.0)
        return ops.matrix(inv.index_select(0, ops.dst), 0.0)

    return ops.cached(("neighbour_mean", ops.dtype), build)


class SAGEConv(nn.Module):
    r"""One GraphSAGE layer with the mean aggregator.

    .. math::
        h_i' = W_{self}\,\mathrm{drop}(h)_i + W_{neigh}\,
               \frac{1}{|N(i)|} \sum_{j \in N(i)} \mathrm{drop}(h)_j + b

    Parameters (named as in DGL): ``fc_neigh.weight`` ``(out, in)``, ``fc_self.weight`` and
    ``fc_self.bias``; the weights Xavier-uniform with ReLU's gain, the bias as ``nn.Linear``'s.

    Shapes: ``forward(ops, h)``: ``(n, in_dim) → (n, out_dim)``.
    """

    def __init__(self, in_dim: int, out_dim: int, *, feat_drop: float = 0.0) -> None:
        super().__init__()
        self.feat_drop = feat_drop
        self.fc_neigh = nn.Linear(in_dim, out_dim, bias=False)
        self.fc_self = nn.Linear(in_dim, out_dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        gain = nn.init.calculate_gain("relu")
        nn.init.xavier_uniform_(self.fc_self.weight, gain=gain)
        nn.init.xavier_uniform_(self.fc_neigh.weight, gain=gain)

    def forward(self, ops: GraphOps, h: Tensor) -> Tensor:
        mean = mean_matrix(ops)
        narrows = self.fc_neigh.in_features > self.fc_neigh.out_features
        if is_sparse(h) and narrows:  # bag-of-words input: dropout on the stored entries, CSR
            h = dropout(h, self.feat_drop, self.training)  # products, then average
            neigh = mean @ csr_matmul(h, self.fc_neigh.weight.t())
            return csr_matmul(h, self.fc_self.weight.t()) + self.fc_self.bias + neigh
        h = dropout(h.to_dense() if is_sparse(h) else h, self.feat_drop, self.training)
        if narrows:  # map first, then average
            neigh = mean @ self.fc_neigh(h)
        else:
            neigh = self.fc_neigh(mean @ h)
        return self.fc_self(h) + neigh


@dataclass(frozen=True)
class GraphSAGEConfig(ModelConfig):
    """GraphSAGE hyperparameters (the ``model_cfg`` keys of ``model: graphsage``)."""

    MODEL: ClassVar[str] = "GraphSAGE"

    layers: int = 2  # SAGEConv layers (the last one maps to the classes)
    hidden: int = 64
    dropout: float = 0.5  # on every layer's input


class GraphSAGE(nn.Module):
    """GraphSAGE (see module doc) with the hyperparameters of :class:`GraphSAGEConfig`.

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``; ``x`` may be sparse CSR.
    """

    accepts_sparse = True

    def __init__(self, in_dim: int, out_dim: int, cfg: GraphSAGEConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or GraphSAGEConfig()
        check(isinstance(cfg.layers, int) and cfg.layers >= 1, "GraphSAGE",
              f"layers must be an integer >= 1, got {cfg.layers!r}")
        check_rates("GraphSAGE", dropout=cfg.dropout)
        widths = [in_dim] + [cfg.hidden] * (cfg.layers - 1) + [out_dim]
        self.convs = nn.ModuleList(SAGEConv(a, b, feat_drop=cfg.dropout)
                                   for a, b in zip(widths[:-1], widths[1:], strict=True))

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> GraphSAGE:
        return cls(in_dim, out_dim, GraphSAGEConfig.from_mapping(cfg))

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        h = x
        for k, conv in enumerate(self.convs):
            h = conv(ops, h)
            if k < len(self.convs) - 1:
                h = F.relu(h)
        return h
