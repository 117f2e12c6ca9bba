"""Batched training of several seeds (twirls.train.batched) against today's one-seed runs: the
same forward and gradients per seed, K Adams in one, per-seed model selection and early
stopping, bit-identical reruns, and (slow) the same accuracy distribution on Cora."""

from __future__ import annotations

import json
import math
import statistics
from contextlib import nullcontext
from dataclasses import replace

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from twirls.data.graph import Split, undirected_graph
from twirls.models import (
    MODELS,
    GraphOps,
    build_model,
    csr_kernel,
    layers,
    propagation,
    sparse_features,
)
from twirls.models.attention import AttentionSpec, TruncatedLp
from twirls.models.baselines.gcnii import residual_adjacency
from twirls.models.masks import drawing_from
from twirls.models.propagation import PropagationSpec, propagate, row_operator, row_operator_pays
from twirls.train.batched import (
    BatchConfig,
    Masks,
    Selection,
    run_seeds_batched,
    stack_models,
    train_batch,
    trainer,
)
from twirls.train.batched.layers import from_wide, seeds_addmm, to_wide
from twirls.train.batched.trainer import batch_loss, make_optimizer
from twirls.train.loop import TrainConfig, run_seeds, seed_model_run, set_seed, train_run

from fixtures import MIRROR, PLANETOID
from requires import needs_kernel

RTOL, ATOL = 1e-5, 1e-6  # float32: K products in one kernel sum in another order
SEEDS = [3, 11, 12]
CORA = MIRROR / PLANETOID


def small_graph(n: int = 50, d: int = 8, classes: int = 3, seed: int = 0):
    """A 50-node homophilous graph with dense features and a 20/15/15 split."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=gen)
    x = torch.randn(classes, d, generator=gen)[labels] + torch.randn(n, d, generator=gen)
    src, dst = torch.randint(0, n, (2, 4 * n), generator=gen)
    keep = (labels[src] == labels[dst]) | (torch.rand(4 * n, generator=gen) < 0.2)
    ops = GraphOps.from_graph(undirected_graph(src[keep], dst[keep], n))
    perm = torch.randperm(n, generator=gen)
    return ops, x.abs(), labels, Split(perm[:20], perm[20:35], perm[35:])


def sparse(x: torch.Tensor) -> torch.Tensor:
    """``x`` with ~70 % zeros as sparse CSR (as the stages give bag-of-words features)."""
    gen = torch.Generator().manual_seed(1)
    return (x * (torch.rand(x.shape, generator=gen) < 0.3)).to_sparse_csr()


TWIRLS_K2 = {"steps": 4, "lam": 1.0, "alpha": 1.0, "mlp_before": 2, "hidden": 16,
             "dropout": 0.5, "input_dropout": 0.3}
CONFIGS = {  # name -> (model, model_cfg, also on sparse CSR features)
    "twirls-base-k2": ("twirls", TWIRLS_K2, True),
    # attention in the middle (Table 4's TWIRLS), before and in the middle (Table 3's), at
    # every step; the reference variant's attention weights the self-loops too
    "twirls-attention": ("twirls", {**TWIRLS_K2, "steps": 5, "attention": {
        "p": 0.1, "tau": 0.2, "T": 2.0}}, True),
    "twirls-attention-before-reference": ("twirls", {
        "variant": "reference", "steps": 4, "lam": 1.0, "alpha": 0.5, "mlp_before": 1,
        "input_dropout": 0.3, "attention": {"p": 0.5, "tau": 0.1, "T": 20.0,
                                            "placement": "before+middle"}}, True),
    "twirls-attention-every-normalized": ("twirls", {
        "steps": 3, "lam": 1.0, "alpha": 0.3, "mlp_before": 2, "hidden": 8, "dropout": 0.5,
        "normalized": True, "attention": {"p": 1.0, "tau": 0.5, "placement": "every"}}, False),
    "twirls-reference": ("twirls", {"variant": "reference", "steps": 3, "lam": 0.8,
                                    "alpha": 0.7, "mlp_before": 1, "input_dropout": 0.5}, True),
    "twirls-star-normalized": ("twirls", {"steps": 3, "lam": 2.0, "alpha": "auto",
                                          "mlp_before": 0, "mlp_after": 2, "hidden": 8,
                                          "dropout": 0.5, "normalized": True}, True),
    "twirls-both-mlps-prox": ("twirls", {"steps": 3, "lam": 1.0, "alpha": 0.5, "mlp_before": 1,
                                         "mlp_after": 2, "hidden": 8, "dropout": 0.5,
                                         "prox_relu": True}, False),
    "mlp": ("mlp", {"hidden": 16, "input_dropout": 0.2}, True),
    "sgc": ("sgc", {"dropout": 0.3}, False),
    "sgc-no-dropout": ("sgc", {"steps": 3}, False),  # every SGC of the params: rows alone
    "gcn": ("gcn", {"hidden": 16}, True),  # dense: (ÂX)W then Â(HW); sparse: Â(XW) twice
    "appnp": ("appnp", {"steps": 4, "hidden": 16}, True),
    "closed-form": ("twirls-closed-form", {"lam": 1.0, "mlp_before": 2, "hidden": 16,
                                           "input_dropout": 0.3, "dropout": 0.5}, True),
    "closed-form-normalized": ("twirls-closed-form", {"lam": 2.0, "normalized": True}, False),
    # JKNet and DAGNN take dense features (bag-of-words ones through their CSR copy, below)
    "jknet": ("jknet", {"layers": 3, "hidden": 16, "mode": "cat"}, False),
    "jknet-max-jump-after-dropout": ("jknet", {
        "layers": 2, "hidden": 8, "mode": "max", "final_propagation": False,
        "jump_after_dropout": True, "input_dropout": 0.2}, False),
    "dagnn": ("dagnn", {"steps": 4, "hidden": 16, "dropout": 0.5}, False),
    "dagnn-three-layers": ("dagnn", {"steps": 3, "hidden": 8, "layers": 3, "dropout": 0.3,
                                     "input_dropout": 0.0}, False),
    # GCNII takes dense features too (bag-of-words through its CSR copy); two weight-decay
    # groups (the convolutions' conv_weight_decay)
    "gcnii": ("gcnii", {"layers": 4, "hidden": 8, "lam": 0.6, "dropout": 0.5,
                        "conv_weight_decay": 0.05}, False),
}


def built(name, cfg, in_dim, out_dim, seeds=SEEDS):
    """Today's model of each seed (seed_run: set_seed, then build)."""
    models = []
    for seed in seeds:
        set_seed(seed)
        models.append(build_model(name, cfg, in_dim, out_dim))
    return models


def grads_per_seed(net, k: int) -> dict[str, torch.Tensor]:
    return {name: (p.grad[k].t() if p.dim() == 3 else p.grad[k])
            for name, p in zip(net.p.names, net.p.params, strict=True)}


