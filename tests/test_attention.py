"""IRLS attention (eq. 20) with the truncated ℓp penalty of the appendix."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from twirls.models.attention import (
    AttentionSpec,
    TruncatedLp,
    cosine_rho,
    cosine_score,
)

from requires import needs

DT = torch.float64  # every tensor below is float64


def reference_weights(z2: torch.Tensor, p: float, tau: float, T: float) -> torch.Tensor:
    """The authors' weights (DGL's TWIRLSConv ``Attention.reweighting``) for distances ``z2``.

    It computes ``relu(w) + 1e-7`` of the distances it is given, so we pass ``z2 - 1e-7``."""
    import dgl
    from dgl.nn.pytorch.conv.twirlsconv import Attention as ReferenceAttention

    n = z2.numel()
    g = dgl.graph((torch.arange(n), torch.arange(n)), num_nodes=n)
    g.edata["w"] = z2 - 1e-7
    ReferenceAttention(tau, -1 if math.isinf(T) else T, p).reweighting(g)
    return g.edata["w"] - 1e-9  # it adds 1e-9 to every weight


@pytest.mark.parametrize("p,tau,T", [
    (0.1, 0.2, 2.0),       # ATK-Cora / ATK-Citeseer
    (1.0, 0.1, math.inf),  # Wisconsin, Actor
    (0.0, 0.001, math.inf),  # Cornell
    (0.0, 10.0, math.inf),  # Texas
    (1.5, 0.5, 0.5),       # T = tau: pure truncation
    (0.5, 0.3, 4.0),
])
@needs("dgl", "oracle: the attention of dgl.nn.TWIRLSConv, the authors' code")
def test_score_equals_reference_code_on_same_distances(p, tau, T):
    """Our reading of τ, T (thresholds on z^(2-p), i.e. τ̄ = τ^(1/(2-p))) is the authors' code."""
    rho = TruncatedLp(p, tau, T)
    lo = math.log10(rho.tau_bar**2) - 2
    hi = math.log10(max(rho.tau_bar, min(rho.T_bar, 1e3)) ** 2) + 2
    z2 = torch.logspace(lo, hi, 500, dtype=DT)
    if not math.isinf(T):  # keep off the jump at z^(2-p) = T
        z2 = z2[(z2.pow(1 - p / 2) - T).abs() > 1e-6 * T]
    ours = rho.score(z2)
    theirs = reference_weights(z2, p, tau, T)
    assert torch.allclose(ours, theirs, rtol=1e-9, atol=1e-12)
    # the grid covers every regime: constant 1/tau, z^(p-2) in between (unless T = tau), 0
    assert (ours == 1 / tau).any()
    assert ((ours > 0) & (ours < 1 / tau)).any() == (T > tau)
    assert (ours == 0).any() == (not math.isinf(T))


@pytest.mark.parametrize("p", [0.0, 0.1, 1.0, 1.5])
@pytest.mark.parametrize("tau,T", [(0.2, 2.0), (0.05, math.inf), (3.0, 30.0)])
def test_score_follows_appendix_formula_at_and_around_thresholds(p, tau, T):
    rho = TruncatedLp(p, tau, T)
    tau_bar, t_bar = tau ** (1 / (2 - p)), T ** (1 / (2 - p))
    assert rho.tau_bar == pytest.approx(tau_bar) and rho.T_bar == pytest.approx(t_bar)
    eps = 1e-6
    z = torch.tensor([0.0, tau_bar * 0.5, tau_bar * (1 - eps), tau_bar * (1 + eps),
                      tau_bar * 1.7], dtype=DT)
    s = rho.score(z * z)
    # z < τ̄: constant τ̄^(p-2) = 1/τ (a quadratic penalty: TWIRLS-base behaviour)
    assert s[:3].tolist() == pytest.approx([tau_bar ** (p - 2)] * 3, rel=1e-12)
    assert s[:3].tolist() == pytest.approx([1 / tau] * 3, rel=1e-12)
    # τ̄ ≤ z ≤ T̄: z^(p-2), continuous at τ̄ and decreasing
    for zi, si in zip(z[3:].tolist(), s[3:].tolist(), strict=True):
        if zi <= t_bar:
            assert si == pytest.approx(zi ** (p - 2), rel=1e-12)
    if p > 0:
        assert s[3] < 1 / tau and s[3] == pytest.approx(1 / tau, rel=1e-5)
    if math.isinf(T):
        assert rho.score(torch.tensor([1e12], dtype=DT)).item() > 0  # T = inf: never truncated
    else:
        below, above = rho.score(torch.tensor([(t_bar * (1 - eps)) ** 2,
                                               (t_bar * (1 + eps)) ** 2], dtype=DT))
        assert below.item() == pytest.approx(t_bar ** (p - 2), rel=1e-5)
        assert above.item() == 0.0  # z > T̄: edge removed


def test_p2_is_no_attention_and_T_equal_tau_is_pure_truncation():
    z2 = torch.logspace(-4, 3, 50, dtype=DT)
    assert torch.equal(TruncatedLp(2.0, 0.3).score(z2), torch.ones_like(z2))
    s = TruncatedLp(0.5, 0.4, 0.4).score(z2)
    assert set(s.unique().tolist()) == {0.0, 1 / 0.4}
    with pytest.raises(ValueError, match="p = 2 means no attention"):
        TruncatedLp(2.0, 0.3, 5.0)
    with pytest.raises(ValueError, match="T must be >= tau"):
        TruncatedLp(1.0, 0.3, 0.1)


