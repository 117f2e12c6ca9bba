"""TWIRLS-base at its limit: ``Y* = (I + λL)⁻¹ f(X; W)`` (eq. 2), the line of the paper's figure
"Accuracy versus propagation steps on Cora".

Eq. 6 with any ``0 < α ≤ 1`` converges to this fixed point (``(λD + I - λA) Y = f``), so this
model is what TWIRLS-base tends to as the number of steps grows. The inverse is dense and
computed once per graph (cached in the :class:`GraphOps`): for graphs up to ~20k nodes.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from twirls.models.config import ModelConfig, check
from twirls.models.energy import normalized_laplacian_dense
from twirls.models.graph_ops import GraphOps
from twirls.models.layers import FeedForward, dropout

MAX_NODES = 20_000


@dataclass(frozen=True)
class TWIRLSClosedFormConfig(ModelConfig):
    """Hyperparameters of the closed form (the ``model_cfg`` keys of
    ``model: twirls-closed-form``); ``lam`` has no default."""

    MODEL: ClassVar[str] = "TWIRLSClosedForm"

    lam: float  # λ of eq. 2
    mlp_before: int = 1  # layers of f(X; W)
    hidden: int = 128
    dropout: float = 0.0  # after every hidden activation of f
    input_dropout: float = 0.0  # on the node features before f
    normalized: bool = False  # False: L; True: L̃ of the appendix


class TWIRLSClosedForm(nn.Module):
    """``(I + λL)⁻¹ f(X; W)`` (see module doc) with the hyperparameters of
    :class:`TWIRLSClosedFormConfig`.

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``; ``x`` may be sparse CSR.
    """

    accepts_sparse = True

    def __init__(self, in_dim: int, out_dim: int, cfg: TWIRLSClosedFormConfig) -> None:
        super().__init__()
        mlp_before, hidden = int(cfg.mlp_before), int(cfg.hidden)
        dropout, input_dropout = float(cfg.dropout), float(cfg.input_dropout)
        check(mlp_before >= 1, "TWIRLSClosedForm", "mlp_before must be >= 1")
        self.f = FeedForward(in_dim, hidden, out_dim, mlp_before, dropout=dropout)
        self.lam, self.normalized = float(cfg.lam), bool(cfg.normalized)
        self.input_dropout = input_dropout

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> TWIRLSClosedForm:
        return cls(in_dim, out_dim, TWIRLSClosedFormConfig.from_mapping(cfg))

    def inverse(self, ops: GraphOps) -> Tensor:
        """``(I + λL)⁻¹``, dense, computed once per graph."""
        check(ops.n <= MAX_NODES, "TWIRLSClosedForm",
              f"a dense inverse of {ops.n} nodes is too large (max {MAX_NODES})")

        def build() -> Tensor:
            lap = normalized_laplacian_dense(ops) if self.normalized else ops.laplacian_dense()
            eye = torch.eye(ops.n, dtype=torch.float64, device=ops.device)
            return torch.linalg.inv(eye + self.lam * lap.double()).to(ops.dtype)

        return ops.cached(("closed_form_inverse", self.lam, self.normalized), build)

    def inverse_t(self, ops: GraphOps) -> Tensor:
        """The transpose of :meth:`inverse`, stored row-major (cached): the backward's product
        ``Mᵀ G`` as a plain product, as fast as the forward's (a product with ``M.t()`` runs
        ~6x slower on some CPUs' BLAS, e.g. MKL on AVX2)."""
        inv = self.inverse(ops)
        return ops.cached(("closed_form_inverse_t", self.lam, self.normalized),
                          lambda: inv.t().contiguous())

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        return self.propagate(ops, self.f(dropout(x, self.input_dropout, self.training)))

    def propagate(self, ops: GraphOps, h: Tensor) -> Tensor:
        """``(I + λL)⁻¹ h`` for ``h`` ``(n, d)``: a plain product without a gradient, else
        :class:`_Propagate` (its backward reads :meth:`inverse_t`)."""
        if not h.requires_grad:
            return self.inverse(ops) @ h
        return _Propagate.apply(h, self.inverse(ops), self.inverse_t(ops))

    def propagate_rows(self, ops: GraphOps, h: Tensor, rows: Tensor, slot: Hashable = None
                       ) -> Tensor:
        """``((I + λL)⁻¹ h)[rows]`` as ``(I + λL)⁻¹[rows] h``, those rows of the inverse (and,
        for a gradient, their transpose) cached in ``ops`` for ``rows`` (one entry per
        ``slot``: a caller that alternates between two sets of rows names two slots)."""
        inv = self.inverse(ops)
        key = ("closed_form_rows", self.lam, self.normalized, slot)
        part = ops.cached_for(key, rows, lambda: inv.index_select(0, rows))
        if not h.requires_grad:
            return part @ h
        part_t = ops.cached_for(key + ("t",), rows, lambda: part.t().contiguous())
        return _Propagate.apply(h, part, part_t)


class _Propagate(torch.autograd.Function):
    """``M h`` with the backward ``∂h = Mᵀ G`` read from ``Mᵀ`` stored row-major (the same
    products as autograd's ``M @ h``, in another memory layout)."""

    @staticmethod
    def forward(ctx, h: Tensor, m: Tensor, m_t: Tensor) -> Tensor:  # type: ignore[override]
        ctx.m_t = m_t
        return m @ h

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        return ctx.m_t @ grad, None, None
