"""Models. Every model is an ``nn.Module`` with

* ``Model.from_config(cfg: dict, in_dim: int, out_dim: int, num_nodes: int | None = None)``,
  which reads ``cfg`` into the model's frozen config dataclass (``GCNConfig``,
  ``TWIRLSConfig``, ...: the one place its keys and defaults are stated; unknown keys get a
  clear message, :class:`~twirls.models.config.ModelConfig`) and calls
  ``Model(in_dim, out_dim, config, ...)``, and
* ``forward(ops: GraphOps, x: Tensor | None) -> logits (n, out_dim)``.

:func:`build_model` looks models up by their ``params.yaml`` name in :data:`MODELS`; a new model
(JKNet, GCNII, ...) only needs an entry there.

On a graph without node features (Amazon) ``model_cfg.embedding = d`` gives any model a learned
``d``-dim input per node: TWIRLS learns it itself, every other model is wrapped in a
:class:`~twirls.models.node_table.NodeTable`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from twirls.models.baselines import (
    APPNP,
    DAGNN,
    GAT,
    GCN,
    GCNII,
    H2GCN,
    IGNN,
    MLP,
    SGC,
    SSE,
    GCNIIDense,
    GeomGCN,
    GraphSAGE,
    JKNet,
)
from twirls.models.closed_form import TWIRLSClosedForm
from twirls.models.graph_ops import GraphOps, SparseMatrix
from twirls.models.node_table import NodeTable
from twirls.models.twirls import TWIRLS

MODELS: dict[str, Any] = {
    "twirls": TWIRLS,
    "twirls-closed-form": TWIRLSClosedForm,
    "mlp": MLP,
    "sgc": SGC,
    "gcn": GCN,
    "appnp": APPNP,
    "jknet": JKNet,
    "gcnii": GCNII,
    "gcnii-dense": GCNIIDense,
    "dagnn": DAGNN,
    "gat": GAT,
    "graphsage": GraphSAGE,
    "h2gcn": H2GCN,
    "geom-gcn": GeomGCN,
    "ignn": IGNN,
    "sse": SSE,
}


def build_model(name: str, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                num_nodes: int | None = None, **meta: Any) -> nn.Module:
    """``MODELS[name].from_config(cfg, in_dim, out_dim, num_nodes, **meta)``; ``meta``: the
    dataset facts a model lists in its ``meta_keys`` (e.g. Geom-GCN's latent-space relations).

    ``cfg["embedding"] = d > 0`` on a model whose config has no ``embedding`` key of its own
    (``own_embedding``: TWIRLS' learned input, Geom-GCN's latent space): the model is built for
    ``in_dim = d`` and wrapped in :class:`NodeTable` over ``num_nodes`` rows."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    model_cls = MODELS[name]
    if cfg is None or "embedding" not in cfg or getattr(model_cls, "own_embedding", False):
        return model_cls.from_config(cfg, in_dim, out_dim, num_nodes=num_nodes, **meta)
    width = cfg["embedding"]
    if not isinstance(width, int) or isinstance(width, bool) or width < 0:
        raise ValueError(f"{name}: embedding must be an integer >= 0 (the width of the learned "
                         f"input per node), got {width!r}")
    rest = {k: v for k, v in cfg.items() if k != "embedding"}
    if width == 0:  # no table: the model on its features
        return model_cls.from_config(rest, in_dim, out_dim, num_nodes=num_nodes, **meta)
    if num_nodes is None:
        raise ValueError(f"{name}: embedding > 0 learns one vector per node: pass num_nodes")
    return NodeTable(model_cls.from_config(rest, width, out_dim, num_nodes=num_nodes, **meta),
                     num_nodes, width)


__all__ = ["APPNP", "GCN", "MLP", "MODELS", "SGC", "TWIRLS", "GraphOps", "NodeTable",
           "SparseMatrix", "TWIRLSClosedForm", "build_model"]