def check_same_as_single(name, cfg, ops, x, labels, split, seeds=SEEDS):
    """Eval forward, then train forward and gradients (the same dropout masks: each single
    model draws from torch seeded with its seed, as Masks(mode="torch") does), per seed."""
    in_dim = x.shape[1]
    classes = int(labels.max()) + 1
    models = built(name, cfg, in_dim, classes, seeds)
    net = stack_models(models)
    with torch.no_grad():
        eval_out = net.eval()(ops, x)
    for k, model in enumerate(models):
        with torch.no_grad():
            torch.testing.assert_close(eval_out[k], model.eval()(ops, x), rtol=RTOL, atol=ATOL)
    net.train()
    logits = net(ops, x, Masks(seeds, "torch"))
    batch_loss(logits, labels, split.train).sum().backward()
    for k, (seed, model) in enumerate(zip(seeds, models, strict=True)):
        model.train()
        torch.manual_seed(seed)
        single = model(ops, x)
        torch.testing.assert_close(logits[k], single, rtol=RTOL, atol=ATOL)
        F.cross_entropy(single[split.train], labels[split.train]).backward()
        mine = grads_per_seed(net, k)
        for pname, param in model.named_parameters():
            torch.testing.assert_close(mine[pname], param.grad, rtol=RTOL, atol=ATOL,
                                       msg=lambda m, p=pname, s=seed: f"{p} seed {s}: {m}")


@pytest.mark.parametrize("key", list(CONFIGS))
def test_forward_and_gradients_equal_the_single_seed_models(key):
    name, cfg, with_sparse = CONFIGS[key]
    ops, x, labels, split = small_graph()
    check_same_as_single(name, cfg, ops, x, labels, split)
    if with_sparse:
        check_same_as_single(name, cfg, ops, sparse(x), labels, split)


@pytest.mark.parametrize("key", [k for k, (name, _, _) in CONFIGS.items()
                                 if name in ("jknet", "dagnn", "gcnii")])
def test_jknet_dagnn_and_gcnii_drop_bag_of_words_through_their_csr_copy(key):
    """Dense features that are mostly zeros: the single models drop out and multiply their
    cached CSR copy (dropout_linear), and so do the batched ones, with the same draws."""
    name, cfg, _ = CONFIGS[key]
    ops, x, labels, split = small_graph()
    gen = torch.Generator().manual_seed(1)
    dense_bag = x * (torch.rand(x.shape, generator=gen) < 0.15)  # past SPARSE_DENSITY's 25 %
    check_same_as_single(name, cfg, ops, dense_bag, labels, split)
    assert ops._cache[("sparse_features",)][2] is not None


@pytest.mark.parametrize("cfg", [
    {"steps": 4, "lam": 1.0, "alpha": 1.0, "mlp_before": 2, "hidden": 64, "input_dropout": 0.8,
     "dropout": 0.5},  # the two-layer f on sparse features (_SparseMLP)
    {"steps": 4, "lam": 1.0, "alpha": 1.0, "mlp_before": 1, "input_dropout": 0.5},  # narrow
])
def test_skipping_dropped_entries_changes_no_bit(monkeypatch, cfg):
    """The sparse products without the entries input dropout zeroed (drop_zeros) give the same
    outputs and gradients, bit for bit, as with them stored."""
    ops, x, labels, split = small_graph(n=80, d=300)
    x = sparse(x)
    runs = []
    for min_width in (sparse_features.DROP_ZEROS_MIN_WIDTH, 10**9):  # skipped, then stored
        monkeypatch.setattr(sparse_features, "DROP_ZEROS_MIN_WIDTH", min_width)
        net = stack_models(built("twirls", {**cfg, "hidden": 64}, x.shape[1], 3)).train()
        logits = net(ops, x, Masks(SEEDS, "fast"))
        batch_loss(logits, labels, split.train).sum().backward()
        runs.append([logits.detach()] + [p.grad for p in net.parameters()])
    for ours, stored in zip(*runs, strict=True):
        assert torch.equal(ours, stored)


@pytest.fixture(scope="module")
def cora(tmp_path_factory):
    if not (CORA / "ind.cora.graph").exists():
        pytest.skip(f"no Planetoid mirror at {CORA}")
    from twirls.data import planetoid
    from twirls.train.experiment import prepare_features

    folder = tmp_path_factory.mktemp("cora")
    for f in CORA.glob("ind.cora.*"):
        (folder / f.name).symlink_to(f)
    data = planetoid.load(folder, "cora")
    x = prepare_features(data.features, {})
    return GraphOps.from_graph(data.graph), x, data.labels, data.splits["public"]


@pytest.mark.parametrize(("name", "cfg"), [
    ("twirls", {"steps": 16, "lam": 1.0, "alpha": 1.0, "mlp_before": 2, "input_dropout": 0.8,
                "dropout": 0.8}),  # cora-twirls-base-k2
    ("gcn", {"layers": 2, "hidden": 16, "dropout": 0.5}),
    ("appnp", {"steps": 10, "alpha": 0.1, "layers": 2, "hidden": 64, "dropout": 0.5}),
    ("jknet", {"layers": 3, "hidden": 64, "mode": "cat", "dropout": 0.5}),  # cora-jknet
    ("dagnn", {"steps": 10, "hidden": 64, "dropout": 0.8}),  # cora-dagnn
    ("gcnii", {"layers": 4, "hidden": 64, "alpha": 0.1, "lam": 0.5, "dropout": 0.6}),
])
def test_forward_and_gradients_on_cora(cora, name, cfg):
    """On Cora's features as the stages give them: sparse CSR to the models that take it, the
    dense matrix to JKNet and DAGNN (which drop out and multiply its cached CSR copy)."""
    ops, x, labels, split = cora
    dense = name in ("jknet", "dagnn", "gcnii")
    check_same_as_single(name, cfg, ops, x if dense else x.to_sparse_csr(),
                         labels, split)


@pytest.mark.parametrize("kernel", [pytest.param(True, marks=needs_kernel), False])
def test_seeds_addmm_has_the_bits_of_the_wide_product(cora, kernel):
    """GCNII's graph product seed by seed on ``(K, n, c)`` slices gives, forward and backward,
    the bits of one product with ``[H_1 … H_K]`` (the sparse kernel's and MKL's alike)."""
    ops = cora[0]
    matrix = residual_adjacency(ops, 0.1)
    gen = torch.Generator().manual_seed(0)
    h, add, grad = (torch.randn(3, ops.n, 64, generator=gen) for _ in range(3))
    with (nullcontext() if kernel else csr_kernel.disabled()):
        outs, grads = [], []
        for seedwise in (True, False):
            y, a = h.clone().requires_grad_(), add.clone().requires_grad_()
            out = (seeds_addmm(matrix, a, y) if seedwise else
                   from_wide(matrix.addmm(to_wide(a), to_wide(y)), 3))
            out.backward(grad)
            outs.append(out)
            grads.append((y.grad, a.grad))
        assert kernel == csr_kernel.applies(matrix.csr, h[0])  # the path this test meant
    assert torch.equal(outs[0], outs[1])
    assert all(torch.equal(g, w) for g, w in zip(*grads, strict=True))


