r"""IGNN (Gu et al., NeurIPS 2020, "Implicit Graph Neural Networks"): node states defined as the
fixed point of one graph recurrence, solved by iteration, trained by implicit differentiation.

The implicit layer (IGNN paper, eq. 2, written node-major here: row ``i`` of ``H`` is node
``i``'s state, ``H = Xᵀ`` of the paper's ``m × n`` state ``X``)

.. math::

    X = \phi\big(W X \hat A + b_\Omega(U)\big), \qquad
    b_\Omega(U) = \Omega U \hat A
    \quad\Longleftrightarrow\quad
    H = \mathrm{ReLU}\big(\hat A H W^\top + \hat A U \Omega^\top\big),

with :math:`\hat A = \tilde D^{-1/2} \tilde A \tilde D^{-1/2}` (IGNN's ``AugNormAdj``, used by
its Chains and Amazon scripts alike; :meth:`GraphOps.gcn_norm`), ``W`` (m × m) and ``Ω``
(m × p) learned, ``φ = ReLU``, and ``U`` the node features (``p × n``). IGNN's reference code
(``SwiftieH/IGNN``, ``nodeclassification/layers.py``) injects the features *propagated once*,
``Ω U Â``; its second input matrix ``Omega_2`` and its ``bias`` are created but never used, so
they do not exist here. Without features (Amazon), IGNN feeds ``U = I`` (a sparse identity),
so ``Ω U = Ω`` is a learned ``m``-vector per node: here an ``(n, m)`` table.

**Well-posedness** (IGNN Sec. 4, Perron-Frobenius theory): the equation has a unique solution
and the iteration converges whenever :math:`\lambda_{pf}(|W|)\,\lambda_{pf}(\hat A) < 1`; the
tractable sufficient condition enforced during training is

.. math::

    \|W\|_\infty \le \kappa / \lambda_{pf}(\hat A), \qquad 0 < \kappa < 1,

kept by projecting ``W`` (each row onto the ℓ1 ball of that radius, :func:`project_norm_inf`;
IGNN's ``projection_norm_inf``) at the start of every forward pass, i.e. projected gradient
descent, exactly where IGNN's ``ImplicitGraph.forward`` does it. ``λ_pf(Â)`` is bounded above by
the Collatz-Wielandt ratio :func:`perron_frobenius_bound` (exact for ``Â``: its Perron vector is
``D̃^{1/2} 1`` with eigenvalue 1), plus IGNN's safety margin ``1e-5``.

**Forward** (IGNN's ``ImplicitFunction.inn_pred``): ``H ← ReLU(Â H Wᵀ + B)`` from ``H = 0``
until the largest entry of the change is below ``tol`` or ``max_iter`` iterations.

**Backward** (IGNN Sec. 4.2, implicit differentiation; IGNN's ``ImplicitFunction.backward``):
with ``Z = Â H Wᵀ + B`` at the fixed point, ``D = φ'(Z)`` and ``G_H = ∂ℓ/∂H``, the gradient
``G = ∂ℓ/∂Z`` solves the adjoint fixed-point equation

.. math::

    G = D \odot \big(G_H + \hat A^\top G\, W\big),

solved by the same iteration (it converges under the same condition); then
``∂ℓ/∂W = Gᵀ (Â H)`` and ``∂ℓ/∂B = G``. Nothing of the forward iterations is stored.

Heads (IGNN's ``models_chains.py`` / ``models_amazon.py``): one implicit layer of width
``hidden``, then (Chains only) each node's state L2-normalised, dropout, and a linear map
``V`` without bias to the classes.

IGNN's Chains script clips each parameter's gradient to norm 0.5 before the Adam step
(``clip_gradient(model, clip_norm=0.5)``); ``clip_grad_norm`` does the same here through
gradient hooks, so the shared training loop needs no change.
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


@dataclass(frozen=True)
class IGNNConfig(ModelConfig):
    """IGNN hyperparameters (the ``model_cfg`` keys of ``model: ignn``).

    IGNN's scripts: Chains ``hidden 16, kappa 0.9, dropout 0.5``, Adam lr 0.01, weight decay
    5e-4, 2000 epochs, gradient clipping 0.5; Amazon ``hidden 128, kappa 0.95, dropout 0.5``,
    no normalisation, lr 0.01, no weight decay, 5000 epochs, no clipping.
    """

    MODEL: ClassVar[str] = "IGNN"

    hidden: int = 16  # m, width of the implicit state
    kappa: float = 0.9  # ||W||_∞ <= kappa / λ_pf(Â), 0 < kappa < 1 (IGNN's --kappa)
    dropout: float = 0.5  # on the states before V
    normalize: bool = True  # L2-normalise each node's state (the Chains model; Amazon: False)
    max_iter: int = 300  # forward fixed-point iterations at most
    tol: float = 3e-6  # forward stopping tolerance
    backward_max_iter: int = 300  # the same for the adjoint equation
    backward_tol: float = 3e-6
    clip_grad_norm: float | None = None  # per-parameter gradient norm cap (Chains script: 0.5)


PF_MARGIN = 1e-5  # IGNN's get_spectral_rad(tol=1e-5): λ_pf(Â) + 1e-5
PF_POWER_STEPS = 20  # power iterations that tighten the Collatz-Wielandt bound


def project_norm_inf(weight: Tensor, radius: float) -> Tensor:
    """The Euclidean projection of ``weight`` onto ``{W : ||W||_∞ ≤ radius}``.

    ``||W||_∞`` is the largest absolute row sum, so the set is a product of ℓ1 balls, one per
    row: rows already inside are kept, the others are soft-thresholded, ``w ← sign(w)
    max(|w| - θ, 0)`` with the ``θ`` that puts them on the sphere (Duchi et al., 2008, sort-based;
    the same map as IGNN's row-by-row ``projection_norm_inf``).
    """
    if radius <= 0:
        raise ValueError(f"project_norm_inf: radius must be > 0, got {radius}")
    a = weight.abs()
    outside = a.sum(-1) > radius
    if not bool(outside.any()):
        return weight
    u = a.sort(-1, descending=True).values
    css = u.cumsum(-1) - radius
    j = torch.arange(1, u.shape[-1] + 1, dtype=u.dtype, device=u.device)
    rho = (u - css / j > 0).sum(-1, keepdim=True)  # ≥ 1 for every row outside the ball
    theta = css.gather(-1, (rho - 1).clamp(min=0)) / rho.clamp(min=1).to(u.dtype)
    shrunk = weight.sign() * (a - theta).clamp(min=0)
    return torch.where(outside.unsqueeze(-1), shrunk, weight)


def perron_frobenius_bound(adj: SparseMatrix, start: Tensor | None = None) -> float:
    """An upper bound on ``λ_pf(|M|)`` (the spectral radius of a nonnegative matrix).

    Collatz-Wielandt: ``λ_pf(M) ≤ max_i (M x)_i / x_i`` for every positive ``x``; the bound is
    taken at ``start`` (default ``D̃^{1/2} 1``, the Perron vector of ``D̃^-1/2 Ã D̃^-1/2``,
    for which it is exact) and at :data:`PF_POWER_STEPS` power iterates, and the smallest is
    returned. Valid for any nonnegative ``M``, connected graph or not.
    """
    ops = adj.ops
    values = adj.values.detach().abs()
    mat = SparseMatrix(ops, values).csr
    x = (ops.deg.to(values.dtype) + 1.0).sqrt() if start is None else start.to(values.dtype)
    x = x.reshape(-1, 1)
    best = math.inf
    for _ in range(PF_POWER_STEPS + 1):
        y = mat @ x
        best = min(best, float((y / x).max()))
        x = y / y.max()
        if not bool((x > 0).all()):  # a zero entry: the ratio is no longer defined
            break
    return best


class _ImplicitSolve(torch.autograd.Function):
    """``H = ReLU(Â H Wᵀ + B)`` by fixed-point iteration; backward by the adjoint fixed point."""

    @staticmethod
    def forward(ctx, weight: Tensor, b: Tensor, adj: SparseMatrix, layer: ImplicitGraph
                ) -> Tensor:  # type: ignore[override]
        with torch.no_grad():
            h, residual, iters = _fixed_point(
                lambda h: F.relu(adj.csr @ (h @ weight.t()) + b), torch.zeros_like(b),
                layer.max_iter, layer.tol)
            z = adj.csr @ (h @ weight.t()) + b
        layer.last_forward = (iters, residual)
        if not _converged(residual, layer.tol, h):  # IGNN prints a line and goes on
            layer.unconverged["forward"] += 1
            warnings.warn("IGNN: a forward fixed-point solve stopped at max_iter above tol "
                          "(counts in ImplicitGraph.unconverged)", stacklevel=2)
        ctx.adj, ctx.layer = adj, layer
        ctx.save_for_backward(weight, h, (z > 0).to(h.dtype))
        return h

    @staticmethod
    def backward(ctx, grad_h: Tensor):  # type: ignore[override]
        weight, h, dphi = ctx.saved_tensors
        adj: SparseMatrix = ctx.adj
        layer: ImplicitGraph = ctx.layer
        grad_h = grad_h.contiguous()
        with torch.no_grad():
            g, residual, iters = _fixed_point(
                lambda g: dphi * (grad_h + adj.csr_t @ (g @ weight)), torch.zeros_like(grad_h),
                layer.backward_max_iter, layer.backward_tol)
            grad_w = g.t() @ (adj.csr @ h)
        layer.last_backward = (iters, residual)
        if not _converged(residual, layer.backward_tol, g):
            layer.unconverged["backward"] += 1
            warnings.warn("IGNN: a backward fixed-point solve stopped at backward_max_iter above "
                          "backward_tol (counts in ImplicitGraph.unconverged)", stacklevel=2)
        return grad_w, g, None, None


def _converged(residual: float, tol: float, x: Tensor) -> bool:
    """The stopping test ``residual < tol`` (IGNN's, absolute), or the same relative to the
    largest entry of ``x`` when that exceeds 1 (float32 cannot resolve ``tol`` there)."""
    return residual < tol * max(1.0, float(x.abs().max()) if x.numel() else 0.0)


def _fixed_point(step, x: Tensor, max_iter: int, tol: float) -> tuple[Tensor, float, int]:
    """Iterate ``x ← step(x)`` until ``max|Δx| < tol`` (IGNN's test, ``torch.norm(·, inf)``)
    or ``max_iter`` steps; returns the last iterate, its residual and the number of steps."""
    residual = math.inf
    for it in range(1, max_iter + 1):
        x_new = step(x)
        residual = float((x_new - x).abs().max()) if x.numel() else 0.0
        x = x_new
        if residual < tol:
            return x, residual, it
    return x, residual, max_iter


class ImplicitGraph(nn.Module):
    r"""One IGNN implicit layer: the fixed point of ``H = ReLU(Â H Wᵀ + Â U Ωᵀ)``.

    Args:
        in_dim: feature width ``p`` (``0``: no features, learn a per-node input instead,
            IGNN's ``U = I``; then ``num_nodes`` is required).
        hidden: state width ``m``.
        kappa, max_iter, tol, backward_max_iter, backward_tol: see :class:`IGNNConfig` (whose
            defaults these are).
        num_nodes: number of nodes (only for ``in_dim = 0``).

    Initialisation as IGNN's ``ImplicitGraph.init``: ``W`` and ``Ω`` uniform in
    ``±1/sqrt(m)``.

    Attributes:
        last_forward, last_backward: ``(iterations, residual)`` of the latest solves.
        unconverged: how many forward / backward solves stopped at their iteration limit with
            the residual above the tolerance, relative to the solution's largest entry where
            that exceeds 1 (IGNN prints a line and goes on; so do we, with one warning). The
            iterations stop on IGNN's absolute test, which float32 cannot meet when ``∂ℓ/∂H``
            is huge: ``F.normalize`` of a (near-)zero state, which Chains' featureless far-away
            nodes have, multiplies the gradient by up to ``1e12``; the adjoint solve then runs
            to ``backward_max_iter`` at a relative residual near float32's resolution.

    Shapes: ``forward(ops, x)``: ``x (n, in_dim)`` or ``None`` → ``(n, hidden)``.
    """

    def __init__(self, in_dim: int, hidden: int, *, kappa: float = IGNNConfig.kappa,
                 max_iter: int = IGNNConfig.max_iter, tol: float = IGNNConfig.tol,
                 backward_max_iter: int = IGNNConfig.backward_max_iter,
                 backward_tol: float = IGNNConfig.backward_tol,
                 num_nodes: int | None = None) -> None:
        super().__init__()
        check(0.0 < kappa < 1.0, "IGNN", f"kappa must be in (0, 1), got {kappa}")
        check(hidden >= 1, "IGNN", f"hidden must be >= 1, got {hidden}")
        check(max_iter >= 1 and backward_max_iter >= 1, "IGNN",
              f"max_iter and backward_max_iter must be >= 1, got {max_iter}, "
              f"{backward_max_iter}")
        check(tol > 0 and backward_tol > 0, "IGNN", "tol and backward_tol must be > 0")
        check(in_dim > 0 or (num_nodes or 0) > 0, "IGNN",
              "without node features (in_dim = 0) the layer learns a vector per node and needs "
              "num_nodes")
        self.kappa, self.max_iter, self.tol = kappa, max_iter, tol
        self.backward_max_iter, self.backward_tol = backward_max_iter, backward_tol
        std = 1.0 / math.sqrt(hidden)
        self.weight = nn.Parameter(torch.empty(hidden, hidden).uniform_(-std, std))
        # Ω (m × p) stored as p × m (or n × m without features): B = Â (U Ωᵀ)
        rows = in_dim if in_dim > 0 else int(num_nodes)  # type: ignore[arg-type]
        self.omega = nn.Parameter(torch.empty(rows, hidden).uniform_(-std, std))
        self.uses_features = in_dim > 0
        self.last_forward: tuple[int, float] = (0, math.nan)
        self.last_backward: tuple[int, float] = (0, math.nan)
        self.unconverged = {"forward": 0, "backward": 0}

    def radius(self, ops: GraphOps) -> float:
        """``kappa / (λ_pf(Â) + 1e-5)``, the ∞-norm bound on ``W`` (λ_pf cached per graph)."""
        adj = ops.gcn_norm()
        lam = ops.cached(("ignn_lambda_pf", adj.values.dtype),
                         lambda: perron_frobenius_bound(adj))
        return self.kappa / (lam + PF_MARGIN)

    def project_(self, ops: GraphOps) -> None:
        """Project ``W`` in place onto ``||W||_∞ ≤ kappa / λ_pf(Â)``."""
        with torch.no_grad():
            self.weight.copy_(project_norm_inf(self.weight, self.radius(ops)))

    def forward(self, ops: GraphOps, x: Tensor | None) -> Tensor:
        adj = ops.gcn_norm()
        self.project_(ops)
        if self.uses_features:
            if x is None:
                raise ValueError("IGNN: built for node features but got x=None")
            b = adj @ (x @ self.omega)
        else:
            b = adj @ self.omega
        return _ImplicitSolve.apply(self.weight, b, adj, self)


class IGNN(nn.Module):
    """IGNN for node classification (IGNN's ``models_chains.py`` / ``models_amazon.py``).

    ``logits = V · dropout(normalize(H))`` with ``H`` the fixed point of :class:`ImplicitGraph`.

    Hyperparameters: :class:`IGNNConfig`.

    Shapes: ``forward(ops, x)``: ``x (n, in_dim)`` (or ``None`` with ``in_dim = 0`` and
    ``num_nodes``) → ``(n, out_dim)``.
    """

    accepts_no_features = True  # in_dim = 0: IGNN's own U = I, a learned column per node

    def __init__(self, in_dim: int, out_dim: int, cfg: IGNNConfig | None = None,
                 num_nodes: int | None = None) -> None:
        super().__init__()
        cfg = cfg or IGNNConfig()
        check_rates("IGNN", dropout=cfg.dropout)
        clip = cfg.clip_grad_norm
        check(clip is None or clip > 0, "IGNN", f"clip_grad_norm must be > 0 or null, got {clip}")
        self.implicit = ImplicitGraph(in_dim, cfg.hidden, kappa=cfg.kappa,
                                      max_iter=cfg.max_iter, tol=cfg.tol,
                                      backward_max_iter=cfg.backward_max_iter,
                                      backward_tol=cfg.backward_tol, num_nodes=num_nodes)
        self.out = nn.Linear(cfg.hidden, out_dim, bias=False)
        self.dropout = cfg.dropout
        self.normalize = bool(cfg.normalize)
        self.clip_grad_norm = clip
        if clip is not None:
            for param in self.parameters():
                param.register_hook(_clipper(float(clip)))

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> IGNN:
        return cls(in_dim, out_dim, IGNNConfig.from_mapping(cfg), num_nodes=num_nodes)

    def forward(self, ops: GraphOps, x: Tensor | None) -> Tensor:
        h = self.implicit(ops, x)
        if self.normalize:
            h = F.normalize(h, dim=-1)
        h = dropout(h, self.dropout, self.training)
        return self.out(h)


def _clipper(max_norm: float):
    """A gradient hook: ``torch.nn.utils.clip_grad_norm_`` on one parameter (IGNN's
    ``clip_gradient``, which clips every parameter separately)."""

    def hook(grad: Tensor) -> Tensor:
        norm = grad.norm()
        return grad * (max_norm / (norm + 1e-6)).clamp(max=1.0)

    return hook
