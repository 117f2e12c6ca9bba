"""The energies TWIRLS descends, their closed-form minimiser, and Lemma 3.3's step-size bound.

For tests and for measuring, on real data, that the propagation really minimises them:

* :func:`energy`, eq. 1: ``ℓ_Y(Y) = ||Y - f||²_F + λ tr[Yᵀ L Y]``, ``tr[Yᵀ L Y] =
  Σ_{i,j}∈E ||y_i - y_j||²`` (eq. 11, each undirected edge once);
* :func:`robust_energy`, eq. 12: ``||Y - f||²_F + λ Σ_{i,j}∈E ρ(||y_i - y_j||²)``;
* :func:`closed_form`, eq. 2: ``Y* = (I + λL)⁻¹ f`` (dense solve: small graphs only), or
  ``(I + λ L̃)⁻¹ f`` for the normalized-Laplacian variant;
* :func:`lemma33_alpha_bound`: ``||λ Bᵀ Γ B + I||₂⁻¹ = 1 / (1 + λ λ_max(L_Γ))``, the step size
  under which Lemma 3.3 (eq. 22) guarantees ``ℓ_Y(Y⁽ᵏ⁾; ρ) ≥ ℓ_Y(Y⁽ᵏ⁺¹⁾; ρ)``;
* :func:`jacobi_alpha_limit`: the step size under which the Jacobi-preconditioned step of eq. 6 /
  eq. 21 (what TWIRLS runs) provably descends; always ``> 1``, unlike Lemma 3.3's bound;
* :func:`energy_trace`: the energy at every iterate of a propagation.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from twirls.models.graph_ops import GraphOps
from twirls.models.propagation import PropagationSpec, iterates


def energy(ops: GraphOps, y: Tensor, f: Tensor, lam: float) -> Tensor:
    """``ℓ_Y(Y)`` of eq. 1 (a scalar tensor)."""
    return (y - f).pow(2).sum() + lam * 0.5 * ops.edge_sq_dist(y).sum()


def robust_energy(ops: GraphOps, y: Tensor, f: Tensor, lam: float,
                  rho: Callable[[Tensor], Tensor]) -> Tensor:
    """``ℓ_Y(Y; ρ)`` of eq. 12; ``rho`` maps squared distances to penalties (e.g.
    ``TruncatedLp(...).rho``). Each undirected edge counts once."""
    return (y - f).pow(2).sum() + lam * 0.5 * rho(ops.edge_sq_dist(y)).sum()


def normalized_laplacian_dense(ops: GraphOps) -> Tensor:
    """Dense ``L̃ = I - D̂^-1/2 Ã D̂^-1/2`` with ``D̂ = D + I`` (appendix, normalized unfolding)."""
    eye = torch.eye(ops.n, dtype=ops.dtype, device=ops.device)
    return eye - ops.gcn_norm().to_dense()


def closed_form(ops: GraphOps, f: Tensor, lam: float, *, normalized: bool = False) -> Tensor:
    """``(I + λL)⁻¹ f`` (eq. 2), or ``(I + λL̃)⁻¹ f`` if ``normalized``; dense ``O(n³)``."""
    lap = normalized_laplacian_dense(ops) if normalized else ops.laplacian_dense()
    q = torch.eye(ops.n, dtype=lap.dtype, device=ops.device) + lam * lap
    return torch.linalg.solve(q, f.to(lap.dtype))


def lemma33_alpha_bound(ops: GraphOps, lam: float, gamma: Tensor | None = None,
                        *, method: str = "auto", iters: int = 500) -> float:
    """``1 / ||λ Bᵀ Γ B + I||₂`` for edge weights ``gamma`` (2m,) (``None``: all 1).

    ``method="dense"``: exact ``eigvalsh``; ``"power"``: power iteration on the sparse ``L_Γ``
    (``iters`` products; approaches ``λ_max`` from below, so the bound is slightly optimistic);
    ``"auto"``: dense up to 4,000 nodes.
    """
    if method not in ("auto", "dense", "power"):
        raise ValueError(f"method must be 'auto', 'dense' or 'power', got {method!r}")
    w = torch.ones(ops.num_edges, dtype=ops.dtype, device=ops.device) if gamma is None else gamma
    w = w.detach()
    if method == "dense" or (method == "auto" and ops.n <= 4000):
        lam_max = float(torch.linalg.eigvalsh(ops.laplacian_dense(w))[-1])
    else:
        lap = ops.matrix(-w, ops.weighted_degree(w), symmetric=True)
        v = torch.randn(ops.n, 1, dtype=w.dtype, device=ops.device,
                        generator=torch.Generator(device=ops.device).manual_seed(0))
        lam_max = 0.0
        for _ in range(iters):
            v = lap @ v
            lam_max = float(v.norm())
            v = v / max(lam_max, 1e-30)
    return 1.0 / (1.0 + lam * lam_max)


def jacobi_alpha_limit(ops: GraphOps, lam: float, gamma: Tensor | None = None) -> float:
    """``2 / λ_max(D̃^-1/2 (I + λ L_Γ) D̃^-1/2)``, ``D̃ = λ D_Γ + I``: the largest ``α`` for which
    the Jacobi-preconditioned step of eq. 6 / eq. 21 descends its quadratic (dense ``eigvalsh``).
    Always in ``(1, 2]`` because ``λ D̃⁻¹ A_Γ`` has spectral radius ``< 1``."""
    w = torch.ones(ops.num_edges, dtype=ops.dtype) if gamma is None else gamma
    inv = (lam * ops.weighted_degree(w) + 1.0).rsqrt()
    q = torch.eye(ops.n, dtype=ops.dtype) + lam * ops.laplacian_dense(w)
    return 2.0 / float(torch.linalg.eigvalsh(inv[:, None] * q * inv[None, :])[-1])


def energy_trace(ops: GraphOps, f: Tensor, spec: PropagationSpec,
                 rho: Callable[[Tensor], Tensor] | None = None) -> list[float]:
    """``ℓ_Y(Y⁽ᵏ⁾; ρ)`` (or eq. 1 if ``rho`` is None) for ``k = 0..S`` of ``spec``'s iterates."""
    with torch.no_grad():
        if rho is None:
            return [float(energy(ops, y, f, spec.lam)) for y in iterates(ops, f, spec)]
        return [float(robust_energy(ops, y, f, spec.lam, rho)) for y in iterates(ops, f, spec)]