def test_one_adam_on_stacked_parameters_is_k_adams():
    """Three steps of the batched optimizer (Adam with L2 weight decay over (K, ...) tensors,
    fused) against today's Adam of each seed, on the gradients of each seed's own loss."""
    ops, x, labels, split = small_graph()
    cfg = TrainConfig(lr=0.05, weight_decay=5e-3)
    models = built("twirls", TWIRLS_K2, x.shape[1], 3)
    net = stack_models(models)
    batched = make_optimizer(net, cfg)
    singles = [torch.optim.Adam(m.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
               for m in models]
    for step in range(3):
        batched.zero_grad()
        batch_loss(net.train()(ops, x, None), labels, split.train).sum().backward()
        batched.step()
        for k, (model, opt) in enumerate(zip(models, singles, strict=True)):
            opt.zero_grad()
            out = model.eval()(ops, x)  # eval: no dropout, so both see the same function
            F.cross_entropy(out[split.train], labels[split.train]).backward()
            opt.step()
            state = net.seed_state(k)
            for pname, param in model.named_parameters():
                torch.testing.assert_close(state[pname], param.detach(), rtol=RTOL, atol=ATOL,
                                           msg=lambda m, p=pname, s=step: f"{p} step {s}: {m}")


def test_batched_training_retraces_todays_runs_with_todays_masks():
    """masks="torch": every seed draws today's dropout masks, so the batched histories are
    today's histories (float32 rounding apart), epoch by epoch."""
    ops, x, labels, split = small_graph(seed=2)
    cfg = TrainConfig(epochs=12, lr=0.05, weight_decay=5e-4)

    def build():
        return build_model("twirls", TWIRLS_K2, x.shape[1], 3)

    today = run_seeds(build, ops, x, labels, split, cfg, SEEDS)
    mine = run_seeds_batched(build, ops, x, labels, split, cfg, SEEDS, BatchConfig(masks="torch"))
    assert [r.seed for r in mine.runs] == SEEDS
    for a, b in zip(today.runs, mine.runs, strict=True):
        assert [h["epoch"] for h in a.history] == [h["epoch"] for h in b.history]
        for ha, hb in zip(a.history, b.history, strict=True):
            assert hb["loss"] == pytest.approx(ha["loss"], rel=1e-5)
            assert (ha["train"], ha["val"], ha["test"]) == (hb["train"], hb["val"], hb["test"])
        assert (a.best_epoch, a.test) == (b.best_epoch, b.test)


# ---------------------------------------------------------------------------- selection
class Scripted(nn.Module):
    """A "model" whose eval forwards give the validation accuracies ``vals`` (one per epoch):
    every training node is right, the first ``round(v * V)`` validation nodes are right."""

    def __init__(self, vals: list[float], n: int, split: Split) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))
        self.vals, self.n, self.split, self.calls = vals, n, split, 0

    def forward(self, ops, x):
        logits = torch.zeros(self.n, 2) + 0.0 * self.w
        logits[:, 1] = 1.0  # class 1 everywhere; labels are 0
        logits[self.split.train, 0] = 2.0
        if not self.training:
            right = round(self.vals[self.calls] * self.split.val.numel())
            logits[self.split.val[:right], 0] = 2.0
            self.calls += 1
        return logits


SEQUENCES = [
    [0.2, 0.4, 0.4, 0.3, 0.4, 0.2, 0.2, 0.2, 0.6, 0.6, 0.1, 0.1, 0.1],  # ties go to the later
    [0.5, 0.4, 0.3, 0.2, 0.1, 0.6, 0.6, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1],
    [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 0.9],
]


@pytest.mark.parametrize("patience", [None, 1, 2, 3])
@pytest.mark.parametrize("vals", SEQUENCES)
def test_selection_is_train_runs(vals, patience):
    """Selection (the batched trainer's per-seed bookkeeping) picks the epoch train_run picks,
    and stops after the same number of epochs, on the same validation sequence."""
    n = 20
    split = Split(torch.arange(0, 5), torch.arange(5, 15), torch.arange(15, 20))
    labels = torch.zeros(n, dtype=torch.int64)
    cfg = TrainConfig(epochs=len(vals), lr=0.1, patience=patience)
    ops = GraphOps.from_graph(undirected_graph(torch.tensor([0]), torch.tensor([1]), n))
    run = train_run(Scripted(vals, n, split), ops, None, labels, split, cfg)
    sel = Selection(True, patience)
    for epoch, v in enumerate(vals):
        sel.update({"epoch": epoch, "loss": 0.0, "train": 1.0, "val": v, "test": 0.0})
    assert sel.best is not None
    assert (sel.best["epoch"], len(sel.history)) == (run.best_epoch, len(run.history))
    assert sel.best["val"] == pytest.approx(run.val)
    if sel.stopped:  # nothing after the stop was recorded
        assert len(sel.history) == sel.best["epoch"] + patience + 1


def test_each_seed_stops_and_selects_on_its_own(monkeypatch):
    """With patience, seeds of one batch stop at different epochs and leave the batch; each
    one's stop, selected epoch, scores and last weights are today's run's (masks="torch"), and
    a stopped seed's later epochs are neither recorded nor selected."""
    ops, x, labels, split = small_graph(seed=4)
    cfg = TrainConfig(epochs=60, lr=0.05, weight_decay=5e-4, patience=4)
    seeds = [0, 1, 2, 5]

    def build():
        return build_model("gcn", {"hidden": 8, "dropout": 0.5}, x.shape[1], 3)

    left = []
    drop = trainer.drop_stopped
    monkeypatch.setattr(trainer, "drop_stopped",
                        lambda *a: left.append(len(a[3])) or drop(*a))
    mine, weights = train_batch(build, ops, x, labels, split, cfg, seeds, "torch",
                                keep_models=True)
    lengths = [len(r.history) for r in mine]
    assert len(set(lengths)) > 1 and max(lengths) < 60  # stopped early, at different epochs
    assert left == sorted(left, reverse=True) and left[-1] >= 1  # the batch shrank
    for seed, run, kept in zip(seeds, mine, weights, strict=True):
        set_seed(seed)
        model = build()
        today = train_run(model, ops, x, labels, split, cfg, seed=seed)
        assert (run.best_epoch, len(run.history)) == (today.best_epoch, len(today.history))
        assert (run.train, run.val, run.test) == (today.train, today.val, today.test)
        for name, value in model.state_dict().items():
            torch.testing.assert_close(kept[name], value, rtol=RTOL, atol=ATOL)
        vals = [h["val"] for h in run.history]
        assert run.best_epoch == max(i for i, v in enumerate(vals) if v == max(vals))
        assert len(run.history) == run.best_epoch + cfg.patience + 1


# ---------------------------------------------------------------------------- row operator
@pytest.mark.parametrize("kw", [{}, {"variant": "reference", "lam": 0.8, "alpha": 0.7},
                                {"normalized": True, "lam": 2.0, "alpha": 0.3}],
                         ids=["paper", "reference", "normalized"])
def test_row_operator_is_the_propagation_on_those_rows(kw):
    ops, _, _, split = small_graph()
    f = torch.randn(ops.n, 6, generator=torch.Generator().manual_seed(2))
    for steps in (1, 2, 7):
        spec = PropagationSpec(**{"steps": steps, "lam": 1.0, "alpha": 1.0, **kw})
        q = row_operator(ops, spec, split.val)
        assert q.shape == (split.val.numel(), ops.n)
        torch.testing.assert_close(q @ f, propagate(ops, f, spec)[split.val], rtol=RTOL,
                                   atol=ATOL)


def test_row_operator_only_where_the_steps_are_linear_and_it_pays(monkeypatch):
    ops, _, _, _ = small_graph()
    spec = PropagationSpec(steps=4, lam=1.0, alpha=1.0)
    attention = replace(spec, attention=AttentionSpec(TruncatedLp(p=0.5, tau=0.1, T=2.0)))
    nnz = ops.row.numel()
    assert row_operator_pays(ops, spec, 20)
    assert not row_operator_pays(ops, replace(spec, steps=0), 20)
    assert not row_operator_pays(ops, replace(spec, prox_relu=True), 20)
    assert not row_operator_pays(ops, attention, 20)
    # a dense (r, n) product pays against S sparse ones up to r n = 4 S nnz
    pays = propagation.DENSE_OVER_SPARSE * spec.steps * nnz // ops.n
    assert row_operator_pays(ops, spec, pays) and not row_operator_pays(ops, spec, pays + 1)
    monkeypatch.setattr(propagation, "ROW_OPERATOR_MAX_ENTRIES", 20 * ops.n - 1)
    assert not row_operator_pays(ops, spec, 20)
    with pytest.raises(ValueError, match="must be linear"):
        row_operator(ops, attention, torch.arange(3))


