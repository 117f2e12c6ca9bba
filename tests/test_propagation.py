"""TWIRLS propagation (eqs. 2, 6, 10, 20-22 and the appendix variants) against closed forms."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from twirls.data.graph import undirected_graph
from twirls.models import graph_ops
from twirls.models.attention import AttentionSpec, TruncatedLp
from twirls.models.energy import (
    closed_form,
    energy,
    energy_trace,
    lemma33_alpha_bound,
    robust_energy,
)
from twirls.models.graph_ops import GraphOps, SparseMatrix
from twirls.models.propagation import (
    PropagationSpec,
    _Steps,
    iterates,
    paper_operator,
    propagate,
)

from requires import needs

DT = torch.float64


def random_ops(seed: int, n: int, m: int) -> GraphOps:
    gen = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, n, (m,), generator=gen), torch.randint(0, n, (m,), generator=gen)
    return GraphOps.from_graph(undirected_graph(src, dst, n), dtype=DT)


def random_f(seed: int, n: int, d: int = 3) -> torch.Tensor:
    return torch.randn(n, d, dtype=DT, generator=torch.Generator().manual_seed(seed + 1))


graphs = st.tuples(st.integers(0, 10_000), st.integers(2, 18), st.integers(0, 45))


def steps_to_converge(matrix: torch.Tensor, tol: float = 1e-7) -> int:
    radius = float(torch.linalg.eigvals(matrix).abs().max())
    return 10 if radius < 1e-12 else int(math.log(tol) / math.log(radius)) + 10


# ------------------------------------------------------------------ eq. 2 (closed form)
@settings(max_examples=20, deadline=None)
@given(graph=graphs, lam=st.floats(0.1, 2.0), alpha=st.floats(0.1, 0.3))
def test_paper_steps_reach_closed_form(graph, lam, alpha):
    """Small α, many steps of eq. 6 → (I + λL)⁻¹ f (eq. 2), to 1e-4 relative."""
    ops, f = random_ops(*graph), random_f(graph[0], graph[1])
    matrix, _ = paper_operator(ops, lam, alpha, normalized=False)
    steps = steps_to_converge(matrix.to_dense())
    assert steps < 20_000
    y = propagate(ops, f, PropagationSpec(steps, lam, alpha))
    target = closed_form(ops, f, lam)
    assert torch.linalg.norm(y - target) <= 1e-4 * torch.linalg.norm(target)


@settings(max_examples=20, deadline=None)
@given(graph=graphs, lam=st.floats(0.1, 3.0), alpha=st.floats(0.05, 0.3))
def test_normalized_steps_reach_normalized_closed_form(graph, lam, alpha):
    """Appendix "Normalized Laplacian Unfolding": the fixed point is (I + λL̃)⁻¹ f."""
    ops, f = random_ops(*graph), random_f(graph[0], graph[1])
    alpha = min(alpha, 1.9 / (1 + 2 * lam))
    matrix, _ = paper_operator(ops, lam, alpha, normalized=True)
    spec = PropagationSpec(steps_to_converge(matrix.to_dense()), lam, alpha, normalized=True)
    y = propagate(ops, f, spec)
    target = closed_form(ops, f, lam, normalized=True)
    assert torch.linalg.norm(y - target) <= 1e-4 * torch.linalg.norm(target)


def test_reference_variant_fixed_point_and_growth_at_lambda_one():
    """The authors' code (self-loops kept) solves (I - λP) Z = D̂⁻¹ f, P = D̂^-1/2 Ã D̂^-1/2:
    a different system than eq. 2, with no solution at λ = 1 (its iterates grow linearly)."""
    ops, f = random_ops(3, 15, 40), random_f(3, 15)
    lam, alpha = 0.6, 0.5
    deg = ops.deg + 1
    d_hat = lam * deg + (1 - lam)
    adj = torch.zeros(ops.n, ops.n, dtype=DT)
    adj[ops.row, ops.col] = 1.0
    p_mat = adj / (d_hat[:, None] * d_hat[None, :]).sqrt()
    target = torch.linalg.solve(torch.eye(ops.n, dtype=DT) - lam * p_mat, f / d_hat[:, None])
    z = propagate(ops, f, PropagationSpec(400, lam, alpha, variant="reference"))
    assert torch.allclose(z, target, rtol=1e-8, atol=1e-10)
    # λ = α = 1: every step adds about the same amount along D̂^1/2 1 (per connected piece)
    norms = [float(torch.linalg.norm(z)) for z in
             iterates(ops, f.abs(), PropagationSpec(400, 1.0, 1.0, variant="reference"))]
    assert norms[400] > 1.8 * norms[200] > 3.0 * norms[100]
    paper = [float(torch.linalg.norm(y)) for y in
             iterates(ops, f.abs(), PropagationSpec(400, 1.0, 1.0))]
    assert paper[400] == pytest.approx(paper[200], rel=1e-6)  # eq. 6 converges


# ------------------------------------------------------------------ eq. 6 vs dense formula
@settings(max_examples=20, deadline=None)
@given(graph=graphs, lam=st.floats(0.01, 5.0), alpha=st.floats(0.05, 1.0),
       weighted=st.booleans(), prox=st.booleans())
def test_paper_step_matches_dense_equations(graph, lam, alpha, weighted, prox):
    """One step = (1-α)Y + α D̃⁻¹(λ A_γ Y + f) (eqs. 6/21), ReLU'd for eq. 10."""
    ops, f = random_ops(*graph), random_f(graph[0], graph[1])
    y = random_f(graph[0] + 7, graph[1])
    gen = torch.Generator().manual_seed(graph[0])
    gamma = None
    if weighted:  # a symmetric weight per undirected edge
        w_node = torch.rand(ops.n, ops.n, dtype=DT, generator=gen)
        w_node = w_node + w_node.T
        gamma = w_node[ops.dst, ops.src]
    a = torch.zeros(ops.n, ops.n, dtype=DT)
    a[ops.dst, ops.src] = 1.0 if gamma is None else gamma
    d_tilde = lam * a.sum(1) + 1
    expected = (1 - alpha) * y + alpha * (lam * a @ y + f) / d_tilde[:, None]
    if prox:
        expected = expected.relu()
    matrix, scale = paper_operator(ops, lam, alpha, False, gamma)
    out = matrix.addmm(f * scale, y)
    out = out.relu() if prox else out
    assert torch.allclose(out, expected, rtol=1e-12, atol=1e-12)