@settings(max_examples=60, deadline=None)
@given(p=st.floats(0.0, 1.9), tau=st.floats(0.01, 10.0), ratio=st.floats(1.0, 50.0),
       truncate=st.booleans())
def test_rho_is_concave_nondecreasing_with_score_as_derivative(p, tau, ratio, truncate):
    rho = TruncatedLp(p, tau, tau * ratio if truncate else math.inf)
    tb2, tt2 = rho.tau_bar**2, rho.T_bar**2
    z2 = torch.cat([torch.linspace(0, 3 * tb2, 100, dtype=DT),
                    torch.logspace(math.log10(tb2) + 0.01, math.log10(tb2) + 3, 100, dtype=DT)])
    # away from the kinks at τ̄² and T̄², dρ/dz² (autograd) equals the score
    away = (z2 - tb2).abs() > 1e-6 * tb2
    if truncate:
        away &= (z2 - tt2).abs() > 1e-6 * tt2
    z2 = z2[away].clone().requires_grad_(True)
    values = rho.rho(z2)
    (grad,) = torch.autograd.grad(values.sum(), z2)
    s = rho.score(z2.detach())
    assert torch.allclose(grad, s, rtol=1e-9, atol=1e-12)
    # concave and non-decreasing: the score is >= 0 and non-increasing in z²
    order = torch.argsort(z2.detach())
    s_sorted, v_sorted = s[order], values.detach()[order]
    assert (s_sorted >= 0).all() and (s_sorted[1:] <= s_sorted[:-1] * (1 + 1e-12)).all()
    assert (v_sorted[1:] >= v_sorted[:-1] - 1e-12 * v_sorted.abs().max()).all()
    # continuous at τ̄ (the ρ₀ constant) and flat beyond T̄
    at = rho.rho(torch.tensor([tb2 * (1 - 1e-9), tb2 * (1 + 1e-9)], dtype=DT))
    assert at[0].item() == pytest.approx(at[1].item(), rel=1e-6)
    assert at[0].item() == pytest.approx(rho.tau_bar**p, rel=1e-6)  # = τ̄^p at z = τ̄
    if truncate:
        far = rho.rho(torch.tensor([tt2, 4 * tt2, 100 * tt2], dtype=DT))
        assert torch.allclose(far, far[0].expand(3), rtol=1e-12)


def test_cosine_attention_penalty():
    z2 = torch.linspace(0, 4, 41, dtype=DT, requires_grad=True)
    (grad,) = torch.autograd.grad(cosine_rho(z2).sum(), z2)
    assert torch.allclose(grad, cosine_score(z2.detach()))
    # for unit vectors the score is (cos + 1) / 2 (paper Sec. 3.4)
    y = torch.nn.functional.normalize(torch.randn(2, 30, 5, dtype=DT, generator=torch.Generator()
                                                  .manual_seed(0)), dim=-1)
    cos = (y[0] * y[1]).sum(-1)
    z2u = (y[0] - y[1]).pow(2).sum(-1)
    assert torch.allclose(cosine_score(z2u), (cos + 1) / 2)
    values = cosine_rho(z2.detach())
    assert (values[1:] >= values[:-1]).all()  # non-decreasing on [0, 4]


def test_attention_spec_from_config_and_placement():
    spec = AttentionSpec.from_config({"p": 0.1, "tau": 0.2, "T": 2})
    assert spec is not None and spec.rho == TruncatedLp(0.1, 0.2, 2.0)
    assert spec.positions(16) == {8} and spec.positions(1) == frozenset()
    for t in (None, "inf", float("inf")):
        s = AttentionSpec.from_config({"p": 1, "tau": 0.1, "T": t, "placement": "before+middle"})
        assert s is not None and math.isinf(s.rho.T) and s.positions(4) == {0, 2}
    every = AttentionSpec.from_config({"placement": "every"})
    assert every is not None and every.positions(5) == {0, 1, 2, 3, 4}
    assert AttentionSpec.from_config(None) is None
    with pytest.raises(ValueError, match="unknown key 'tua'.*Did you mean 'tau'"):
        AttentionSpec.from_config({"tua": 0.2})
    with pytest.raises(ValueError, match="placement must be one of"):
        AttentionSpec.from_config({"placement": "end"})
    with pytest.raises(ValueError, match="T <= 0 means inf"):
        AttentionSpec.from_config({"T": -1})


@pytest.mark.parametrize("p", [5e-324, 1e-300, 1e-12])
def test_rho_for_tiny_p_is_the_p0_limit_without_cancellation(p):
    """(2/p)(z^p - τ̄^p) cancels (or overflows) for tiny p; ρ must approach the p = 0 branch."""
    z2 = torch.tensor([0.5, 1.5, 3.0, 100.0], dtype=DT)
    tiny, zero = TruncatedLp(p, 1.0, math.inf), TruncatedLp(0.0, 1.0, math.inf)
    assert torch.allclose(tiny.rho(z2), zero.rho(z2), rtol=1e-10)
    assert torch.isfinite(tiny.rho(z2)).all()