@pytest.mark.parametrize("key", list(CONFIGS))
def test_forward_rows_are_the_forwards_rows(key):
    """``forward_rows`` on the training nodes gives the full forward's logits there, and the
    same gradients (float32 tolerance); through the row operator for TWIRLS-base, from those
    rows alone for SGC without dropout, from those rows of the inverse for the closed form, and
    exactly the full forward's where a model has none of these."""
    name, cfg, _ = CONFIGS[key]
    ops, x, labels, split = small_graph()
    outs, grads = [], []
    for rows_only in (False, True):
        net = stack_models(built(name, cfg, x.shape[1], 3)).train()
        masks = Masks(SEEDS, "torch")
        out = (net.forward_rows(ops, x, masks, split.train) if rows_only
               else net(ops, x, masks).index_select(1, split.train))
        batch_loss(out, labels[split.train]).sum().backward()
        outs.append(out.detach())
        grads.append([p.grad for p in net.p.params])
    used = any(key[0] in ("row_operator", "closed_form_rows") for key in ops._cache)
    assert used == (key in ("twirls-base-k2", "twirls-reference", "closed-form",
                            "closed-form-normalized"))
    check = torch.testing.assert_close if used or key == "sgc-no-dropout" else _assert_equal
    check(outs[1], outs[0], rtol=RTOL, atol=ATOL)
    for mine, full in zip(grads[1], grads[0], strict=True):
        check(mine, full, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("key", ["closed-form", "gcn"])
def test_scores_on_the_scored_rows_are_the_full_forwards(key):
    """The evaluation forward on the scored nodes alone (``scored_rows``: train, val and test
    once each, in order) scores every part as the full forward does, where the model computes
    those rows alone (the closed form, float32 rounding apart: the same accuracies here) and
    where it computes every node and selects them (GCN)."""
    from twirls.train.batched.trainer import batch_scores, scored_rows

    name, cfg, _ = CONFIGS[key]
    ops, x, labels, split = small_graph()
    net = stack_models(built(name, cfg, x.shape[1], 3))
    rows, at = scored_rows(split)
    parts = (split.train, split.val, split.test)
    assert torch.equal(rows, torch.unique(torch.cat(parts)))
    assert all(torch.equal(rows[pos], idx) for pos, idx in zip(at, parts, strict=True))
    full = batch_scores(net, ops, x, labels, split)
    assert torch.equal(batch_scores(net, ops, x, labels, split, (rows, at)), full)
    assert net.training  # left in the mode it was in
    assert any(k[0] == "closed_form_rows" for k in ops._cache) == (key == "closed-form")


def test_closed_form_row_operator_trains_as_the_full_forward():
    """A batch of the closed form with ``row_operator`` (its training and evaluation forwards
    on those rows of the inverse) records the histories of the one without, to float32
    rounding: the same epochs picked, the same scores."""
    name, cfg, _ = CONFIGS["closed-form"]
    ops, x, labels, split = small_graph()
    tcfg = TrainConfig(epochs=6, lr=0.05, progress=False)

    def build():
        return build_model(name, cfg, x.shape[1], 3)

    full = train_batch(build, ops, x, labels, split, tcfg, SEEDS)
    rows = train_batch(build, ops, x, labels, split, tcfg, SEEDS, row_operator=True)
    assert any(k[0] == "closed_form_rows" for k in ops._cache)
    for a, b in zip(rows, full, strict=True):
        assert (a.best_epoch, a.train, a.val, a.test) == (b.best_epoch, b.train, b.val, b.test)
        for ha, hb in zip(a.history, b.history, strict=True):
            assert ha["val"] == hb["val"] and ha["test"] == hb["test"]
            assert ha["loss"] == pytest.approx(hb["loss"], rel=1e-5)


def _assert_equal(a: torch.Tensor, b: torch.Tensor, **_) -> None:
    assert torch.equal(a, b)


def test_training_with_the_row_operator():
    """``row_operator=True``: a rerun is bit-identical, and the first epoch's losses are those
    of the full forward (float32 tolerance; later epochs part by rounding, as another batch
    size does)."""
    ops, x, labels, split = small_graph(seed=5)
    cfg = TrainConfig(epochs=10, lr=0.05, weight_decay=5e-4)

    def build():
        return build_model("twirls", TWIRLS_K2, x.shape[1], 3)

    def run(row_operator: bool):
        return run_seeds_batched(build, ops, sparse(x), labels, split, cfg, [0, 1, 2],
                                 BatchConfig(batch=2, row_operator=row_operator))

    a, b, full = run(True), run(True), run(False)
    assert [r.history for r in a.runs] == [r.history for r in b.runs]
    for mine, theirs in zip(a.runs, full.runs, strict=True):
        assert mine.history[0]["loss"] == pytest.approx(theirs.history[0]["loss"], rel=1e-5)


# ---------------------------------------------------------------------------- components
def components_graph():
    """Two 50-node graphs side by side and 5 isolated nodes: the training nodes in the first
    graph alone, validation nodes in both, test nodes in the second and on the isolated nodes;
    two isolated nodes hold no scored node."""
    ops_a, x_a, labels_a, _ = small_graph(seed=0)
    ops_b, x_b, labels_b, _ = small_graph(seed=1)
    src = torch.cat([ops_a.src, ops_b.src + 50])
    dst = torch.cat([ops_a.dst, ops_b.dst + 50])
    ops = GraphOps(src, dst, 105)
    x = torch.cat([x_a, x_b, torch.rand(5, x_a.shape[1])])
    labels = torch.cat([labels_a, labels_b, torch.tensor([0, 1, 2, 0, 1])])
    perm = torch.randperm(50, generator=torch.Generator().manual_seed(2))
    split = Split(perm[:20], torch.cat([perm[20:35], perm[:10] + 50]),
                  torch.cat([perm[10:40] + 50, torch.tensor([100, 101, 102])]))
    return ops, x, labels, split


def test_a_part_is_whole_components_with_the_graphs_entries():
    """The components that hold the training nodes: the first graph (and none of its nodes
    left out), with the whole graph's normalised entries, rows of the features (CSR rows with
    their entries in order) and labels, and the split renumbered into it."""
    from twirls.train.batched.components import holding, part, rows_of

    ops, x, labels, split = components_graph()
    nodes = holding(ops, split.train)
    assert set(nodes.tolist()) <= set(range(50)) and len(nodes) > 40
    assert torch.equal(holding(ops, torch.tensor([100])), torch.tensor([100]))
    sub = part(ops, sparse(x), labels, split, nodes)
    whole = ops.gcn_norm().csr.to_dense()[nodes][:, nodes]
    assert torch.equal(sub.ops.gcn_norm().csr.to_dense(), whole)
    assert torch.equal(sub.x.to_dense(), sparse(x).to_dense()[nodes])
    assert torch.equal(rows_of(x, nodes), x[nodes])
    assert torch.equal(sub.labels, labels[nodes])
    assert torch.equal(nodes[sub.split.train], split.train)
    assert torch.equal(nodes[sub.split.val], split.val[split.val < 50])
    assert sub.split.test.numel() == 0
    with pytest.raises(ValueError, match="not whole components"):
        part(ops, x, labels, split, nodes[1:])


@pytest.mark.parametrize("key", list(CONFIGS))
def test_a_model_on_its_components_is_the_whole_graphs(key):
    """Every batched model, on the components that hold the training nodes, gives their logits
    and the gradients of the loss on them of the whole graph (no dropout: the masks' shape
    differs), and on the scored nodes' components their scores."""
    from twirls.train.batched.components import holding, part
    from twirls.train.batched.trainer import batch_scores, scored_rows

    name, cfg, with_sparse = CONFIGS[key]
    ops, x, labels, split = components_graph()
    for feats in (x, sparse(x)) if with_sparse else (x,):
        sub = part(ops, feats, labels, split, holding(ops, split.train))
        outs, grads = [], []
        for on in ((ops, feats, labels, split), (sub.ops, sub.x, sub.labels, sub.split)):
            net = stack_models(built(name, cfg, x.shape[1], 3)).train()
            loss = batch_loss(net(on[0], on[1], None), on[2], on[3].train)
            loss.sum().backward()
            outs.append(loss.detach())
            grads.append([p.grad for p in net.p.params])
        torch.testing.assert_close(outs[1], outs[0], rtol=RTOL, atol=ATOL)
        for mine, full in zip(grads[1], grads[0], strict=True):
            torch.testing.assert_close(mine, full, rtol=1e-4, atol=ATOL)
        scored = part(ops, feats, labels, split, holding(ops, scored_rows(split)[0]))
        assert not {103, 104} & set(scored.nodes.tolist())  # they hold no scored node
        net = stack_models(built(name, cfg, x.shape[1], 3))
        torch.testing.assert_close(
            batch_scores(net, scored.ops, scored.x, scored.labels, scored.split),
            batch_scores(net, ops, feats, labels, split))


def test_training_on_components():
    """``components=True``: a rerun is bit-identical; without dropout its epochs are the whole
    graph's to float32 rounding (the same losses and scores), and with it other runs of the
    same experiment."""
    ops, x, labels, split = components_graph()
    cfg = TrainConfig(epochs=8, lr=0.05, weight_decay=5e-4)

    def run(components: bool, dropout: float = 0.0):
        def build():
            return build_model("gcnii", {"layers": 4, "hidden": 8, "dropout": dropout},
                               x.shape[1], 3)

        return run_seeds_batched(build, ops, x, labels, split, cfg, [0, 1],
                                 BatchConfig(batch=2, components=components))

    a, b, full = run(True), run(True), run(False)
    assert [r.history for r in a.runs] == [r.history for r in b.runs]
    for mine, theirs in zip(a.runs, full.runs, strict=True):
        for ha, hb in zip(mine.history, theirs.history, strict=True):
            assert ha["loss"] == pytest.approx(hb["loss"], rel=1e-4)
            assert (ha["train"], ha["val"], ha["test"]) == (hb["train"], hb["val"], hb["test"])
    dropped, dropped_full = run(True, 0.5), run(False, 0.5)
    assert dropped.runs[0].history[0]["loss"] != dropped_full.runs[0].history[0]["loss"]


# ---------------------------------------------------------------------------- determinism
def test_rerun_is_bit_identical_and_workers_do_not_matter():
    ops, x, labels, split = small_graph(seed=5)
    cfg = TrainConfig(epochs=15, lr=0.05, weight_decay=5e-4)

    def build():
        return build_model("twirls", TWIRLS_K2, x.shape[1], 3)

    def run(jobs: int, batch: int | None = None):
        return run_seeds_batched(build, ops, sparse(x), labels, split, cfg, [0, 1, 2, 3],
                                 BatchConfig(batch=batch), jobs=jobs)

    a, b = run(1), run(1)
    assert [r.history for r in a.runs] == [r.history for r in b.runs]
    assert len({tuple(h["loss"] for h in r.history) for r in a.runs}) == 4  # seeds differ
    c, d = run(1, batch=2), run(2, batch=2)  # batches of 2, in one process or two
    assert [r.history for r in c.runs] == [r.history for r in d.runs]
    # another batch size: other kernels' rounding, the same run of each seed
    for ra, rc in zip(a.runs, c.runs, strict=True):
        for ha, hc in zip(ra.history, rc.history, strict=True):
            assert hc["loss"] == pytest.approx(ha["loss"], rel=1e-5)


def test_a_seeds_masks_do_not_depend_on_its_batch():
    masks_alone, masks_among = Masks([7], "fast"), Masks([3, 7, 9], "fast")
    for _ in range(3):
        alone, among = masks_alone.noise((40, 30), 0.8), masks_among.noise((40, 30), 0.8)
        assert torch.equal(alone[0], among[1]) and not torch.equal(among[0], among[1])
    torch.manual_seed(7)
    todays = F.dropout(torch.ones(40, 30), 0.8, True)
    assert torch.equal(Masks([7], "torch").noise((40, 30), 0.8)[0], todays)


def test_fast_masks_keep_each_entry_with_probability_one_minus_p():
    for p in (0.5, 0.8):
        noise = Masks(range(10), "fast").noise((200, 100), p)
        kept = noise > 0
        assert noise.unique().tolist() == [0.0, pytest.approx(1 / (1 - p))]
        sd = math.sqrt(p * (1 - p) / kept.numel())
        assert abs(kept.float().mean().item() - (1 - p)) < 4 * sd
        # neighbouring entries and seeds are uncorrelated
        a, b = kept[:, :, :-1].flatten().float(), kept[:, :, 1:].flatten().float()
        assert abs(torch.corrcoef(torch.stack([a, b]))[0, 1].item()) < 0.02


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fast_masks_are_kept_over_keep_to_the_bit(dtype):
    """A kept entry is ``1 / (1 - p)`` exactly as ``kept.to(dtype).div_(1 - p)`` rounds it, for
    every ``p`` (in ``noise`` and ``seed_noise`` alike)."""
    masks = Masks([3, 4], "fast", dtype=dtype)
    for p in [i / 200 for i in range(1, 200)] + [1 / 3, 2 / 3, 0.123456789]:
        for noise in (masks.noise((7, 9), p), masks.seed_noise(1, (7, 9), p)):
            assert noise.dtype == dtype
            assert torch.equal(noise, (noise > 0).to(dtype).div_(1 - p)), p


@pytest.mark.parametrize("key", list(CONFIGS))
def test_a_run_alone_with_fast_masks_retraces_its_batched_seed(key):
    """``masks: fast`` in a run trained alone: each seed draws the masks its batched run draws
    (its own stream, in forward order), so the two histories agree epoch by epoch (float32
    rounding apart), for every batched model, on sparse features where it takes them."""
    name, model_cfg, on_sparse = CONFIGS[key]
    ops, x, labels, split = small_graph(seed=2)
    x = sparse(x) if on_sparse else x
    cfg = TrainConfig(epochs=8, lr=0.05, weight_decay=5e-4, masks="fast")

    def build():
        return build_model(name, model_cfg, x.shape[1], 3)

    alone = run_seeds(build, ops, x, labels, split, cfg, SEEDS)
    mine = run_seeds_batched(build, ops, x, labels, split, cfg, SEEDS, BatchConfig(masks="fast"))
    for a, b in zip(alone.runs, mine.runs, strict=True):
        assert len(a.history) == len(b.history) == cfg.epochs
        for ha, hb in zip(a.history, b.history, strict=True):
            assert hb["loss"] == pytest.approx(ha["loss"], rel=1e-5)
            assert (ha["train"], ha["val"], ha["test"]) == (hb["train"], hb["val"], hb["test"])


def test_fast_masks_alone_are_other_masks_than_torchs_and_rerun_to_the_bit():
    ops, x, labels, split = small_graph(seed=3)
    cfg = TrainConfig(epochs=6, lr=0.05, masks="fast")

    def run(cfg, seed=4):
        set_seed(seed)
        return train_run(build_model("twirls", TWIRLS_K2, x.shape[1], 3), ops, x, labels, split,
                         cfg, seed=seed).history

    fast = run(cfg)
    assert run(cfg) == fast
    assert run(replace(cfg, masks="torch")) != fast and run(cfg, seed=5) != fast
    with pytest.raises(ValueError, match="masks 'fast' draws from the run's seed"):
        train_run(build_model("mlp", {}, x.shape[1], 3), ops, x, labels, split, cfg)


def _geom_relations(n: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(8)
    return {"poincare": torch.stack([torch.randint(0, n, (4 * n,), generator=gen),
                                     torch.randint(0, n, (4 * n,), generator=gen),
                                     torch.randint(0, 8, (4 * n,), generator=gen)])}


ALONE = {  # the models trained one run a seed (not batched), with dropout on
    "gcnii": {"layers": 4, "hidden": 8}, "gcnii-dense": {"layers": 3, "hidden": 8},
    "gat": {"heads": 2, "hidden": 4}, "graphsage": {"hidden": 8}, "h2gcn": {"hidden": 8},
    "geom-gcn": {"hidden": 4}, "ignn": {"hidden": 8, "dropout": 0.5},
}


@pytest.mark.parametrize("on_sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("name", list(ALONE))
def test_every_models_dropout_draws_from_the_runs_stream(name, on_sparse):
    """Under a run's fast stream no model's training forward draws from torch's generator: the
    stream alone decides its masks (the same stream, the same logits; another seed, others)."""
    ops, x, labels, split = small_graph(seed=1)
    if on_sparse and not getattr(MODELS[name], "accepts_sparse", False):
        pytest.skip(f"{name} takes dense features")
    x = sparse(x) if on_sparse else x
    meta = {"geom_relations": _geom_relations(ops.n)} if name == "geom-gcn" else {}

    def model() -> nn.Module:  # a fresh one each time (IGNN warm-starts its fixed point)
        set_seed(0)
        return build_model(name, ALONE[name], x.shape[1], 3, num_nodes=ops.n, **meta)

    def logits(seed: int) -> torch.Tensor:
        net, state = model().train(), torch.get_rng_state()
        with drawing_from(Masks([seed], "fast")):
            out = net(ops, x)
        out[split.train].sum().backward()
        assert torch.equal(torch.get_rng_state(), state), "drew from torch's generator"
        return out.detach()

    first = logits(6)
    assert torch.equal(logits(6), first) and not torch.equal(logits(7), first)
    with torch.no_grad():
        assert not torch.equal(model().eval()(ops, x), first)


def test_the_default_dropout_is_f_dropout_to_the_bit():
    x = torch.rand(30, 20)
    for value in (x, sparse(x)):
        torch.manual_seed(3)
        ours = layers.dropout(value, 0.4, True)
        after = torch.rand(())
        torch.manual_seed(3)
        want = F.dropout(value.values() if value.layout == torch.sparse_csr else value, 0.4, True)
        assert torch.equal(ours.values() if value.layout == torch.sparse_csr else ours, want)
        assert torch.equal(torch.rand(()), after)  # the same draws from torch's generator
        assert layers.dropout(value, 0.4, False) is value
        assert layers.dropout(value, 0.0, True) is value


def test_first_model_and_unsupported_models():
    ops, x, labels, split = small_graph(seed=6)
    cfg = TrainConfig(epochs=5, lr=0.05, patience=2)

    def build():
        return build_model("mlp", {"hidden": 8}, x.shape[1], 3)

    res = run_seeds_batched(build, ops, x, labels, split, cfg, [4, 5],
                            BatchConfig(masks="torch"), keep_first_model=True)
    model, _ = seed_model_run(build, ops, x, labels, split, cfg, 4)
    assert res.first_model is not None
    for name, value in model.state_dict().items():
        torch.testing.assert_close(res.first_model[name], value, rtol=RTOL, atol=ATOL)
    attention = {**TWIRLS_K2, "prox_relu": True, "attention": {"p": 0.5, "tau": 0.1, "T": 20.0}}
    with pytest.raises(NotImplementedError, match="attention and prox_relu"):
        train_batch(lambda: build_model("twirls", attention, x.shape[1], 3), ops, x, labels,
                    split, cfg, [0])
    with pytest.raises(NotImplementedError, match="GAT is not supported"):
        stack_models([build_model("gat", {}, x.shape[1], 3)])
    with pytest.raises(ValueError, match="batch must be None or an integer >= 1"):
        BatchConfig(batch=0)


# ---------------------------------------------------------------------------- statistics
@pytest.mark.slow
@pytest.mark.parametrize("row_operator", [False, True], ids=["full", "row-operator"])
def test_thirty_seeds_on_cora_match_todays_runs(cora, row_operator):
    """TWIRLS-base (cora-twirls-base-k2) on Cora, seeds 0-29 batched (fast masks: other masks
    than today's) and through today's run_seeds: the mean test accuracies differ by less than
    two standard errors of their difference (~6 min on one core). Here: today 83.40 ± 0.87,
    batched 83.34 ± 0.79, 0.3 standard errors; with the row operator (an AMD EPYC, 12 min on a
    slow day) today 82.98 ± 0.79, batched 83.03 ± 0.93, 0.2 standard errors.

    The outcome is fixed by the seeds, but any change of rounding (another kernel, another
    order of sums) draws it anew after 500 chaotic epochs, and a correct implementation lands
    beyond two standard errors one draw in twenty: an earlier version of the batched kernels gave
    2.5 here (batched 82.81), and the present ones 0.9 on seeds 100-159 (paired; today 83.17,
    batched 83.04). A bias that matters (a wrong dropout rate or optimizer) moves the mean by a
    point or more."""
    ops, x, labels, split = cora
    x = x.to_sparse_csr()
    cfg = TrainConfig(epochs=500, lr=0.1, weight_decay=5e-4)

    def build():
        return build_model("twirls", {"steps": 16, "lam": 1.0, "alpha": 1.0, "mlp_before": 2,
                                      "input_dropout": 0.8, "dropout": 0.8}, x.shape[1], 7)

    seeds = list(range(30))
    today = [r.test for r in run_seeds(build, ops, x, labels, split, cfg, seeds).runs]
    mine = [r.test for r in run_seeds_batched(build, ops, x, labels, split, cfg, seeds,
                                              BatchConfig(row_operator=row_operator)).runs]
    se = math.sqrt(statistics.variance(today) / 30 + statistics.variance(mine) / 30)
    diff = statistics.fmean(mine) - statistics.fmean(today)
    print(f"today {statistics.fmean(today):.4f} ± {statistics.stdev(today):.4f}, batched "
          f"{statistics.fmean(mine):.4f} ± {statistics.stdev(mine):.4f}, diff {diff:.4f}, "
          f"se {se:.4f}")
    assert abs(diff) < 2 * se


@pytest.mark.slow
def test_thirty_seeds_with_attention_on_cora_match_todays_runs(cora):
    """TWIRLS with attention (Table 4's TWIRLS on nettack-Cora: S = 32, one linear layer, the
    attention of params.yaml in the middle) on Cora's public split, seeds 0-29 batched (fast
    masks) and through today's run_seeds: the means differ by less than two standard errors of
    their difference (see the test above for why a draw may land outside one time in twenty).
    ~11 min on one core. Here: today 81.23 ± 0.73, batched 81.32 ± 0.56, 0.5 standard
    errors."""
    ops, x, labels, split = cora
    x = x.to_sparse_csr()
    cfg = TrainConfig(epochs=500, lr=0.1, weight_decay=5e-5)

    def build():
        return build_model("twirls", {"steps": 32, "lam": 1.0, "alpha": 1.0, "mlp_before": 1,
                                      "mlp_after": 0, "input_dropout": 0.5, "attention": {
                                          "p": 0.1, "tau": 0.2, "T": 2.0}}, x.shape[1], 7)

    seeds = list(range(30))
    today = [r.test for r in run_seeds(build, ops, x, labels, split, cfg, seeds).runs]
    mine = [r.test for r in run_seeds_batched(build, ops, x, labels, split, cfg, seeds).runs]
    se = math.sqrt(statistics.variance(today) / 30 + statistics.variance(mine) / 30)
    diff = statistics.fmean(mine) - statistics.fmean(today)
    print(f"today {statistics.fmean(today):.4f} ± {statistics.stdev(today):.4f}, batched "
          f"{statistics.fmean(mine):.4f} ± {statistics.stdev(mine):.4f}, diff {diff:.4f}, "
          f"se {se:.4f}")
    assert abs(diff) < 2 * se


def test_attacked_twirls_trains_in_batches_with_train_batch():
    """Table 4's TWIRLS (attention) with ``train.batch: 2``: the attacked stages' runs of 3
    seeds are 2 batches (2 + 1 seeds) whose results, flattened in pool order, are the seeds in
    order and what train_batch gives for them; a model the batched trainer lacks runs one seed
    per run."""
    from twirls.stages.attacked import entry_runs
    from twirls.train.experiment import run_inputs
    from twirls.train.parallel import run_all

    from fixtures import toy_data

    data = toy_data()
    data.splits = {"attack": data.splits["a"]}
    cfg = {**TWIRLS_K2, "attention": {"p": 0.1, "tau": 0.2, "T": 2.0}}
    exp = {"dataset": "toy", "model": "twirls", "model_cfg": cfg, "seeds": 3, "split": "attack",
           "train_cfg": {"epochs": 6, "lr": 0.05}}
    runs = entry_runs(exp, data, torch.device("cpu"), batch=2)
    assert len(runs) == 2
    out = run_all(runs, jobs=2)
    flat = [r for part in out for r in part]
    assert [r.seed for r in flat] == [0, 1, 2]
    inp = run_inputs(exp, data, torch.device("cpu"), progress=False)
    alone = train_batch(inp.build, inp.ops, inp.x, data.labels, data.splits["attack"], inp.cfg,
                        [2])
    assert (flat[2].best_epoch, flat[2].test) == (alone[0].best_epoch, alone[0].test)
    gat = {**exp, "model": "gat", "model_cfg": {}}
    assert len(entry_runs(gat, data, torch.device("cpu"), batch=2)) == 3  # one seed a run


@pytest.mark.parametrize("option", ["row_operator", "components"])
def test_the_stages_options_reach_the_trainer(option):
    """``train.row_operator`` / ``train.components`` (and a sweep's own): ``run_experiment`` and
    ``seed_runs`` (the train and sweep stages' paths) train what ``BatchConfig(<option>=...)``
    trains (the toy graph's training nodes share components with 146 of its 150 nodes)."""
    from twirls.train.experiment import flat_results, run_experiment, run_inputs, seed_runs

    from fixtures import toy_data

    data = toy_data()
    exp = {"dataset": "toy", "model": "twirls", "model_cfg": TWIRLS_K2, "seeds": 2,
           "split": "a", "train_cfg": {"epochs": 8, "lr": 0.05}}
    inp = run_inputs(exp, data, torch.device("cpu"), progress=False)
    cpu, wants = torch.device("cpu"), []
    for flag in (False, True):
        want = [(r.history, r.test) for r in run_seeds_batched(
            inp.build, inp.ops, inp.x, data.labels, data.splits["a"], inp.cfg, [0, 1],
            BatchConfig(batch=2, **{option: flag})).runs]
        stage = run_experiment(exp, data, 2, cpu, progress=False, batch=2, **{option: flag})
        sweep = flat_results([run() for run in seed_runs(exp, data, 2, cpu, 2, progress=False,
                                                         **{option: flag})])
        for got in (stage.runs, sweep):
            assert [(r.history, r.test) for r in got] == want
        wants.append(want)
    assert wants[0] != wants[1]  # other rounding, other masks: the flag shows in the losses
    if option == "row_operator":
        assert any(key[0] == "row_operator" for key in inp.ops._cache)


def test_every_splits_batches_share_one_pool(monkeypatch):
    """Several splits of a few seeds each (Table 3 with ``seeds`` above 1): the stage's path
    trains every split's batches in one pool, so a split of one batch does not leave the other
    workers idle, with the runs, their order and the first model of training split by split."""
    from twirls.train.batched import trainer
    from twirls.train.experiment import run_experiment, run_inputs

    from fixtures import toy_data

    data = toy_data()
    exp = {"dataset": "toy", "model": "mlp", "model_cfg": {"hidden": 8, "dropout": 0.5},
           "train_cfg": {"epochs": 6, "lr": 0.05}}
    inp = run_inputs(exp, data, torch.device("cpu"), progress=False)
    want = [run_seeds_batched(inp.build, inp.ops, inp.x, data.labels, data.splits[split],
                              inp.cfg, [1000 * i, 1000 * i + 1], BatchConfig(batch=2),
                              keep_first_model=i == 0) for i, split in enumerate(inp.splits)]
    pools = []
    real = trainer.run_all

    def counting(runs, jobs=1, **kw):
        pools.append(len(runs))
        return real(runs, jobs, **kw)

    monkeypatch.setattr(trainer, "run_all", counting)
    for jobs in (1, 2):
        got = run_experiment(exp, data, 2, torch.device("cpu"), progress=False, jobs=jobs,
                             keep_first_model=True, batch=2)
        assert [(r.seed, r.history, r.test) for r in got.runs] == [
            (r.seed, r.history, r.test) for res in want for r in res.runs]
        assert [r.seed for r in got.runs] == [0, 1, 1000, 1001]
        for name, value in want[0].first_model.items():
            assert torch.equal(got.first_model[name], value)
    assert pools == [2, 2]  # one pool of the two splits' batches each time, not one a split


def test_an_entrys_own_batch_wins_over_train_batch():
    """A train entry's ``batch`` (next to its ``seeds``) decides how its seeds train, else
    ``train.batch``: Citeseer's and Pubmed's GCNII entries train one run a seed (batching does
    not pay there on a CPU), the other Planetoid entries, Cora's GCNII too, ``train.batch`` and
    ``train.seeds``."""
    from twirls.config.entries import seeds_and_batch
    from twirls.params import read_all

    params = read_all()
    train = params["train"]
    assert seeds_and_batch({}, train) == (train["seeds"], train["batch"])
    assert seeds_and_batch({"seeds": 7, "batch": 3}, train) == (7, 3)
    assert seeds_and_batch(params["table2"]["citeseer-gcnii"], train) == (10, 1)
    assert seeds_and_batch(params["table2"]["cora-gcnii"], train) == (train["seeds"],
                                                                      train["batch"])
    assert seeds_and_batch(params["table2"]["cora-gcn"], train)[1] == train["batch"] > 1


def test_batched_seeds_benchmark_names_its_configurations(capsys):
    """``table8:<S>:<alpha>`` is a point of Table 8's grid (the sweep's entry at that point);
    any other name is one clear message before anything is timed."""
    from twirls.bench import batched_seeds as bench
    from twirls.params import read_all

    from fixtures import REPO

    params = read_all(REPO)
    assert bench.config_problem("table8:16:0.5", params) == ""
    assert bench.config_problem("cora-gcn", params) == ""
    assert bench.config_problem("table4-twirls:nettack-cora", params) == ""
    assert bench.config_problem("figure2:twirls-closed-form", params) == ""
    for bad in ("table8:12:0.5", "table8:16", "table8:x:0.1", "cora-gcm",
                "table4-twirls:cora", "figure2:twirls", "figure2:sgc", "figure2:gcn"):
        assert bench.config_problem(bad, params), bad
    with pytest.raises(SystemExit) as stop:
        bench.main(["--configs", "table8:12:0.5", "--params", str(REPO / "params")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "'table8:12:0.5' is no point of Table 8's grid" in err and "Traceback" not in err


def test_batched_seeds_records_keep_the_machine_they_were_timed_on():
    """A file written by one machine and extended on another: the earlier records keep the
    earlier file's CPU, commit and torch; a record that names its own keeps it."""
    from twirls.bench.batched_seeds import earlier_records

    old = {"commit": "abc", "cpu": "Xeon", "cpu_capability": "AVX512", "torch": "2.15",
           "records": [{"config": "cora-gcn"},
                       {"config": "cora-appnp", "cpu": "EPYC", "cpu_capability": "AVX2",
                        "commit": "def", "torch": "2.11", "device": "cuda: H100"}]}
    first, second = earlier_records(old)
    assert (first["cpu"], first["commit"], first["device"], first["torch"]) == (
        "Xeon", "abc", "cpu", "2.15")
    assert second == old["records"][1]
    assert "cpu" not in old["records"][0]  # the earlier file's dicts are left as they were


def test_batched_seeds_skip_done_keeps_the_records_of_this_device(tmp_path, monkeypatch,
                                                                  capsys):
    """``--skip-done``: a seed count that ``--out`` has for this device is kept as it was; a
    count it lacks is timed, its today path extrapolated from the kept full measurement; a
    record of another device is timed again; with every count kept, nothing is loaded."""
    from twirls.bench import batched_seeds as bench

    from fixtures import REPO, toy_data

    exp = {"dataset": "toy", "model": "twirls", "model_cfg": TWIRLS_K2, "split": "a",
           "train_cfg": {"epochs": 3, "lr": 0.05}}
    loads = []
    monkeypatch.setattr(bench, "config_inputs",
                        lambda name, args, params: loads.append(name) or (exp, toy_data()))
    today = {"seconds": 5.0, "seconds_per_seed": 5.0, "test_mean": 0.5, "test_std": 0.0,
             "runs": 1}
    kept = {"config": "cora-gcn", "seeds": 1, "batch": 2, "cpu": "EPYC", "device": "cpu",
            "today": today, "batched": today, "speedup": 1.0}
    gpu = {**kept, "seeds": 3, "device": "cuda: NVIDIA H100 80GB HBM3"}
    out = tmp_path / "bench.json"
    out.write_text(json.dumps({"records": [kept, gpu]}))
    argv = ["--configs", "cora-gcn", "--seeds", "1", "3", "--batch", "2", "--skip-done",
            "--max-today-s", "1", "--params", str(REPO / "params"), "--out", str(out)]
    assert bench.main(argv) == 0
    records = json.loads(out.read_text())["records"]
    assert records[0] == kept and records[1] == gpu and len(records) == 3
    new = records[2]
    assert (new["seeds"], new["device"], new["batched"]["runs"]) == (3, "cpu", 3)
    assert new["today"] == {**today, "extrapolated_from": 1, "estimated_seconds": 15.0}
    assert loads == ["cora-gcn"]
    assert bench.main(argv) == 0  # now both counts are there: nothing is loaded or timed
    assert loads == ["cora-gcn"] and json.loads(out.read_text())["records"] == records
    assert "every seed count is timed" in capsys.readouterr().out


def test_the_benchmark_times_the_trainers_epoch():
    """``batched_seeds --profile``'s epoch parts: a training step and an evaluation forward,
    both positive; driven by hand for a few epochs, the two steps it times make the losses and
    scores ``train_batch`` records, bit for bit."""
    from twirls.bench.batched_seeds import epoch_parts
    from twirls.train.batched.trainer import batch_scores, stacked_model, train_step
    from twirls.train.experiment import run_inputs

    from fixtures import toy_data

    data = toy_data()
    exp = {"dataset": "toy", "model": "twirls", "model_cfg": TWIRLS_K2, "seeds": 2,
           "split": "a", "train_cfg": {"epochs": 4, "lr": 0.05}}
    inp = run_inputs(exp, data, torch.device("cpu"), progress=False)
    split = data.splits["a"]
    parts = epoch_parts(inp, data, split, batch=2, epochs=3)
    assert set(parts) == {"train_step", "eval"} and all(v > 0 for v in parts.values())
    want = train_batch(inp.build, inp.ops, inp.x, data.labels, split, inp.cfg, [0, 1])
    net = stacked_model(inp.build, [0, 1], inp.ops.device)
    draws, optimizer = Masks([0, 1], "fast"), make_optimizer(net, inp.cfg)
    for epoch in range(inp.cfg.epochs):
        losses = train_step(net, inp.ops, inp.x, data.labels, split, draws, optimizer)
        scores = batch_scores(net, inp.ops, inp.x, data.labels, split)
        for k, run in enumerate(want):
            got = [losses[k].item(), *scores[k].tolist()]
            assert got == [run.history[epoch][key] for key in ("loss", "train", "val", "test")]


def test_the_fast_masks_benchmark_times_both_masks_and_names_its_configurations(capsys):
    """``fast_masks``: both modes' training step and evaluation, positive, for a run of the
    entry's model; a name that is no train-kind entry is one message before anything runs."""
    from twirls.bench import fast_masks as bench
    from twirls.params import read_all
    from twirls.train.experiment import run_inputs

    from fixtures import REPO, toy_data

    data = toy_data()
    exp = {"dataset": "toy", "model": "gat", "model_cfg": {"heads": 2, "hidden": 4},
           "split": "a", "train_cfg": {"epochs": 4, "lr": 0.05}}
    inp = run_inputs(exp, data, torch.device("cpu"), progress=False)
    for masks in ("torch", "fast"):
        parts = bench.epoch_ms(inp, data, data.splits["a"], masks, epochs=2)
        assert set(parts) == {"train_step", "eval"} and all(v > 0 for v in parts.values())
    params = read_all(REPO)
    assert bench.config_problem("table3:actor-gat", params) == ""
    assert all(bench.config_problem(bad, params) for bad in ("table3:actor", "table8:x", "gat"))
    with pytest.raises(SystemExit) as stop:
        bench.main(["--configs", "table3:actor", "--params", str(REPO / "params")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "'table3:actor' is no <group>:<entry>" in err and "Traceback" not in err
