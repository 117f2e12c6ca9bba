"""TWIRLS propagation: unfolded (proximal) gradient steps on the energy of eq. 1 / eq. 12.

Every step has the form ``Y ← M Y + c`` (then ``ReLU`` if ``prox_relu``), with a sparse ``M`` on
the pattern of ``Ã = A + I`` and ``c = scale ⊙ f``, so one step is a single sparse kernel call
(:meth:`SparseMatrix.addmm`). Without attention ``M`` and ``scale`` are constants cached in the
:class:`GraphOps`; an attention layer (eq. 20) replaces them by re-weighted ones (eq. 21).

``variant="paper"`` follows the paper's equations on ``Y``:

* eq. 6 (Jacobi-preconditioned gradient step), ``D̃ = λD + I``::

      Y ← (1-α) Y + α D̃⁻¹ (λ A Y + f)

  with attention (eq. 21) ``A → A_γ`` (edge ``i-j`` weighted by ``γ_ij``), ``D → D_γ`` (its row
  sums). With ``prox_relu`` the step is eq. 10: ``Y ← ReLU(...)``.
* ``normalized=True``, appendix "Normalized Laplacian Unfolding" (used for ogbn-arxiv and
  Amazon), gradient steps on ``||Y - f||² + λ tr[Yᵀ L̃ Y]``, ``L̃ = I - D̂^-1/2 Ã D̂^-1/2``,
  ``D̂ = D + I``::

      Y ← (1 - α - αλ) Y + αλ D̂^-1/2 Ã D̂^-1/2 Y + α f

  It converges to ``(I + λ L̃)⁻¹ f`` when ``α (1 + 2λ) < 2``. With attention only the edges of
  ``A`` are re-weighted (self-loops keep weight 1) and distances are taken on ``Y``; this
  combination is not used in the paper and has no descent guarantee.

``variant="reference"`` reproduces the authors' code (``dgl.nn.TWIRLSConv``, FFTYYY/TWIRLS), which
differs from the equations:

* it propagates the reparameterised ``Z`` (appendix "Alternative GCN-like Reparameterization",
  ``Z⁽⁰⁾ = f``) and returns ``Z``, not ``Y``;
* it adds self-loops and keeps them in the propagation matrix. With ``D̂ = λ deg(Ã) + (1-λ) I``
  (``= λD + I`` before attention)::

      Z ← (1-α) Z + αλ D̂^-1/2 Ã D̂^-1/2 Z + α D̂⁻¹ f

  whereas the appendix's eq. has ``A`` (no ``I``) in the middle term. Its fixed point is
  ``(I - λ D̂^-1/2 Ã D̂^-1/2)⁻¹ D̂⁻¹ f`` for ``λ < 1``; at ``λ = 1`` (Cora, Citeseer, Pubmed)
  ``D̂^-1/2 Ã D̂^-1/2`` has eigenvalue 1 and the iterates grow linearly along ``D̂^1/2 1``, so
  there is no limit; with ``α = λ = 1`` one step is GCN *plus* ``D̂⁻¹ f``;
* attention weights every entry of ``Ã`` including self-loops (distance 0, weight ``s(0) = 1/τ``)
  using distances between rows of ``Z``, and ``deg`` becomes the weighted row sum over ``Ã``;
* ``normalized=True`` (``--no_precond``): ``Y ← (1-α-αλ) Y + αλ D^-1/2 Ã D^-1/2 Y + α f`` with
  ``D = deg(Ã)``, the same as the paper's normalized variant before attention.

The reference adds ``1e-7``/``1e-9`` guards to distances and weights; we do not (differences
``< 1e-6`` relative).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from twirls.models.attention import AttentionSpec
from twirls.models.config import check
from twirls.models.graph_ops import GraphOps, SparseMatrix

VARIANTS = ("paper", "reference")


@dataclass(frozen=True)
class PropagationSpec:
    """Hyperparameters of the ``S`` propagation steps.

    Args:
        steps: number of propagation steps ``S ≥ 0``.
        lam: ``λ > 0``, weight of the graph term in eq. 1.
        alpha: step size ``α > 0`` (eq. 5: the gradient step is ``α/2``).
        variant: ``"paper"`` (equations) or ``"reference"`` (authors' code), see module doc.
        normalized: normalized-Laplacian unfolding instead of Jacobi preconditioning.
        prox_relu: proximal step for ``Y ≥ 0`` (eq. 10), a ReLU after every step.
        attention: where and how to re-weight edges (eq. 20), ``None`` for TWIRLS-base.
    """

    steps: int
    lam: float
    alpha: float
    variant: str = "paper"
    normalized: bool = False
    prox_relu: bool = False
    attention: AttentionSpec | None = None

    def __post_init__(self) -> None:
        check(isinstance(self.steps, int) and self.steps >= 0, "TWIRLS",
              f"steps must be an integer >= 0, got {self.steps!r}")
        check(self.lam > 0, "TWIRLS", f"lam must be > 0, got {self.lam}")
        check(self.alpha > 0, "TWIRLS", f"alpha must be > 0, got {self.alpha}")
        check(self.variant in VARIANTS, "TWIRLS",
              f"variant must be one of {VARIANTS}, got {self.variant!r}")

    @property
    def has_attention(self) -> bool:
        return self.attention is not None and self.attention.rho.p < 2.0


# ---------------------------------------------------------------------------- step operators
def paper_operator(ops: GraphOps, lam: float, alpha: float, normalized: bool,
                   gamma: Tensor | None = None) -> tuple[SparseMatrix, Tensor]:
    """``(M, scale)`` of one paper step ``Y ← M Y + scale ⊙ f`` (eqs. 6/21, or the normalized
    variant); ``gamma`` (2m,) are attention weights on the edges of ``A`` (``None``: all 1)."""
    deg = ops.deg if gamma is None else ops.weighted_degree(gamma)
    w = 1.0 if gamma is None else gamma
    if normalized:
        d_hat = deg + 1.0
        inv = d_hat.rsqrt()
        off = alpha * lam * w * inv.index_select(0, ops.dst) * inv.index_select(0, ops.src)
        diag = (1.0 - alpha - alpha * lam) + alpha * lam / d_hat
        scale = torch.full_like(d_hat, alpha)
        return ops.matrix(off, diag, symmetric=True), scale[:, None]
    d_tilde = lam * deg + 1.0
    off = (alpha * lam) * w / d_tilde.index_select(0, ops.dst)
    return ops.matrix(off, 1.0 - alpha), (alpha / d_tilde)[:, None]


def reference_operator(ops: GraphOps, lam: float, alpha: float, normalized: bool,
                       weight: Tensor | None = None) -> tuple[SparseMatrix, Tensor]:
    """``(M, scale)`` of one step of ``dgl.nn.TWIRLSConv`` (see module doc); ``weight``
    (2m + n,) are weights on every entry of ``Ã`` (``None``: all 1)."""
    if weight is None:
        weight = torch.ones(ops.row.numel(), dtype=ops.dtype, device=ops.device)
    deg = torch.zeros(ops.n, dtype=weight.dtype, device=ops.device).index_add(0, ops.row, weight)
    loop = ops.is_loop.to(weight.dtype)
    if normalized:
        inv = deg.rsqrt()
        inv_i, inv_j = inv.index_select(0, ops.row), inv.index_select(0, ops.col)
        values = alpha * lam * weight * inv_i * inv_j + (1.0 - alpha - alpha * lam) * loop
        scale = torch.full_like(deg, alpha)
    else:
        d_hat = lam * deg + (1.0 - lam)
        inv = d_hat.rsqrt()
        inv_i, inv_j = inv.index_select(0, ops.row), inv.index_select(0, ops.col)
        values = alpha * lam * weight * inv_i * inv_j + (1.0 - alpha) * loop
        scale = alpha / d_hat
    return SparseMatrix(ops, values, symmetric=True), scale[:, None]


def _operator(ops: GraphOps, spec: PropagationSpec, state: Tensor | None
              ) -> tuple[SparseMatrix, Tensor]:
    """The step operator, re-weighted by attention on ``state`` (``None``: un-weighted, cached)."""
    build = paper_operator if spec.variant == "paper" else reference_operator
    if state is None:
        key = ("twirls_operator", spec.variant, spec.normalized, spec.lam, spec.alpha, ops.dtype)
        return ops.cached(key, lambda: build(ops, spec.lam, spec.alpha, spec.normalized))
    assert spec.attention is not None
    z2 = ops.edge_sq_dist(state, with_loops=spec.variant == "reference")
    return build(ops, spec.lam, spec.alpha, spec.normalized, spec.attention.rho.score(z2))


# ---------------------------------------------------------------------------- propagation
def _attention_positions(spec: PropagationSpec) -> frozenset[int]:
    """The steps before which an attention layer (eq. 20) re-weights the graph."""
    return spec.attention.positions(spec.steps) if spec.has_attention else frozenset()


def _step_terms(ops: GraphOps, f: Tensor, spec: PropagationSpec, state: Tensor | None
                ) -> tuple[SparseMatrix, Tensor]:
    """``(M, c)`` of the step ``Y ← c + M Y`` (eq. 6/21): the operator of :func:`_operator` and
    ``c = scale · f``."""
    matrix, scale = _operator(ops, spec, state)
    return matrix, f * scale


def iterates(ops: GraphOps, f: Tensor, spec: PropagationSpec) -> Iterator[Tensor]:
    """Yield ``Y⁽⁰⁾ = f, Y⁽¹⁾, ..., Y⁽ˢ⁾`` (``Z`` for the reference variant)."""
    attention_at = _attention_positions(spec)
    matrix, c = _step_terms(ops, f, spec, None)
    y = f
    yield y
    for k in range(spec.steps):
        if k in attention_at:  # eq. 20: γ from the current embeddings, then eq. 21 steps
            matrix, c = _step_terms(ops, f, spec, y)
        y = matrix.addmm(c, y)
        if spec.prox_relu:
            y = torch.relu(y)
        yield y


def propagate(ops: GraphOps, f: Tensor, spec: PropagationSpec) -> Tensor:
    """``Y⁽ˢ⁾``: ``spec.steps`` propagation steps starting from ``Y⁽⁰⁾ = f``.

    Without the proximal ReLU the steps between two attention layers (eq. 20) share one operator
    ``(M, c)``, so each such run of steps is a single autograd node (:class:`_Steps`): all ``S``
    steps of TWIRLS-base, the two halves of TWIRLS with attention in the middle. With
    ``prox_relu``, step by step (:func:`iterates`).
    """
    if spec.prox_relu or spec.steps == 0:
        return deque(iterates(ops, f, spec), maxlen=1)[0]
    return propagate_from(ops, f, f, 0, spec)


def propagate_from(ops: GraphOps, f: Tensor, y: Tensor, done: int,
                   spec: PropagationSpec) -> Tensor:
    """``Y⁽ˢ⁾`` from ``Y⁽ᵈᵒⁿᵉ⁾ = y`` (``f = Y⁽⁰⁾``): the steps ``done + 1 … S`` of
    :func:`propagate` (without ``prox_relu``); ``done = 0``, ``y = f`` is all of it. When
    ``done`` is an attention position its layer re-weights the graph first."""
    positions = [k for k in sorted(_attention_positions(spec)) if k >= done]
    matrix, c = (None, None) if positions[:1] == [done] else _step_terms(ops, f, spec, None)
    for end in [*positions, spec.steps]:
        if end > done:
            y = _Steps.apply(matrix.values, c, y, matrix, end - done)
        if end < spec.steps:  # eq. 20: γ from the current embeddings, then eq. 21 steps
            matrix, c = _step_terms(ops, f, spec, y)
        done = end
    return y


# ---------------------------------------------------------------------------- row operator
ROW_OPERATOR_MAX_ENTRIES = 1 << 24  # r x n float32 entries: 64 MiB
DENSE_OVER_SPARSE = 4  # flops/s of a dense product over a CSR one here (measured ~5x, below)


def row_operator_pays(ops: GraphOps, spec: PropagationSpec, rows: int) -> bool:
    """Whether :func:`row_operator` applies to ``spec`` and costs less than its ``S`` sparse
    steps for ``rows`` output rows: linear steps (no attention, no ``prox_relu``), ``S ≥ 1``,
    ``r·n`` within :data:`ROW_OPERATOR_MAX_ENTRIES` and below :data:`DENSE_OVER_SPARSE`
    ``· S · nnz(M)`` (a dense ``(r, n)`` product against ``S`` sparse ones of the same width;
    on this project's CPU a dense product runs ~22 GFLOP/s, a CSR one ~4)."""
    if spec.steps == 0 or spec.prox_relu or spec.has_attention:
        return False
    entries = rows * ops.n
    return (entries <= ROW_OPERATOR_MAX_ENTRIES
            and entries <= DENSE_OVER_SPARSE * spec.steps * ops.row.numel())


def row_operator(ops: GraphOps, spec: PropagationSpec, rows: Tensor) -> Tensor:
    """The dense ``(r, n)`` matrix ``Q_R`` with ``propagate(ops, f, spec)[rows] = Q_R f`` for
    every ``f``: the rows ``rows`` of the ``S`` linear steps ``Y ← M Y + scale ⊙ f`` from
    ``Y⁽⁰⁾ = f``, ``Q = Mˢ + Σ_{t<S} Mᵗ diag(scale)``, built as
    ``Qᵀ E_R = (Mᵀ)ˢ E_R + scale ⊙ Σ_{t<S} (Mᵀ)ᵗ E_R`` (``S`` sparse products of width ``r``).

    Only the rows a loss reads: the training forward of TWIRLS-base needs ``Y⁽ˢ⁾`` on the
    training nodes alone, ``Q_R f`` there is one dense product instead of ``S`` sparse ones,
    and its backward ``Q_Rᵀ G`` one more instead of ``S``. The same function; other rounding
    (``~1e-6`` relative in float32). No attention, no ``prox_relu``
    (:func:`row_operator_pays`)."""
    if spec.prox_relu or spec.has_attention:
        raise ValueError("row_operator: the steps must be linear (no attention, no prox_relu)")
    matrix, scale = _operator(ops, spec, None)
    picked = torch.zeros(ops.n, rows.numel(), dtype=ops.dtype, device=ops.device)
    picked[rows, torch.arange(rows.numel(), device=ops.device)] = 1.0
    total = torch.zeros_like(picked)
    for _ in range(spec.steps):
        total += picked
        picked = matrix.t_matmul_no_grad(picked)
    return picked.add_(total.mul_(scale)).t().contiguous()


class _Steps(torch.autograd.Function):
    """``k`` steps ``Y ← c + M Y`` from ``Y⁽⁰⁾`` with one operator ``M``, as one autograd node.

    What ``k`` chained :meth:`SparseMatrix.addmm` nodes compute, without their per-step
    autograd overhead (~15 µs a step each way, most of TWIRLS-base's time on the Planetoid
    graphs): the same kernel forward; backward ``g⁽ʲ⁻¹⁾ = Mᵀ g⁽ʲ⁾`` and
    ``∂c = g⁽ᵏ⁾ + g⁽ᵏ⁻¹⁾ + … + g⁽¹⁾`` in the order autograd's engine accumulates the chained
    nodes' gradients (last step first), so bit for bit theirs. When ``M``'s entries require
    grad (attention weights), ``∂M = Σ_j SDDMM(g⁽ʲ⁾, Y⁽ʲ⁻¹⁾)`` runs as one wide SDDMM
    (:meth:`SparseMatrix.grad_entries_sum`: the same sum, other rounding, unless the ``k``
    steps are narrower than :data:`~twirls.models.graph_ops.SDDMM_MIN_WIDTH` columns in all);
    on a constant diagonal it skips the diagonal and the sum is put back on the pattern once.
    """

    @staticmethod
    def forward(ctx, values: Tensor, c: Tensor, y: Tensor, mat: SparseMatrix,
                steps: int) -> Tensor:  # type: ignore[override]
        ctx.mat, ctx.steps = mat, steps
        ctx.inputs = [] if ctx.needs_input_grad[0] else None  # Y⁽ʲ⁻¹⁾, for ∂M
        for _ in range(steps):
            if ctx.inputs is not None:
                ctx.inputs.append(y)
            y = mat.addmm_no_grad(c, y)
        return y

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        mat: SparseMatrix = ctx.mat
        g = grad.contiguous()
        grad_values = grad_c = None
        grads = []  # g⁽ʲ⁾, last step first, for ∂M
        for _ in range(ctx.steps):
            if ctx.inputs is not None:
                grads.append(g)
            grad_c = g if grad_c is None else grad_c + g
            g = mat.t_matmul_no_grad(g)
        if ctx.inputs is not None:
            grad_values = mat.full_grad(mat.grad_entries_sum(grads[::-1], ctx.inputs))
        return grad_values, grad_c, g, None, None


class Propagation(nn.Module):
    """The parameter-free propagation block of TWIRLS (``S`` steps of eq. 6/21, attention eq. 20).

    Shapes: ``f`` is ``(n, d)``, output ``(n, d)``.
    """

    def __init__(self, spec: PropagationSpec) -> None:
        super().__init__()
        self.spec = spec

    def forward(self, ops: GraphOps, f: Tensor) -> Tensor:
        return propagate(ops, f, self.spec)

    def extra_repr(self) -> str:
        s = self.spec
        text = (f"steps={s.steps}, lam={s.lam}, alpha={s.alpha}, variant={s.variant!r}, "
                f"normalized={s.normalized}, prox_relu={s.prox_relu}")
        if s.attention is not None:
            r = s.attention.rho
            text += (f", attention=(p={r.p}, tau={r.tau}, T={r.T}, "
                     f"placement={s.attention.placement!r})")
        return text