def first_step_reparameterized():
    """α = λ = 1, Y⁽⁰⁾ = f on a random graph: ``(g, ops, D̃^1/2 Y⁽¹⁾, Z⁽⁰⁾ = D̃^1/2 f)``."""
    gen = torch.Generator().manual_seed(0)
    g = undirected_graph(torch.randint(0, 30, (70,), generator=gen),
                         torch.randint(0, 30, (70,), generator=gen), 30)
    ops = GraphOps.from_graph(g, dtype=DT)
    f = random_f(0, 30, 5)
    y1 = propagate(ops, f, PropagationSpec(1, 1.0, 1.0))
    root = (ops.deg + 1).sqrt()[:, None]  # D̃ = λD + I = D + I at λ = 1
    return g, ops, root * y1, root * f


def test_first_step_is_gcn_layer_under_reparameterization():
    """α = λ = 1, Y⁽⁰⁾ = f: D̃^1/2 Y⁽¹⁾ = D̃^-1/2 Ã D̃^-1/2 Z⁽⁰⁾ with Z⁽⁰⁾ = D̃^1/2 f
    (appendix "Alternative GCN-like Reparameterization")."""
    _, ops, root_y1, z0 = first_step_reparameterized()
    assert torch.allclose(root_y1, ops.gcn_norm() @ z0, rtol=1e-12, atol=1e-12)


