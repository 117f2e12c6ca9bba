"""The TWIRLS model: the reference variant equals dgl.nn.TWIRLSConv, TWIRLS* caching, config."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pytest
import torch

from twirls.data.graph import undirected_graph
from twirls.models import TWIRLS, GraphOps, build_model
from twirls.models.attention import TruncatedLp
from twirls.models.propagation import PropagationSpec, propagate
from twirls.models.twirls import TWIRLSConfig

from requires import needs

if TYPE_CHECKING:
    from dgl.nn import TWIRLSConv


def random_graph(seed: int, n: int = 40, m: int = 110):
    gen = torch.Generator().manual_seed(seed)
    return undirected_graph(torch.randint(0, n, (m,), generator=gen),
                            torch.randint(0, n, (m,), generator=gen), n)


def copy_reference_weights(model: TWIRLS, conv: TWIRLSConv) -> None:
    for ours, theirs in ((model.mlp_before, conv.mlp_bef), (model.mlp_after, conv.mlp_aft)):
        assert len(ours.lins) == len(theirs.layers)
        for a, b in zip(ours.lins, theirs.layers, strict=True):
            a.load_state_dict(b.state_dict())


CASES = [
    # K, L, steps, lam, alpha, precond, attention (p, tau, T or -1), attn_bef
    (1, 0, 4, 1.0, 1.0, True, None, False),      # Cora-like TWIRLS-base
    (2, 0, 5, 0.7, 0.5, True, None, False),
    (0, 3, 7, 20.0, 0.05, False, None, False),   # ogbn-arxiv TWIRLS* (normalized)
    (1, 1, 3, 1.0, 1.0, True, None, False),      # MLP on both sides (init_activate)
    (1, 0, 8, 1.0, 1.0, True, (0.1, 0.2, 2.0), False),   # ATK-Cora attention, truncation
    (2, 0, 6, 0.5, 1.0, True, (0.0, 0.5, -1), True),     # heterophily: attention before too
    (1, 0, 4, 1.0, 0.3, False, (1.0, 0.1, -1), True),    # normalized + attention
    (0, 2, 4, 1.0, 1.0, True, (1.0, 0.2, 3.0), False),   # K = 0 with attention
]


@pytest.mark.parametrize("case", CASES)
@needs("dgl", "oracle: dgl.nn.TWIRLSConv, the authors' layer")
def test_reference_variant_equals_dgl_twirlsconv(case):
    from dgl.nn import TWIRLSConv

    k, l_, steps, lam, alpha, precond, attn, before = case
    g = random_graph(steps)
    x = 3 * torch.randn(g.num_nodes(), 10, generator=torch.Generator().manual_seed(1))
    p, tau, t_ = attn or (1.0, 0.2, -1)
    torch.manual_seed(0)
    conv = TWIRLSConv(10, 3, 16, steps, num_mlp_before=k, num_mlp_after=l_, precond=precond,
                      alp=alpha, lam=lam, attention=attn is not None, tau=tau, T=t_, p=p,
                      attn_bef=before).eval()
    cfg = {"steps": steps, "lam": lam, "alpha": alpha, "mlp_before": k, "mlp_after": l_,
           "hidden": 16, "variant": "reference", "normalized": not precond, "attention": None}
    if attn is not None:
        cfg["attention"] = {"p": p, "tau": tau, "T": None if t_ < 0 else t_,
                            "placement": "before+middle" if before else "middle"}
    model = TWIRLS.from_config(cfg, 10, 3).eval()
    copy_reference_weights(model, conv)
    ops = GraphOps.from_graph(g)
    with torch.no_grad():
        expected, out = conv(g.to_dgl(), x), model(ops, x)
    assert torch.allclose(out, expected, rtol=1e-5, atol=1e-5 * float(expected.abs().max()))
    if attn is not None:  # the attention really changed the result
        cfg["attention"] = None
        base = TWIRLS.from_config(cfg, 10, 3).eval()
        base.load_state_dict(model.state_dict())
        with torch.no_grad():
            assert not torch.allclose(base(ops, x), out, rtol=1e-3)


def test_truncation_is_active_in_the_attention_cases():
    """Guard for the comparison above: in the ATK-like case (p=0.1, tau=0.2, T=2, 8 steps) the
    middle attention layer does cut edges (weight 0) and keeps others."""
    g = random_graph(8)
    x = 3 * torch.randn(g.num_nodes(), 10, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    model = TWIRLS.from_config({"steps": 8, "lam": 1.0, "alpha": 1.0, "mlp_before": 1,
                                "hidden": 16, "variant": "reference"}, 10, 3)
    ops = GraphOps.from_graph(g)
    with torch.no_grad():
        spec = PropagationSpec(4, 1.0, 1.0, "reference")
        z_mid = propagate(ops, model.mlp_before(x), spec)
    gamma = TruncatedLp(0.1, 0.2, 2.0).score(ops.edge_sq_dist(z_mid))
    assert (gamma == 0).any() and (gamma > 0).any()


@pytest.mark.parametrize("variant", ["paper", "reference"])
def test_p2_attention_equals_no_attention(variant):
    g = random_graph(2)
    x = torch.randn(g.num_nodes(), 6, generator=torch.Generator().manual_seed(2))
    ops = GraphOps.from_graph(g)
    cfg = {"steps": 6, "lam": 0.8, "alpha": 0.7, "mlp_before": 1, "variant": variant}
    torch.manual_seed(0)
    base = TWIRLS.from_config(cfg, 6, 4)
    torch.manual_seed(0)
    p2 = TWIRLS.from_config({**cfg, "attention": {"p": 2, "tau": 0.5,
                                                   "placement": "before+middle"}}, 6, 4)
    assert torch.equal(base(ops, x), p2(ops, x))


def test_twirls_star_caches_the_propagation_of_x():
    g = random_graph(4)
    x = torch.randn(g.num_nodes(), 8, generator=torch.Generator().manual_seed(4))
    ops = GraphOps.from_graph(g)
    cfg = {"steps": 5, "lam": 2.0, "alpha": 0.4, "mlp_before": 0, "mlp_after": 2,
           "hidden": 16, "normalized": True, "dropout": 0.5}
    model = TWIRLS.from_config(cfg, 8, 3)
    assert model.cacheable
    model.train()
    torch.manual_seed(5)
    cached = model(ops, x)
    # the same computation without the cache
    torch.manual_seed(5)
    direct = model.mlp_after(model.propagation(ops, x))
    assert torch.equal(cached, direct)
    # the cache is reused, and only g(y; θ) gets gradients
    key = ("twirls*", model.propagation.spec)
    first = ops._cache[key][2]
    cached.sum().backward()
    model(ops, x)
    assert ops._cache[key][2] is first and not first.requires_grad
    assert all(p.grad is not None for p in model.mlp_after.parameters())
    # modifying x in place (or passing another tensor) recomputes
    x.mul_(2.0)
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(ops, x), model.mlp_after(model.propagation(ops, x)))
    assert ops._cache[key][2] is not first
    # input dropout, an MLP before, or learned embeddings disable the cache
    for change in ({"input_dropout": 0.1}, {"mlp_before": 1}, {"embedding": 4}):
        assert not TWIRLS.from_config({**cfg, **change}, 8, 3, num_nodes=ops.n).cacheable


def test_widths_follow_the_reference():
    m = TWIRLS.from_config({"steps": 2, "lam": 1, "alpha": 1, "mlp_before": 1}, 30, 5)
    assert [tuple(lin.weight.shape) for lin in m.mlp_before.lins] == [(5, 30)]
    m = TWIRLS.from_config({"steps": 2, "lam": 1, "alpha": 1, "mlp_before": 2, "hidden": "-"},
                           30, 5)
    assert [tuple(lin.weight.shape) for lin in m.mlp_before.lins] == [(128, 30), (5, 128)]
    m = TWIRLS.from_config({"steps": 2, "lam": 1, "alpha": 1, "mlp_before": 0, "mlp_after": 3,
                            "hidden": 64, "norm": "batch"}, 30, 5)
    assert [tuple(lin.weight.shape) for lin in m.mlp_after.lins] == [(64, 30), (64, 64), (5, 64)]
    assert len(m.mlp_after.norms) == 2


def test_embedding_replaces_missing_features():
    g = random_graph(6)
    ops = GraphOps.from_graph(g)
    cfg = {"steps": 3, "lam": 10, "alpha": "auto", "normalized": True, "embedding": 12}
    model = build_model("twirls", cfg, 0, 7, num_nodes=ops.n)
    assert model.propagation.spec.alpha == pytest.approx(1 / 11)
    out = model(ops, None)
    assert out.shape == (ops.n, 7)
    out.sum().backward()
    assert model.embedding is not None and model.embedding.grad is not None
    with pytest.raises(ValueError, match="x is None"):
        TWIRLS.from_config({**cfg, "embedding": 0}, 5, 7)(ops, None)
    with pytest.raises(ValueError, match="pass num_nodes"):
        TWIRLS.from_config(cfg, 0, 7)


def test_gradients_through_attention_are_exact():
    """Backward through attention (SDDMM on the re-weighted matrix) vs finite differences."""
    g = random_graph(7, n=12, m=25)
    ops = GraphOps.from_graph(g, dtype=torch.float64)
    x = torch.randn(12, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    for variant in ("paper", "reference"):
        model = TWIRLS.from_config({
            "steps": 4, "lam": 0.9, "alpha": 0.8, "mlp_before": 1, "variant": variant,
            "attention": {"p": 1.0, "tau": 0.05, "T": 50.0, "placement": "before+middle"}},
            4, 3).double()
        lin = model.mlp_before.lins[0]

        def fn(w, model=model, lin=lin):
            f = torch.nn.functional.linear(x, w, lin.bias)
            return model.mlp_after(model.propagation(ops, f))

        w0 = lin.weight.detach().clone().requires_grad_(True)
        assert torch.autograd.gradcheck(fn, (w0,), eps=1e-6, atol=1e-6, fast_mode=True)


def test_config_errors_are_clear():
    with pytest.raises(ValueError, match="unknown key 'lamda'.*Did you mean 'lam'"):
        TWIRLS.from_config({"steps": 2, "lamda": 1, "lam": 1, "alpha": 1}, 3, 2)
    with pytest.raises(ValueError, match="missing key 'alpha'"):
        TWIRLS.from_config({"steps": 2, "lam": 1}, 3, 2)
    with pytest.raises(ValueError, match="both 0"):
        TWIRLS.from_config({"steps": 2, "lam": 1, "alpha": 1, "mlp_before": 0}, 3, 2)
    with pytest.raises(ValueError, match="alpha must be a number or 'auto'"):
        TWIRLS.from_config({"steps": 2, "lam": 1, "alpha": "big"}, 3, 2)
    with pytest.raises(ValueError, match="variant must be one of"):
        TWIRLS.from_config({"steps": 2, "lam": 1, "alpha": 1, "variant": "dgl"}, 3, 2)
    with pytest.raises(KeyError, match="unknown model 'twirl'"):
        build_model("twirl", {}, 3, 2)
    m = TWIRLS.from_config({"steps": 2, "lam": 1, "alpha": 1,
                            "attention": {"p": 0.1, "tau": 0.2, "T": math.inf}}, 3, 2)
    assert "attention=(p=0.1" in repr(m)


def test_config_dataclass_states_the_defaults_once():
    """``steps``, ``lam``, ``alpha`` are fields without default (required keys); ``alpha: auto``
    and ``hidden: "-"`` are resolved when the model is built, the same from a dict or the
    dataclass."""
    with pytest.raises(ValueError, match=r"missing key 'steps' \(required: steps, lam, alpha\)"):
        TWIRLSConfig.from_mapping({})
    cfg = TWIRLSConfig.from_mapping({"steps": 3, "lam": 3.0, "alpha": "auto", "hidden": "-",
                                     "mlp_before": 2})
    assert cfg == TWIRLSConfig(steps=3, lam=3.0, alpha="auto", mlp_before=2, hidden="-")
    assert cfg.propagation_spec().alpha == 0.25
    torch.manual_seed(0)
    a = TWIRLS(4, 2, cfg)
    torch.manual_seed(0)
    b = TWIRLS.from_config({"steps": 3, "lam": 3.0, "alpha": 0.25, "mlp_before": 2}, 4, 2)
    assert a.mlp_before.lins[0].out_features == TWIRLSConfig.hidden == 128
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
