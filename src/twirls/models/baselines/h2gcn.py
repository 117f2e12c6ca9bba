"""H2GCN (Zhu et al., NeurIPS 2020): ego/neighbour separation, two-hop neighbourhoods and
combined intermediate representations, for graphs with low homophily.

Architecture (H2GCN paper, Sec. 3; ``rounds = 1`` is their H2GCN-1, quoted in the TWIRLS
paper's Table 3)::

    r⁽⁰⁾ = ReLU(X W_e)                                     (n, p)      ego embedding, no bias
    r⁽ᵏ⁾ = [Ā₁ r⁽ᵏ⁻¹⁾ ‖ Ā₂ r⁽ᵏ⁻¹⁾]                          (n, 2ᵏ p)   k = 1 … K
    logits = Dropout([r⁽⁰⁾ ‖ r⁽¹⁾ ‖ … ‖ r⁽ᴷ⁾]) W_c + b_c

``Ā_h = D_h^-1/2 A_h D_h^-1/2`` is the normalised adjacency of the exact ``h``-hop
neighbourhood: ``A₁ = A`` (no self-loops) and ``A₂`` links nodes at distance exactly two (a path
of length two, not adjacent, not the node itself). Neither aggregation sees the node itself:
its own representation only reaches the classifier through ``r⁽⁰⁾`` (ego/neighbour
separation), so neighbours of other classes cannot wash it out. As in the authors' code
(``GemsLab/H2GCN``: ``M64-R-T1-G-V-C1-D0.5-MO``), rows of ``Ā_h`` for nodes without such
neighbours are zero and there is no nonlinearity between rounds.
"""

from __future__ import annotations

import warnings
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


@dataclass(frozen=True)
class H2GCNConfig(ModelConfig):
    """H2GCN hyperparameters (the ``model_cfg`` keys of ``model: h2gcn``). Defaults are the
    authors' H2GCN-1 setup for the Geom-GCN datasets (lr 0.01, weight decay 5e-4 or 1e-5, both
    in their grid)."""

    MODEL: ClassVar[str] = "H2GCN"

    hidden: int = 64  # p, width of the ego embedding
    rounds: int = 1  # K aggregation rounds (1: H2GCN-1)
    dropout: float = 0.5  # before the classifier
    embed_relu: bool = True  # ReLU on the ego embedding (the authors' "R")


def hop_adjacencies(ops: GraphOps) -> tuple[Tensor, Tensor]:
    """``(Ā₁, Ā₂)`` as sparse CSR ``(n, n)`` matrices (symmetrically normalised exact one- and
    two-hop neighbourhoods, no self-loops), cached in ``ops``."""

    def normalise(index: Tensor) -> Tensor:
        deg = torch.bincount(index[0], minlength=ops.n).to(ops.dtype)
        d = torch.where(deg > 0, deg.clamp(min=1.0).rsqrt(), torch.zeros_like(deg))
        values = d[index[0]] * d[index[1]]
        coo = torch.sparse_coo_tensor(index, values, (ops.n, ops.n),
                                      check_invariants=False).coalesce()
        with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
            warnings.simplefilter("ignore", UserWarning)
            return coo.to_sparse_csr()

    def build() -> tuple[Tensor, Tensor]:
        n = ops.n
        one = torch.stack([ops.dst, ops.src])
        a = torch.sparse_coo_tensor(one, torch.ones(one.shape[1], device=ops.device),
                                    (n, n), check_invariants=False).coalesce()
        with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
            warnings.simplefilter("ignore", UserWarning)
            two = torch.sparse.mm(a, a).coalesce().indices()  # a path of length 2 exists
        key = two[0] * n + two[1]
        adjacent = torch.isin(key, one[0] * n + one[1])
        keep = (two[0] != two[1]) & ~adjacent
        return normalise(one), normalise(two[:, keep])

    return ops.cached(("h2gcn_hops", ops.dtype), build)


class _SymmetricSpMM(torch.autograd.Function):
    """``M y`` for a constant symmetric CSR ``M``: the backward is ``M g`` (torch's own CSR
    backward transposes ``M`` on every call, ~20x slower on Actor)."""

    @staticmethod
    def forward(ctx, mat: Tensor, y: Tensor) -> Tensor:  # type: ignore[override]
        ctx.mat = mat
        return mat @ y

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        return None, ctx.mat @ grad.contiguous()


class H2GCN(nn.Module):
    """H2GCN (see module doc) with the hyperparameters of :class:`H2GCNConfig`.

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``.
    """

    accepts_sparse = True  # bag-of-words features: the embedding costs O(nnz)

    def __init__(self, in_dim: int, out_dim: int, cfg: H2GCNConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or H2GCNConfig()
        check(isinstance(cfg.rounds, int) and cfg.rounds >= 1, "H2GCN",
              f"rounds must be an integer >= 1, got {cfg.rounds!r}")
        check_rates("H2GCN", dropout=cfg.dropout)
        self.embed = nn.Linear(in_dim, cfg.hidden, bias=False)
        self.classify = nn.Linear(cfg.hidden * (2 ** (cfg.rounds + 1) - 1), out_dim)
        self.rounds, self.dropout, self.embed_relu = cfg.rounds, cfg.dropout, cfg.embed_relu

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> H2GCN:
        return cls(in_dim, out_dim, H2GCNConfig.from_mapping(cfg))

    def representations(self, ops: GraphOps, x: Tensor) -> list[Tensor]:
        """``[r⁽⁰⁾, …, r⁽ᴷ⁾]``, widths ``p, 2p, …, 2ᴷ p``."""
        a1, a2 = hop_adjacencies(ops)
        r = csr_matmul(x, self.embed.weight.t()) if is_sparse(x) else self.embed(x)
        rs = [F.relu(r) if self.embed_relu else r]
        for _ in range(self.rounds):
            rs.append(torch.cat([_SymmetricSpMM.apply(a1, rs[-1]),
                                 _SymmetricSpMM.apply(a2, rs[-1])], 1))
        return rs

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        final = torch.cat(self.representations(ops, x), dim=1)
        return self.classify(dropout(final, self.dropout, self.training))
