"""GCNII (Chen et al., ICML 2020): deep GCN with initial residual and identity mapping.

Architecture (GCNII paper, eq. 5)::

    h⁽⁰⁾ = ReLU(X W_in + b_in)
    h⁽ˡ⁾ = ReLU( ((1-α) Â h⁽ˡ⁻¹⁾ + α h⁽⁰⁾) ((1-β_l) I + β_l W_l) ),   β_l = log(λ/l + 1)
    logits = h⁽ᴸ⁾ W_out + b_out

with ``Â = D̃^-1/2 Ã D̃^-1/2`` (SGC eq. 7 of the TWIRLS paper) and dropout before every linear
map (input, each layer, output), as in the authors' code. The *initial residual* ``α h⁽⁰⁾``
makes every layer an APPNP step (so with ``λ = 0``, hence ``β_l = 0``, the stack is exactly
APPNP's propagation of ``h⁽⁰⁾``), and the *identity mapping* ``β_l → 0`` keeps deep layers
close to the identity so that 64 layers train without oversmoothing (TWIRLS paper Sec. 2.2).

Two weight-decay groups (the authors' ``wd1`` on the convolutions, ``wd2`` on the two dense
layers): :meth:`GCNII.param_groups` gives ``torch.optim`` parameter groups; the convolution
group uses the config key ``conv_weight_decay``, the dense group the training loop's
``weight_decay``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from twirls.models.config import ModelConfig, check, check_rates
from twirls.models.graph_ops import GraphOps, SparseMatrix
from twirls.models.layers import dropout
from twirls.models.sparse_features import csr_matmul

SPARSE_DENSITY = 0.25  # dropout_linear goes sparse for features with at most this share of nonzeros


@dataclass(frozen=True)
class GCNIIConfig(ModelConfig):
    """GCNII hyperparameters (the ``model_cfg`` keys of ``model: gcnii``).

    Defaults are the GCNII paper's Cora setting (train with lr 0.01 and weight decay 5e-4 on the
    dense layers). Citeseer: 32 layers, hidden 256, λ 0.6, dropout 0.7; Pubmed: 16 layers,
    hidden 256, λ 0.4, dropout 0.5, ``conv_weight_decay`` 5e-4.
    """

    MODEL: ClassVar[str] = "GCNII"

    layers: int = 64  # L GCNII layers (eq. 5)
    hidden: int = 64
    alpha: float = 0.1  # α, initial-residual weight
    lam: float = 0.5  # λ of the identity-mapping strength β_l = log(λ/l + 1)
    dropout: float = 0.6  # before every linear map
    conv_weight_decay: float = 0.01  # on the convolutions (the authors' wd1)


def dropout_linear(ops: GraphOps, x: Tensor, lin: nn.Linear, p: float, training: bool, *,
                   bias: bool = True) -> Tensor:
    """``lin(dropout(x, p))`` (without ``lin.bias`` if ``bias=False``), the input layer of the
    deep baselines.

    Bag-of-words features are mostly zeros (Cora 1.3 %, Citeseer 0.9 % nonzeros); for such ``x``
    a CSR copy is cached in ``ops`` and dropout draws only its nonzero entries (zeros stay zero
    either way, so the output has the same distribution), ~20x faster on Citeseer. Dense or
    grad-requiring ``x`` takes the plain path.
    """
    xs = sparse_copy(ops, x)
    if xs is None:
        out = F.linear(dropout(x, p, training), lin.weight)
    else:
        values = dropout(xs.values(), p, training)
        with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
            warnings.simplefilter("ignore", UserWarning)
            xd = torch.sparse_csr_tensor(xs.crow_indices(), xs.col_indices(), values, xs.shape,
                                         check_invariants=False)
            out = csr_matmul(xd, lin.weight.T)
    return out + lin.bias if bias and lin.bias is not None else out


def sparse_copy(ops: GraphOps, x: Tensor) -> Tensor | None:
    """The CSR copy of bag-of-words ``x`` that :func:`dropout_linear` drops out and multiplies,
    cached in ``ops``; ``None`` for dense or grad-requiring ``x``."""
    if x.requires_grad:
        return None
    return ops.cached_for(("sparse_features",), x, lambda: _sparse_or_none(x))


def _sparse_or_none(x: Tensor) -> Tensor | None:
    if x.dim() != 2 or x.numel() == 0 or bool((x != 0).float().mean() > SPARSE_DENSITY):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return x.detach().to_sparse_csr()


def identity_strength(lam: float, layer: int) -> float:
    """``β_l = log(λ / l + 1)``, the weight of ``W_l`` in layer ``l ≥ 1`` (GCNII, after eq. 5)."""
    return math.log(lam / layer + 1.0)


def residual_adjacency(ops: GraphOps, alpha: float) -> SparseMatrix:
    """``(1 - α) Â``, cached in ``ops`` (one sparse kernel call per layer via ``addmm``)."""

    def build() -> SparseMatrix:
        return SparseMatrix(ops, ops.gcn_norm().values * (1.0 - alpha), symmetric=True)

    return ops.cached(("gcnii", alpha, ops.dtype), build)


class GCNIIConv(nn.Module):
    r"""One GCNII layer (without its activation):

    .. math::
        s = (1-\alpha)\hat A h + \alpha h^{(0)}, \qquad
        \text{out} = (1-\beta) s + \beta\, s W

    Args:
        channels: width of ``h`` and ``h⁽⁰⁾`` (the layer keeps it).
        alpha: initial-residual weight ``α ∈ [0, 1]``.
        beta: identity-mapping strength ``β`` (``identity_strength(λ, l)`` for layer ``l``).

    Shapes: ``forward(ops, h, h0)``: ``h, h0 (n, channels) → (n, channels)``.

    ``W`` is initialised uniformly in ``±1/√channels`` (the authors' code); no bias.
    """

    def __init__(self, channels: int, alpha: float, beta: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, channels))
        self.alpha, self.beta = alpha, beta
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.weight.shape[1])
        nn.init.uniform_(self.weight, -bound, bound)

    def forward(self, ops: GraphOps, h: Tensor, h0: Tensor) -> Tensor:
        s = residual_adjacency(ops, self.alpha).addmm(self.alpha * h0, h)
        return torch.addmm(s, s, self.weight, beta=1.0 - self.beta, alpha=self.beta)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, alpha={self.alpha}, beta={self.beta:.4f}"


class GCNII(nn.Module):
    """GCNII (see module doc) with the hyperparameters of :class:`GCNIIConfig`.

    Shapes: ``forward(ops, x)``: ``x (n, in_dim) → (n, out_dim)``.
    """

    def __init__(self, in_dim: int, out_dim: int, cfg: GCNIIConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or GCNIIConfig()
        check(isinstance(cfg.layers, int) and cfg.layers >= 1, "GCNII",
              f"layers must be an integer >= 1, got {cfg.layers!r}")
        check(0.0 <= cfg.alpha <= 1.0, "GCNII", f"alpha must be in [0, 1], got {cfg.alpha}")
        check(cfg.lam >= 0.0, "GCNII",
              f"lam must be >= 0 (beta_l = log(lam/l + 1)), got {cfg.lam}")
        check_rates("GCNII", dropout=cfg.dropout)
        check(cfg.conv_weight_decay >= 0.0, "GCNII",
              f"conv_weight_decay must be >= 0, got {cfg.conv_weight_decay}")
        self.lin_in = nn.Linear(in_dim, cfg.hidden)
        self.convs = nn.ModuleList(
            GCNIIConv(cfg.hidden, cfg.alpha, identity_strength(cfg.lam, i))
            for i in range(1, cfg.layers + 1))
        self.lin_out = nn.Linear(cfg.hidden, out_dim)
        self.dropout, self.conv_weight_decay = cfg.dropout, cfg.conv_weight_decay

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> GCNII:
        return cls(in_dim, out_dim, GCNIIConfig.from_mapping(cfg))

    def param_groups(self, weight_decay: float) -> list[dict[str, Any]]:
        """Optimizer parameter groups: the convolutions with ``conv_weight_decay``, the dense
        input/output layers with ``weight_decay`` (the training loop's)."""
        dense = [*self.lin_in.parameters(), *self.lin_out.parameters()]
        return [{"params": list(self.convs.parameters()), "weight_decay": self.conv_weight_decay},
                {"params": dense, "weight_decay": weight_decay}]

    def forward(self, ops: GraphOps, x: Tensor) -> Tensor:
        h0 = F.relu(dropout_linear(ops, x, self.lin_in, self.dropout, self.training))
        h = h0
        for conv in self.convs:
            h = F.relu(conv(ops, dropout(h, self.dropout, self.training), h0))
        return self.lin_out(dropout(h, self.dropout, self.training))