@needs("dgl", "oracle: dgl.nn.GraphConv")
def test_first_step_is_dgl_graphconv_under_reparameterization():
    """The same identity, checked against DGL's GraphConv."""
    import dgl
    from dgl.nn import GraphConv

    g, _, root_y1, z0 = first_step_reparameterized()
    gcn = GraphConv(5, 5, norm="both", weight=False, bias=False).double()
    expected = gcn(dgl.add_self_loop(g.to_dgl()), z0)
    assert torch.allclose(root_y1, expected, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ energy descent (Lemma 3.3)
@settings(max_examples=20, deadline=None)
@given(graph=graphs, lam=st.floats(0.01, 5.0), alpha=st.floats(0.01, 1.0), prox=st.booleans())
def test_base_steps_never_increase_energy(graph, lam, alpha, prox):
    """Eq. 6 with any α ≤ 1 descends eq. 1 (eq. 10: eq. 1 + the indicator of Y ≥ 0)."""
    ops, f = random_ops(*graph), random_f(graph[0], graph[1])
    spec = PropagationSpec(15, lam, alpha, prox_relu=prox)
    values = energy_trace(ops, f, spec)[1 if prox else 0:]  # Y⁽⁰⁾ = f may be < 0
    for before, after in zip(values[:-1], values[1:], strict=True):
        assert after <= before * (1 + 1e-12) + 1e-12


attention_params = st.tuples(st.sampled_from([0.0, 0.1, 0.5, 1.0, 1.5]), st.floats(0.05, 2.0),
                             st.one_of(st.just(math.inf), st.floats(1.0, 20.0)))


@settings(max_examples=40, deadline=None)
@given(graph=graphs, lam=st.floats(0.05, 3.0), attn=attention_params,
       shrink=st.floats(0.1, 1.0), scale=st.floats(0.1, 5.0))
def test_irls_never_increases_robust_energy_within_lemma_bound(graph, lam, attn, shrink, scale):
    """Lemma 3.3: γ from eq. 20, Y from eq. 21, α ≤ ||λBᵀΓB + I||⁻¹ ⇒ eq. 12 never increases."""
    p, tau, t_factor = attn
    rho = TruncatedLp(p, tau, tau * t_factor)
    ops, f = random_ops(*graph), scale * random_f(graph[0], graph[1])
    # γ ≤ 1/τ, so this α satisfies the lemma's bound for every iteration's Γ
    alpha = shrink * lemma33_alpha_bound(ops, lam, torch.full((ops.num_edges,), 1 / tau,
                                                                dtype=DT))
    spec = PropagationSpec(12, lam, alpha, attention=AttentionSpec(rho, "every"))
    values = energy_trace(ops, f, spec, rho.rho)
    for before, after in zip(values[:-1], values[1:], strict=True):
        assert after <= before + 1e-10 * abs(before) + 1e-12


@settings(max_examples=25, deadline=None)
@given(graph=graphs, lam=st.floats(0.05, 3.0), attn=attention_params, scale=st.floats(0.1, 5.0))
def test_irls_with_jacobi_preconditioning_descends_for_alpha_one(graph, lam, attn, scale):
    """Stronger than Lemma 3.3 as stated: with the Jacobi preconditioner D̃⁻¹ every α ≤ 1
    descends (D̃^-1/2 (I + λL_Γ) D̃^-1/2 has eigenvalues in (0, 2)); the paper uses α = 1."""
    p, tau, t_factor = attn
    rho = TruncatedLp(p, tau, tau * t_factor)
    ops, f = random_ops(*graph), scale * random_f(graph[0], graph[1])
    spec = PropagationSpec(12, lam, 1.0, attention=AttentionSpec(rho, "every"))
    values = energy_trace(ops, f, spec, rho.rho)
    for before, after in zip(values[:-1], values[1:], strict=True):
        assert after <= before + 1e-10 * abs(before) + 1e-12


def test_energies_agree_with_dense_formulas():
    ops, f = random_ops(5, 12, 30), random_f(5, 12)
    y = random_f(9, 12)
    lap = ops.laplacian_dense()
    dense = ((y - f) ** 2).sum() + 0.7 * torch.trace(y.T @ lap @ y)
    assert energy(ops, y, f, 0.7).item() == pytest.approx(dense.item(), rel=1e-12)
    # ρ(z²) = z² turns eq. 12 into eq. 1
    assert robust_energy(ops, y, f, 0.7, lambda z2: z2).item() == pytest.approx(dense.item())
    # the closed form is the minimiser: zero gradient of eq. 1
    y_star = closed_form(ops, f, 0.7).requires_grad_(True)
    (grad,) = torch.autograd.grad(energy(ops, y_star, f, 0.7), y_star)
    assert grad.abs().max() < 1e-10
    # Lemma 3.3's bound, dense vs power iteration
    exact = 1 / (1 + 0.7 * float(torch.linalg.eigvalsh(lap)[-1]))
    assert lemma33_alpha_bound(ops, 0.7) == pytest.approx(exact, rel=1e-12)
    assert lemma33_alpha_bound(ops, 0.7, method="power") == pytest.approx(exact, rel=1e-3)


def test_spec_rejects_bad_values():
    with pytest.raises(ValueError, match="lam must be > 0"):
        PropagationSpec(2, 0.0, 1.0)
    with pytest.raises(ValueError, match="variant must be one of"):
        PropagationSpec(2, 1.0, 1.0, variant="dgl")
    with pytest.raises(ValueError, match="steps must be an integer"):
        PropagationSpec(-1, 1.0, 1.0)


def test_graph_ops_checks_its_input_and_builds_the_gcn_matrix():
    ok = GraphOps(torch.tensor([0, 1, 1, 2]), torch.tensor([1, 0, 2, 1]), 4, dtype=DT)
    assert ok.num_edges == 4 and ok.deg.tolist() == [1.0, 2.0, 1.0, 0.0]
    a_tilde = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 1]], dtype=DT)
    d = a_tilde.sum(1).rsqrt()
    assert torch.allclose(ok.gcn_norm().to_dense(), d[:, None] * a_tilde * d[None, :])
    with pytest.raises(ValueError, match="not symmetric"):
        GraphOps(torch.tensor([0]), torch.tensor([1]), 2)
    with pytest.raises(ValueError, match="duplicate edges"):
        GraphOps(torch.tensor([0, 0, 1, 1]), torch.tensor([1, 1, 0, 0]), 2)
    with pytest.raises(ValueError, match="self-loops"):
        GraphOps(torch.tensor([0, 1]), torch.tensor([0, 1]), 2)
    with pytest.raises(ValueError, match=r"must lie in \[0, 2\)"):
        GraphOps(torch.tensor([0, 2]), torch.tensor([2, 0]), 2)


