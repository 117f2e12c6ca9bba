"""IRLS graph attention (paper Sec. 3.3, eq. 20) with the truncated ℓp penalty of the appendix.

One attention layer re-weights the graph's edges from the current node embeddings:
``γ_ij = s(z_ij²)`` with ``z_ij = ||y_i - y_j||₂`` (eq. 20), where ``s = ∂ρ(z²)/∂z²`` is the
score of a concave non-decreasing penalty ``ρ`` (robust energy, eq. 12). The propagation steps
that follow use ``A^(k+1)`` = ``A`` weighted by ``γ`` and the matching degrees (eq. 21); see
:mod:`twirls.models.propagation`. The layer has no parameters.

**The truncated ℓp penalty** (appendix "Specific Attention Formula"), with thresholds
``τ̄ ≤ T̄`` on the distance ``z``::

    ρ(z²) = τ̄^(p-2) z²                        z < τ̄
            (2/p) z^p - ρ₀,  ρ₀ = (2-p)/p τ̄^p   τ̄ ≤ z ≤ T̄
            (2/p) T̄^p - ρ₀                     z > T̄
    s(z²) = τ̄^(p-2),  z^(p-2),  0              (same three intervals)

For ``p = 0`` the middle piece is its limit ``1 + log(z²/τ̄²)`` (``s = z^-2`` still holds).

**Which τ, T the hyperparameters mean.** The appendix says it reports ``τ = τ̄^(1/(2-p))`` and
``T = T̄^(1/(2-p))``. The authors' code (``FFTYYY/TWIRLS`` ``model/submodules.py``, identical to
``dgl.nn.pytorch.conv.twirlsconv.Attention``), which produced the tables' values, does::

    w = (z²)^(1 - p/2)          # = z^(2-p)
    w[w < tau] = tau; w[w > T] = inf
    gamma = 1 / w

i.e. ``γ = τ^-1`` when ``z^(2-p) < τ``, ``z^(p-2)`` in between, ``0`` when ``z^(2-p) > T``. That is
the appendix's ``s`` exactly when ``τ̄^(2-p) = τ`` and ``T̄^(2-p) = T``, i.e.
``τ̄ = τ^(1/(2-p))``, ``T̄ = T^(1/(2-p))``: the appendix states the inverse map. We follow the code
(the only reading under which the published ``τ, T`` produce the published numbers), so the
attention weight below the lower threshold is ``1/τ`` (not 1) and the thresholds act on
``z^(2-p)``. The test suite checks :meth:`TruncatedLp.score` against DGL's ``Attention`` on the
same distances.

Special cases: ``p = 2`` gives ``s ≡ 1`` (no attention; ``T`` must then be ``inf`` because
``T̄ = T^(1/(2-p))`` is undefined); ``T = inf`` means no truncation; ``T = τ`` means pure
truncation (``s ∈ {0, 1/τ}``).

**Placement** (appendix "Basic Architecture Design"): ``"middle"`` computes one attention layer
after ``S // 2`` of the ``S`` propagation steps (the reference's ``attn_aft = prop_step // 2``);
``"before+middle"`` adds one on ``f(X; W)`` before the first step (heterophily datasets, the
reference's ``--attn_bef``); ``"every"`` re-computes it before every step (plain IRLS, eqs.
20-21, used to check Lemma 3.3).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from twirls.models.config import check, field_defaults, resolve_config

PLACEMENTS = ("middle", "before+middle", "every")


@dataclass(frozen=True)
class TruncatedLp:
    """The truncated ℓp penalty ``ρ`` and its attention score ``s`` (appendix), see module doc.

    Args:
        p: exponent, ``0 ≤ p ≤ 2`` (``2``: no attention).
        tau: lower threshold ``τ > 0`` (on ``z^(2-p)``; weights are ``1/τ`` below it).
        T: upper threshold ``T ≥ τ`` (edges with ``z^(2-p) > T`` get weight 0); ``inf``: none.
    """

    p: float = 1.0
    tau: float = 0.2
    T: float = math.inf

    def __post_init__(self) -> None:
        check(0.0 <= self.p <= 2.0, "attention", f"p must be in [0, 2], got p={self.p}")
        check(self.tau > 0.0, "attention", f"tau must be > 0, got tau={self.tau}")
        check(self.T >= self.tau, "attention",
              f"T must be >= tau (T=tau: pure truncation, T=inf: none), got T={self.T}, "
              f"tau={self.tau}")
        check(self.p < 2.0 or math.isinf(self.T), "attention",
              "p = 2 means no attention, so T must be inf (T̄ = T^(1/(2-p)) is undefined at p=2)")

    @property
    def tau_bar(self) -> float:
        """Lower threshold on the distance ``z``: ``τ̄ = τ^(1/(2-p))``."""
        return self.tau ** (1.0 / (2.0 - self.p))

    @property
    def T_bar(self) -> float:  # noqa: N802 (paper notation)
        """Upper threshold on the distance ``z``: ``T̄ = T^(1/(2-p))``."""
        return math.inf if math.isinf(self.T) else self.T ** (1.0 / (2.0 - self.p))

    def score(self, z2: Tensor) -> Tensor:
        """Attention weights ``γ = s(z²)`` (eq. 20) for squared distances ``z2 ≥ 0``."""
        if self.p == 2.0:
            return torch.ones_like(z2)
        # w = max(z^(2-p), τ); clamping z² at τ̄² first keeps gradients finite at z = 0, and
        # the fill makes w exactly τ below the threshold (so T = τ truncates nothing there)
        tb2 = self.tau_bar**2
        w = z2.clamp(min=tb2).pow(1.0 - self.p / 2.0).masked_fill(z2 < tb2, self.tau)
        s = w.reciprocal()
        if not math.isinf(self.T):
            s = torch.where(w > self.T, torch.zeros_like(s), s)
        return s

    def rho(self, z2: Tensor) -> Tensor:
        """The penalty ``ρ(z²)`` whose derivative in ``z²`` is :meth:`score` (eq. 12)."""
        if self.p == 2.0:
            return z2.clone()
        tb2 = self.tau_bar**2
        zc = z2.clamp(min=tb2, max=self.T_bar**2)
        # (2/p) z^p - ρ₀ = τ̄^p [1 + (2/p) expm1((p/2) L)], L = log(z²/τ̄²): written with
        # expm1(x)/x (→ 1 as x → 0) so tiny p neither cancels nor overflows, and p = 0 gives
        # its limit 1 + L exactly
        log_ratio = torch.log(zc / tb2)
        x = (self.p / 2.0) * log_ratio
        safe = torch.where(x == 0, torch.ones_like(x), x)
        rel = torch.where(x == 0, torch.ones_like(x), torch.expm1(safe) / safe)
        middle = self.tau_bar**self.p * (1.0 + log_ratio * rel)
        return torch.where(z2 < tb2, z2 / self.tau, middle)


def cosine_rho(z2: Tensor) -> Tensor:
    """``ρ(z²) = z² - z⁴/8``: the penalty implied by cosine attention on unit-norm embeddings
    (paper Sec. 3.4, Fig. "ρ(z²) vs z²"); concave and non-decreasing on ``0 ≤ z² ≤ 4``."""
    return z2 - z2.pow(2) / 8.0


def cosine_score(z2: Tensor) -> Tensor:
    """``s(z²) = 1 - z²/4 = (cos∠(y_i, y_j) + 1) / 2`` for unit-norm ``y``: derivative of
    :func:`cosine_rho`."""
    return 1.0 - z2 / 4.0


@dataclass(frozen=True)
class AttentionSpec:
    """Where attention layers go among ``S`` propagation steps, and which ``ρ`` they use."""

    rho: TruncatedLp
    placement: str = "middle"

    def __post_init__(self) -> None:
        check(self.placement in PLACEMENTS, "attention",
              f"placement must be one of {PLACEMENTS}, got {self.placement!r}")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> AttentionSpec | None:
        """From ``{p, tau, T, placement}`` (``T``: number, ``inf``, ``"inf"`` or ``None``);
        defaults: :class:`TruncatedLp`'s and this class's."""
        if cfg is None:
            return None
        c = resolve_config("attention", cfg, {**field_defaults(TruncatedLp), **field_defaults(cls)})
        big_t = c["T"]
        if big_t is None or (isinstance(big_t, str) and big_t.lower() in ("inf", "+inf")):
            big_t = math.inf
        check(isinstance(big_t, int | float) and big_t > 0, "attention",
              f"T must be a positive number or inf/None (no truncation), got {c['T']!r} "
              "(the reference code's T <= 0 means inf: write inf instead)")
        return cls(TruncatedLp(float(c["p"]), float(c["tau"]), float(big_t)), c["placement"])

    def positions(self, steps: int) -> frozenset[int]:
        """Numbers ``k`` of completed steps after which attention is (re)computed (``k < S``)."""
        if self.placement == "every":
            return frozenset(range(steps))
        middle = {steps // 2} if 1 <= steps // 2 < steps else set()
        if self.placement == "before+middle":
            middle.add(0)
        return frozenset(middle)
