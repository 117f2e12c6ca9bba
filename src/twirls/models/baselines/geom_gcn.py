r"""Geom-GCN (Pei et al., "Geom-GCN: Geometric Graph Convolutional Networks", ICLR 2020).

Geometric aggregation (the paper's Sec. 2): every node ``v`` has a 2-D embedding ``z_v`` (Isomap,
Poincaré or struc2vec) and two neighbourhoods, ``N_g(v)`` (graph neighbours) and ``N_s(v)``
(nodes whose embedding lies within ρ of ``z_v``); the geometric operator ``τ(z_v, z_u) ∈ R``
says in which of the four quadrants around ``z_v`` the neighbour ``u`` lies. One layer is a
bi-level aggregation:

.. math::

    e^{v,l+1}_{(i,r)} &= p\bigl(\{h^l_u : u \in N_i(v),\ \tau(z_v, z_u) = r\}\bigr),
        \quad i \in \{g, s\},\ r \in R                          \quad \text{(1, low level)}

    m^{v,l+1} &= q\bigl(\{(e^{v,l+1}_{(i,r)}, (i, r))\}\bigr)   \quad \text{(2, high level)}

    h^{l+1}_v &= \sigma(W_l\, m^{v,l+1})                         \quad \text{(3)}

and Geom-GCN (Sec. 3) takes for ``p`` GCN's normalised sum and for ``q`` the concatenation:

.. math::

    e^{v,l+1}_{(i,r)} = \sum_{u \in N_i(v)} \delta(\tau(z_v, z_u), r)\,
        (\deg(v) \deg(u))^{-1/2}\, h^l_u,
    \qquad
    h^{l+1}_v = \sigma\Bigl(W_l \cdot \Big\Vert_{i \in \{g,s\}} \Big\Vert_{r \in R}
        e^{v,l+1}_{(i,r)}\Bigr).

(Equation numbers as we read them in the paper; the formulas are the ones its code computes.)

What the authors' code (``graphdml-uiuc-jlu/geom-gcn``: ``utils_layers.GeomGCNSingleChannel``,
``utils_data.load_data``) computes, and this module reproduces:

* **Divisions.** The ``2 × 4`` pairs ``(i, r)`` are relations ``0..7`` (graph ``r``, latent
  space ``4 + r``; :func:`twirls.data.geom.read_relations`), plus a 9th relation holding one
  self-loop per node (any self-pair of the files is replaced by it). Between two nodes there is
  at most one relation (a ``networkx.DiGraph``: the last line of a pair wins). Edges are
  directed ``u → v`` as listed; the graph neighbourhood is symmetric, the latent one need not be.
* **Normalisation.** ``deg(v)`` is the in-degree of ``v`` in the union of all 9 relations
  (self-loop included, so ``deg ≥ 1``), on both sides of the edge: ``d_v^{-1/2} d_u^{-1/2}``.
* **Weights per relation, before the sum.** ``e_r = Σ_u d_u^{-1/2} W_r h_u`` with one bias-free
  ``W_r`` (Xavier-uniform) per relation; the merge over relations is a concatenation in the first
  layer (the paper's ``W_l · ‖_r e_r`` with a block-diagonal ``W_l``) and the *mean* in the last
  (``ggcn_merge = cat / mean``); then ``· d_v^{-1/2}`` and the activation (ReLU, then none).
* **Heads** ("channels"): ``heads`` independent copies of a layer, each with its own input
  dropout mask, concatenated in the first layer and averaged in the last (1 and 1 in every run
  of the authors' Table 3). Dropout (one rate) acts on every layer's input.

Shapes, with ``R = 9`` relations, ``E`` relation edges (self-loops included), ``H`` heads:
``x (n, in) →`` per head ``W x (n, R·out)`` ``→`` gather at ``src`` ``(E, out)`` ``→``
``index_add`` at ``(dst, r)`` ``(n, R, out)`` ``→`` merge ``(n, R·out)`` or ``(n, out)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from twirls.models.config import ModelConfig, check, check_rates
from twirls.models.graph_ops import GraphOps
from twirls.models.layers import dropout, is_sparse
from twirls.models.sparse_features import csr_matmul

#: relation ids of the Geom-GCN files: (graph, latent space) × 4 quadrants
FILE_RELATIONS = 8
#: the extra relation of the authors' code: every node's self-loop
SELF_LOOP = FILE_RELATIONS
NUM_RELATIONS = FILE_RELATIONS + 1
MERGES = ("cat", "mean")


@dataclass(frozen=True)
class GeomGCNConfig(ModelConfig):
    """Geom-GCN hyperparameters (the ``model_cfg`` keys of ``model: geom-gcn``).

    Defaults: the authors' Geom-GCN-P runs behind the Texas, Wisconsin, Actor and Cornell
    numbers of their Table 3 (``NewTableThreeGeomGCN_runs.txt``, quoted by the TWIRLS paper's
    Table 3): lr 0.05, weight decay 5e-5 (Actor 5e-6, a ``train_cfg`` key) on both layers, up to
    5000 epochs.
    """

    MODEL: ClassVar[str] = "Geom-GCN"

    #: which entry of the dataset's ``meta["geom_relations"]`` gives the structural
    #: neighbourhoods: "poincare", "MDS" (the paper's Isomap) or "struc2vec"
    embedding: str = "poincare"
    hidden: int = 32  # per relation and head of the first layer
    heads: int = 1  # of the first layer (concatenated)
    out_heads: int = 1  # of the last layer (averaged)
    dropout: float = 0.5  # on every layer's input
    merge: str = "cat"  # over relations in the first layer: "cat" | "mean"
    out_merge: str = "mean"  # over relations in the last layer


def with_self_loops(relations: Tensor, num_nodes: int) -> Tensor:
    """``(3, E')``: ``relations`` without self-pairs, then ``[v, v, SELF_LOOP]`` for every node."""
    relations = torch.as_tensor(relations, dtype=torch.int64)
    if relations.dim() != 2 or relations.shape[0] != 3:
        raise ValueError(f"Geom-GCN: relations must be (3, E) [src, dst, relation], got "
                         f"{tuple(relations.shape)}")
    if relations.numel():
        if int(relations[:2].min()) < 0 or int(relations[:2].max()) >= num_nodes:
            raise ValueError(f"Geom-GCN: relation node ids must be in 0..{num_nodes - 1}")
        if int(relations[2].min()) < 0 or int(relations[2].max()) >= FILE_RELATIONS:
            raise ValueError(f"Geom-GCN: relation ids must be in 0..{FILE_RELATIONS - 1}")
    relations = relations[:, relations[0] != relations[1]]
    nodes = torch.arange(num_nodes)
    loops = torch.stack([nodes, nodes, torch.full_like(nodes, SELF_LOOP)])
    return torch.cat([relations, loops], dim=1)


class GeomGCNConv(nn.Module):
    r"""One Geom-GCN layer (eqs. 1-3 with Geom-GCN's ``p``, ``q``; see the module doc):

    .. math::

        h'_v = \mathop{\mathrm{merge}}_{k=1..H}\ \sigma\Bigl(d_v^{-1/2}\,
            \mathop{\mathrm{merge}}_{r \in R} \sum_{(u, v, r) \in \mathcal{E}}
            d_u^{-1/2}\, W^{(k)}_r \,\mathrm{dropout}(h_u)\Bigr)

    Args:
        in_dim, out_dim: widths of ``h_u`` and of one relation's output.
        num_relations: ``R`` (relation ids ``0..R-1`` in the edge list).
        heads: ``H`` independent channels.
        merge: over relations, ``"cat"`` (output ``R·out`` per head) or ``"mean"`` (``out``).
        head_merge: over heads, ``"cat"`` or ``"mean"``.
        dropout: rate on the input, a new mask per head.
        relu: ReLU per head (``σ``; else the identity).

    Shapes: ``forward(x (n, in), relations (3, E), deg (n,)) → (n, width)`` with ``width =
    (R if merge == "cat" else 1) · out · (H if head_merge == "cat" else 1)``; ``x`` may be a
    sparse CSR matrix; ``deg`` is the in-degree over all of ``relations``.
    """

    def __init__(self, in_dim: int, out_dim: int, num_relations: int = NUM_RELATIONS, *,
                 heads: int = 1, merge: str = "cat", head_merge: str = "cat",
                 dropout: float = 0.0, relu: bool = True) -> None:
        super().__init__()
        check(merge in MERGES and head_merge in MERGES, "Geom-GCN",
              f"merges must be one of {MERGES}, got {merge!r} / {head_merge!r}")
        check(heads >= 1 and num_relations >= 1, "Geom-GCN", "heads and relations must be >= 1")
        check_rates("Geom-GCN", dropout=dropout)
        self.in_dim, self.out_dim, self.num_relations = in_dim, out_dim, num_relations
        self.heads, self.merge, self.head_merge = heads, merge, head_merge
        self.dropout, self.relu = dropout, relu
        # W^{(k)} = [W_0 | … | W_{R-1}]: column block r of head k maps in_dim → out_dim
        self.weight = nn.Parameter(torch.empty(heads, in_dim, num_relations * out_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Xavier-uniform of every (out_dim, in_dim) block W_r, as nn.init.xavier_uniform_ gives
        # each of the authors' bias-free nn.Linear(in_dim, out_dim)
        bound = math.sqrt(6.0 / (self.in_dim + self.out_dim))
        nn.init.uniform_(self.weight, -bound, bound)

    @property
    def width(self) -> int:
        per_head = self.out_dim * (self.num_relations if self.merge == "cat" else 1)
        return per_head * (self.heads if self.head_merge == "cat" else 1)

    def forward(self, x: Tensor, relations: Tensor, deg: Tensor) -> Tensor:
        n, r_count, out = deg.numel(), self.num_relations, self.out_dim
        src, dst, rel = relations
        gather_at = src * r_count + rel   # row (u, r) of W h viewed (n·R, out)
        scatter_at = dst * r_count + rel  # row (v, r) of the sums
        norm = deg.to(self.weight.dtype).rsqrt().unsqueeze(1)  # d^{-1/2}, (n, 1)
        outs = []
        for k in range(self.heads):
            h = dropout(x, self.dropout, self.training)
            wh = csr_matmul(h, self.weight[k]) if is_sparse(h) else h @ self.weight[k]
            wh = (wh * norm).reshape(n * r_count, out)           # d_u^{-1/2} W_r h_u
            e = wh.new_zeros(n * r_count, out).index_add_(0, scatter_at, wh[gather_at])
            e = e.reshape(n, r_count, out)                        # e_{(i,r)}, eq. (1)
            m = e.reshape(n, r_count * out) if self.merge == "cat" else e.mean(1)  # eq. (2)
            m = m * norm                                          # d_v^{-1/2}
            outs.append(F.relu(m) if self.relu else m)            # σ, eq. (3)
        return torch.cat(outs, 1) if self.head_merge == "cat" else torch.stack(outs).mean(0)


class GeomGCN(nn.Module):
    """Two Geom-GCN layers, as ``GeomGCNNet`` of the authors' code::

        x → Dropout → GeomGCNConv(in → hidden, merge "cat", ReLU, heads cat)   (n, 9·hidden·H)
          → Dropout → GeomGCNConv(→ out_dim, merge "mean", identity, out_heads mean) → logits

    Hyperparameters: :class:`GeomGCNConfig` (its ``embedding`` chooses ``relations`` in
    :meth:`from_config`; the model itself takes the chosen ``(3, E)`` edge list).

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``; ``n`` must be the
    ``num_nodes`` the model was built for.
    """

    accepts_sparse = True  # bag-of-words features: the first layer costs O(nnz)
    #: dataset facts (``GraphData.meta`` keys) that :meth:`from_config` takes by name
    meta_keys = ("geom_relations",)
    own_embedding = True  # `embedding` names its latent space, not a learned input per node

    def __init__(self, in_dim: int, out_dim: int, relations: Tensor | None, num_nodes: int,
                 cfg: GeomGCNConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or GeomGCNConfig()
        check(isinstance(cfg.hidden, int) and cfg.hidden >= 1, "Geom-GCN",
              f"hidden must be an integer >= 1, got {cfg.hidden!r}")
        self.conv1 = GeomGCNConv(in_dim, cfg.hidden, heads=cfg.heads, merge=cfg.merge,
                                 head_merge="cat", dropout=cfg.dropout, relu=True)
        self.conv2 = GeomGCNConv(self.conv1.width, out_dim, heads=cfg.out_heads,
                                 merge=cfg.out_merge, head_merge="mean", dropout=cfg.dropout,
                                 relu=False)
        self.num_nodes = num_nodes
        self.has_relations = relations is not None
        full = with_self_loops(relations if relations is not None
                               else torch.zeros(3, 0, dtype=torch.int64), num_nodes)
        self.register_buffer("relations", full, persistent=False)
        self.register_buffer("deg", torch.bincount(full[1], minlength=num_nodes).double(),
                             persistent=False)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None,
                    geom_relations: Mapping[str, Tensor] | None = None) -> GeomGCN:
        """``geom_relations``: the dataset's ``meta["geom_relations"]``. ``None`` (e.g. when a
        config is only being checked) builds a model whose ``forward`` refuses to run."""
        c = GeomGCNConfig.from_mapping(cfg)
        embedding = c.embedding
        check(num_nodes is not None, "Geom-GCN", "needs num_nodes (its relations are per node)")
        relations = None
        if geom_relations is not None:
            if embedding not in geom_relations:
                raise ValueError(
                    f"Geom-GCN config: embedding {embedding!r} has no relations for this dataset "
                    f"(it has: {', '.join(geom_relations) or 'none'}). Fetch its "
                    f"outf_nodes_space_relation_<dataset>_{embedding}.txt (manifest.tsv) or "
                    "choose another embedding.")
            relations = geom_relations[embedding]
        return cls(in_dim, out_dim, relations, int(num_nodes), c)

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        if not self.has_relations:
            raise RuntimeError(
                "Geom-GCN was built without relations: pass the dataset's "
                "meta['geom_relations'] to from_config (the Geom-GCN relation files "
                "outf_nodes_space_relation_*.txt must be in data/raw/<dataset>/).")
        if ops.n != self.num_nodes:
            raise ValueError(f"Geom-GCN: built for {self.num_nodes} nodes, got a graph of {ops.n}")
        h = self.conv1(x, self.relations, self.deg)
        return self.conv2(h, self.relations, self.deg)