ATTENTION = {"p": 0.1, "tau": 0.2, "T": 2.0}


@pytest.mark.parametrize("variant", ["paper", "reference"])
@pytest.mark.parametrize("steps", [1, 2, 7])
@pytest.mark.parametrize("placement", [None, "middle", "every", "before+middle"])
@pytest.mark.parametrize("normalized", [False, True])
def test_steps_nodes_equal_the_step_by_step_chain_bit_for_bit(variant, steps, placement,
                                                             normalized, monkeypatch):
    # the steps between attention layers run as one autograd node each (propagation._Steps):
    # all S steps of TWIRLS-base, the halves around a middle attention layer. The output and
    # the gradients sent back (to f through c = scale * f and Y0 = f, and through the attention
    # weights to the embeddings they are computed from) must be exactly those of S chained
    # SparseMatrix.addmm nodes, in float32 where rounding order shows, with the attention
    # weights' gradient summed step by step; with it as one wide SDDMM (the default from
    # SDDMM_MIN_WIDTH columns: here 4 a step) the same to float32 rounding
    if normalized and variant == "reference":
        pytest.skip("the reference variant has no normalized form")
    gen = torch.Generator().manual_seed(3)
    n = 40
    src, dst = (torch.randint(0, n, (120,), generator=gen) for _ in range(2))
    ops = GraphOps.from_graph(undirected_graph(src, dst, n))
    attention = None if placement is None else \
        AttentionSpec.from_config({**ATTENTION, "placement": placement})
    spec = PropagationSpec(steps=steps, lam=1.0, alpha=0.7, variant=variant,
                           normalized=normalized, attention=attention)
    w = torch.randn(5, 4, generator=gen)
    x = torch.randn(n, 5, generator=gen)
    weight = torch.randn(n, 4, generator=gen)

    def gradients() -> list[tuple[torch.Tensor, torch.Tensor]]:
        results = []
        for run in (lambda f: propagate(ops, f, spec),
                    lambda f: list(iterates(ops, f, spec))[-1]):
            w_ = w.clone().requires_grad_(True)
            y = run(x @ w_)
            (y * weight).sum().backward()
            results.append((y.detach(), w_.grad))
        return results

    (wide, wide_grad), _ = gradients()
    monkeypatch.setattr(graph_ops, "SDDMM_MIN_WIDTH", 10**9)  # every SDDMM step by step
    (fused, fused_grad), (chain, chain_grad) = gradients()
    with torch.no_grad():
        assert torch.equal(propagate(ops, x @ w, spec), chain)
    assert propagate(ops, x, spec).grad_fn is None  # nothing requires grad: no graph
    assert torch.equal(fused, chain) and torch.equal(fused_grad, chain_grad)
    assert not torch.equal(chain_grad, torch.zeros_like(chain_grad))
    assert torch.equal(wide, chain)
    assert torch.allclose(wide_grad, chain_grad, rtol=1e-5, atol=1e-5)
    if placement is None:  # no attention: no SDDMM at all
        assert torch.equal(wide_grad, chain_grad)


