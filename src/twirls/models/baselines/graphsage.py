"""GraphSAGE (Hamilton et al., NeurIPS 2017), full batch with the mean aggregator: DGL's
``SAGEConv``.

Architecture (GraphSAGE paper, Algorithm 1 with the "mean" aggregator, as DGL implements it)::

    h_i' = W_self h_i + W_neigh mean_{j ∈ N(i)} h_j + b      (N(i): neighbours, no self-loop)
    h    = ReLU(h') between layers;  logits = last layer's h'

Keeping the node's own representation apart from its neighbours' (``W_self`` vs ``W_neigh``)
is what H2GCN credits for GraphSAGE's strength on heterophily graphs (the paper's Table 3
quotes GraphSAGE from there). Dropout acts on every layer's input (``feat_drop``).
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
from twirls.models.layers import is_sparse


@dataclass(frozen=True)
class GraphSAGEConfig(ModelConfig):
    """GraphSAGE hyperparameters (the ``model_cfg`` keys of ``model: graphsage``)."""

    MODEL: ClassVar[str] = "GraphSAGE"

    layers: int = 2  # SAGEConv layers (the last one maps to the classes)
    hidden: int = 64
    dropout: float = 0.5  # on every layer's input


class GraphSAGE(nn.Module):
    """GraphSAGE (see module doc) with the hyperparameters of :class:`GraphSAGEConfig`.

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``.
    """

    requires_dgl = True  # DGL's SAGEConv kernels: CUDA only with a CUDA build of DGL

    def __init__(self, in_dim: int, out_dim: int, cfg: GraphSAGEConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or GraphSAGEConfig()
        check(isinstance(cfg.layers, int) and cfg.layers >= 1, "GraphSAGE",
              f"layers must be an integer >= 1, got {cfg.layers!r}")
        check_rates("GraphSAGE", dropout=cfg.dropout)
        SAGEConv = import_dgl_nn("GraphSAGE").SAGEConv
        widths = [in_dim] + [cfg.hidden] * (cfg.layers - 1) + [out_dim]
        self.convs = nn.ModuleList(SAGEConv(a, b, "mean", feat_drop=cfg.dropout)
                                   for a, b in zip(widths[:-1], widths[1:], strict=True))

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> GraphSAGE:
        return cls(in_dim, out_dim, GraphSAGEConfig.from_mapping(cfg))

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        g = ops.dgl_graph(self_loops=False)
        h = x.to_dense() if is_sparse(x) else x
        for k, conv in enumerate(self.convs):
            h = conv(g, h)
            if k < len(self.convs) - 1:
                h = F.relu(h)
        return h