@pytest.mark.parametrize("constant_diagonal", [True, False])
@pytest.mark.parametrize(("steps", "width"), [(1, 4), (3, 5), (4, 4), (20, 7), (1, 64), (3, 40)])
def test_grad_entries_sum_is_the_sum_of_each_steps_sddmm(constant_diagonal, steps, width):
    # SparseMatrix.grad_entries_sum: the entries' gradient of k products M y_j as one SDDMM of
    # the k pairs side by side (groups of at most SDDMM_GROUP_WIDTH columns: 20 x 7 is three,
    # 3 x 40 three of one step), on A's edges alone or on every entry of the pattern. It must
    # be the sum of the k SDDMMs (exact in float64) to float32 rounding, bit for bit that sum
    # below SDDMM_MIN_WIDTH columns, and the same bits when rerun
    ops = random_ops(8, 70, 260)
    gen = torch.Generator().manual_seed(9)
    mat = ops.matrix(torch.rand(ops.num_edges, dtype=DT, generator=gen), 0.3)
    mat.constant_diagonal = constant_diagonal
    grads = [torch.randn(ops.n, width, generator=gen) for _ in range(steps)]
    ys = [torch.randn(ops.n, width, generator=gen) for _ in range(steps)]
    got = mat.grad_entries_sum(grads, ys)
    assert got.shape == (ops.num_edges if constant_diagonal else ops.row.numel(),)
    exact = sum(mat.grad_entries(g.double(), y.double()) for g, y in zip(grads, ys, strict=True))
    assert torch.allclose(got.double(), exact, rtol=1e-5, atol=1e-5)
    assert not torch.equal(exact, torch.zeros_like(exact))
    if steps * width < graph_ops.SDDMM_MIN_WIDTH:
        step_by_step = None
        for g, y in zip(reversed(grads), reversed(ys), strict=True):
            part = mat.grad_entries(g, y)
            step_by_step = part if step_by_step is None else step_by_step + part
        assert torch.equal(got, step_by_step)
    assert torch.equal(got, mat.grad_entries_sum(grads, ys))


def test_sddmm_on_a_constant_diagonal_skips_it_with_the_same_gradients():
    # ops.matrix with a number (or a tensor without grad) on the diagonal computes the entries'
    # gradient on A's edges alone (SparseMatrix.grad_entries): the edges' gradients must be
    # those of the SDDMM over the whole pattern, bit for bit; with a diagonal that requires grad
    # every entry is computed
    ops = random_ops(5, 60, 200)
    gen = torch.Generator().manual_seed(6)
    x, weight = torch.randn(60, 4, generator=gen), torch.randn(60, 4, generator=gen)
    off0 = torch.rand(ops.num_edges, generator=gen)
    diag0 = torch.rand(ops.n, generator=gen)
    grads = []
    for constant in (True, False):
        off = off0.clone().requires_grad_(True)
        for steps in (1, 3):  # one step (_SpMM) and a run of steps (_Steps)
            mat = ops.matrix(off, 0.3)
            assert mat.constant_diagonal
            mat.constant_diagonal = constant  # False: the SDDMM over every entry, as before
            out = mat @ x if steps == 1 else _Steps.apply(mat.values, x, x, mat, steps)
            (out * weight).sum().backward()
            grads.append(off.grad.clone())
            off.grad = None
    assert torch.equal(grads[0], grads[2]) and torch.equal(grads[1], grads[3])
    assert not torch.equal(grads[0], torch.zeros_like(grads[0]))
    # the pattern's gradient: 0 on the diagonal, the full SDDMM's on the edges
    mat = ops.matrix(off0, 0.3)
    g = torch.randn(60, 4, generator=gen)
    full = SparseMatrix(ops, mat.values)
    skipped, whole = mat.grad_values(g, x), full.grad_values(g, x)
    assert torch.equal(skipped[~ops.is_loop], whole[~ops.is_loop])
    assert torch.equal(skipped[ops.is_loop], torch.zeros(ops.n))
    assert not torch.equal(whole[ops.is_loop], torch.zeros(ops.n))
    # a diagonal that requires grad: every entry's gradient
    diag = diag0.clone().requires_grad_(True)
    assert not ops.matrix(off0, diag).constant_diagonal
    assert ops.matrix(off0, diag0).constant_diagonal


def test_sddmm_benchmark_times_both_paths_of_the_same_sum():
    # python -m twirls.bench.sddmm: step by step and wide (at any width, forced past
    # SDDMM_MIN_WIDTH) compute the same entries' gradient; one record of the steps after the
    # attention layer, then one of each width
    from twirls.bench.sddmm import WIDTHS, bench_graph, step_by_step, wide

    gen = torch.Generator().manual_seed(12)
    src, dst = (torch.randint(0, 50, (150,), generator=gen) for _ in range(2))
    ops = GraphOps.from_graph(undirected_graph(src, dst, 50))
    mat = ops.matrix(torch.rand(ops.num_edges, generator=gen), 0.5)
    grads = [torch.randn(50, 7, generator=gen) for _ in range(3)]
    ys = [torch.randn(50, 7, generator=gen) for _ in range(3)]
    limits = graph_ops.SDDMM_MIN_WIDTH, graph_ops.SDDMM_GROUP_WIDTH
    for group in (7, 14, 21):
        assert torch.allclose(wide(mat, grads, ys, group), step_by_step(mat, grads, ys),
                              rtol=1e-5, atol=1e-5)
    assert (graph_ops.SDDMM_MIN_WIDTH, graph_ops.SDDMM_GROUP_WIDTH) == limits  # patches undone
    records = bench_graph(ops, 3, 7, 1, gen)
    assert [r["kind"] for r in records] == ["steps"] + ["width"] * len(WIDTHS)
    assert [r["width"] for r in records[1:]] == list(WIDTHS)
    assert all(r["step_by_step_ms"] > 0 and r["wide_ms"] > 0 and r["edges"] == ops.num_edges
               for r in records)
