"""GPU checks: ``pytest -m gpu tests/test_gpu.py`` (skipped, with the reason, without CUDA).

* Every model family of :data:`twirls.models.MODELS` gives the same eval-mode logits on CUDA as
  on the CPU for the same weights (float32 tolerance), then trains a few epochs on CUDA; the
  families that take sparse CSR features (``accepts_sparse``) do so again on bag-of-words ones.
* ``run_experiment`` trains on the GPU that ``pick_device("auto")`` picks.
* Table 12's taggers (MLP, GCN, TWIRLS-base over a character embedding, the bi-LSTM) give the
  same logits on CUDA as on the CPU, then train on sentence mini-batches on CUDA.
* The epoch loop makes the host wait for the GPU only at its one read of the scores (torch's
  CUDA sync debug mode), for every torch-native model family but IGNN.
* The fast Mettack makes the same first 10 flips on CUDA as on the CPU (small SBM graph), with
  the same meta-gradient, and ``first_argmax`` keeps the first-index tie rule on CUDA; so does
  the ``attack`` stage run with ``--device cuda``.
* The attention weights' gradient as one wide SDDMM (``torch.sparse.sampled_addmm``) gives the
  CPU's on CUDA.
* GCN-SVD's normalised low-rank adjacency held as its factors (the product DeepRobust's GCN
  layers call) gives the CPU's dense product on CUDA, forward and gradient.
* The benchmark ``twirls.bench.gpu --quick`` runs on CUDA.
* The peak GPU memory of every GPU test is printed in pytest's terminal summary, and written as
  JSON to ``$GPU_REPORT`` when that variable is set.

The checks are helpers taking the device; the tests at the bottom (no ``gpu`` marker) run the
same helpers on the CPU, and the benchmark with ``--device cpu --quick``, so the CUDA code paths
run on every machine and only the device differs. Needs neither DGL (every model family is
torch-native, GAT and GraphSAGE included), nor DVC, nor DeepRobust.
"""

from __future__ import annotations

import copy
import csv
import json
import math
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from twirls.attack import surrogate as sur
from twirls.attack.io import load_attacked
from twirls.attack.metattack import Metattack, first_argmax
from twirls.cws.batching import Sentences, make_batch
from twirls.cws.models import build_tagger
from twirls.cws.train import CWSTrainConfig, seeded_run
from twirls.data import pku
from twirls.data.graph import GraphData, Split, undirected_graph
from twirls.defenses import deeprobust_models as drm
from twirls.models import MODELS, GraphOps, build_model
from twirls.params import read_all
from twirls.stages import attack as attack_stage
from twirls.train import loop
from twirls.train.device import cuda_status, pick_device
from twirls.train.loop import TrainConfig, train_run

from fixtures import block_model, random_sentences, write_nettack

CUDA, WHY_NOT = cuda_status()  # also False on a GPU this torch build has no kernels for
NO_CUDA = f"no usable CUDA GPU: {WHY_NOT} (run `pytest -m gpu` on a GPU machine)"
needs_cuda = pytest.mark.skipif(not CUDA, reason=NO_CUDA)
REPO = Path(__file__).resolve().parents[1]
PAPER_CSV = REPO / "src" / "twirls" / "reports" / "paper_numbers.csv"


def gpu_test(func):
    """``@pytest.mark.gpu`` + skipped with the reason when torch sees no CUDA GPU."""
    return pytest.mark.gpu(needs_cuda(func))


# ----------------------------------------------------------------------------- model families
ATTENTION = {"p": 0.1, "tau": 0.2, "T": 2.0, "placement": "middle"}
TWIRLS = {"steps": 4, "lam": 1.0, "alpha": 1.0, "mlp_before": 2, "hidden": 16, "dropout": 0.5}
#: (case, model, config): every key of MODELS at least once (test below), on a small graph
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("twirls-base-paper", "twirls", {**TWIRLS, "variant": "paper"}),
    ("twirls-base-reference", "twirls", {**TWIRLS, "variant": "reference"}),
    ("twirls-attention-paper", "twirls",
     {**TWIRLS, "variant": "paper", "attention": ATTENTION}),
    ("twirls-attention-reference", "twirls",
     {**TWIRLS, "variant": "reference", "attention": ATTENTION}),
    ("twirls-star-batchnorm", "twirls",  # TWIRLS*: propagation cached in GraphOps
     {**TWIRLS, "mlp_before": 0, "mlp_after": 2, "norm": "batch"}),
    ("twirls-closed-form", "twirls-closed-form", {"lam": 1.0, "mlp_before": 2, "hidden": 16}),
    ("twirls-closed-form-normalized", "twirls-closed-form", {"lam": 2.0, "normalized": True}),
    ("mlp", "mlp", {"layers": 3, "hidden": 16, "norm": "batch"}),
    ("sgc", "sgc", {"steps": 2}),
    ("gcn", "gcn", {"layers": 3, "hidden": 16, "norm": "batch"}),
    ("appnp", "appnp", {"steps": 5, "hidden": 16}),
    ("jknet", "jknet", {"layers": 3, "hidden": 16, "mode": "max", "norm": "batch"}),
    ("gcnii", "gcnii", {"layers": 8, "hidden": 16}),
    ("gcnii-dense", "gcnii-dense", {"layers": 4, "hidden": 16}),
    ("dagnn", "dagnn", {"steps": 5, "hidden": 16}),
    ("h2gcn", "h2gcn", {"hidden": 16, "rounds": 2}),
    ("gat", "gat", {"layers": 2, "hidden": 4, "heads": 2}),
    ("graphsage", "graphsage", {"layers": 2, "hidden": 16}),
    ("geom-gcn", "geom-gcn", {"embedding": "poincare", "hidden": 8, "heads": 2}),
    ("ignn", "ignn", {"hidden": 16, "kappa": 0.9}),
    ("sse", "sse", {"hidden": 16, "aggregate": "mean", "updates": 3, "update_batch": 64,
                    "batch_size": 32}),
]
CASE_IDS = [case for case, _, _ in CASES]
#: the cases whose model takes sparse CSR features (``accepts_sparse``)
SPARSE_CASES = [c for c in CASES if getattr(MODELS[c[1]], "accepts_sparse", False)]
SPARSE_IDS = [case for case, _, _ in SPARSE_CASES]


def small_task(n: int = 240, edges: int = 720, features: int = 24, classes: int = 4,
               seed: int = 0) -> tuple[Any, torch.Tensor, torch.Tensor, Split]:
    """``(graph, features, labels, split)``: a small random graph, thirds for the split."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n, (edges,), generator=gen)
    dst = torch.randint(0, n, (edges,), generator=gen)
    graph = undirected_graph(src, dst, n)
    x = torch.rand(n, features, generator=gen)
    labels = torch.randint(0, classes, (n,), generator=gen)
    perm = torch.randperm(n, generator=gen)
    third = n // 3
    split = Split(*(part.sort().values
                    for part in (perm[:third], perm[third:2 * third], perm[2 * third:])))
    return graph, x, labels, split




def model_meta(name: str, graph: Any) -> dict[str, Any]:
    """The dataset facts a model asks for (``meta_keys``), made up for :func:`small_task`:
    Geom-GCN's relations are the graph's edges with a relation id from 0 to 7."""
    if "geom_relations" not in getattr(MODELS[name], "meta_keys", ()):
        return {}
    src, dst = graph.edges()
    rel = (src * 7 + dst) % 8
    return {"geom_relations": {"poincare": torch.stack([src, dst, rel])}}


def same_logits_then_train(name: str, cfg: dict[str, Any], device: str, *,
                           epochs: int = 5, sparse: bool = False) -> None:
    """Same weights on the CPU and on ``device``: eval-mode logits agree to float32 precision;
    then ``train_run`` trains the ``device`` copy for ``epochs`` epochs with finite losses.
    ``sparse``: bag-of-words features as sparse CSR, as the stages give them to the models that
    take them (``accepts_sparse``)."""
    graph, x, labels, split = small_task()
    if sparse:
        x = (x > 0.7).float().to_sparse_csr()
    torch.manual_seed(0)
    cpu_model = build_model(name, cfg, x.shape[1], int(labels.max()) + 1,
                            num_nodes=graph.num_nodes(), **model_meta(name, graph))
    dev_model = copy.deepcopy(cpu_model).to(device)  # same weights and buffers
    initial = [p.detach().clone() for p in cpu_model.parameters()]
    cpu_model.eval()
    dev_model.eval()
    ops = GraphOps.from_graph(graph, device=device)
    with torch.no_grad():
        expected = cpu_model(GraphOps.from_graph(graph), x)
        got = dev_model(ops, x.to(device))
    assert got.device.type == torch.device(device).type
    assert got.shape == expected.shape and bool(torch.isfinite(expected).all())
    scale = float(expected.abs().max().clamp(min=1e-6))
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-4 * scale,
                               msg=lambda m: f"{name} {cfg}: CPU vs {device} logits: {m}")

    result = train_run(dev_model, ops, x, labels, split, TrainConfig(epochs=epochs, lr=0.01),
                       seed=0)
    assert len(result.history) == epochs
    assert all(math.isfinite(r["loss"]) for r in result.history), result.history
    assert all(0.0 <= r[k] <= 1.0 for r in result.history for k in ("train", "val", "test"))
    params = list(dev_model.parameters())
    assert all(p.device.type == torch.device(device).type for p in params)
    assert any(not torch.equal(p.detach().cpu(), q) for p, q in zip(params, initial,
                                                                       strict=True))


# ----------------------------------------------------------------------------- batched seeds
BATCHED_CASES = {  # small versions of the configurations train.batch trains (issue 28)
    "twirls-base": ("twirls", {"steps": 4, "lam": 1.0, "alpha": 1.0, "mlp_before": 2,
                               "mlp_after": 0, "hidden": 16, "dropout": 0.5}),
    "twirls-attention": ("twirls", {"steps": 4, "lam": 1.0, "alpha": 1.0, "mlp_before": 2,
                                    "mlp_after": 0, "hidden": 16, "dropout": 0.5,
                                    "attention": {"p": 0.1, "tau": 0.2, "T": 2.0}}),
    "mlp": ("mlp", {"hidden": 16, "input_dropout": 0.2}),
    "sgc": ("sgc", {"dropout": 0.3}),
    "gcn": ("gcn", {"hidden": 16}),
    "appnp": ("appnp", {"steps": 4, "hidden": 16}),
    "closed-form": ("twirls-closed-form", {"lam": 1.0, "mlp_before": 2, "hidden": 16,
                                           "dropout": 0.5}),
    "gcnii": ("gcnii", {"layers": 4, "hidden": 16, "dropout": 0.5}),
}


def batched_same_as_single_then_trains(name: str, cfg: dict[str, Any], device: str, *,
                                       seeds: tuple[int, ...] = (0, 1, 2),
                                       epochs: int = 5) -> None:
    """``K`` seeds of one configuration as one batched model (:mod:`twirls.train.batched`) on
    ``device``: with each seed's own weights and dropout off (eval mode), the batched logits and
    the gradients of the summed loss are each single model's on ``device`` to float32
    precision; then :func:`~twirls.train.batched.run_seeds_batched` trains the seeds there for
    ``epochs`` epochs (finite losses, scores in [0, 1], one result per seed in order), on the
    whole of a sparser graph and on the components an epoch reads (``components``)."""
    from twirls.train.batched import BatchConfig, run_seeds_batched, stack_models
    from twirls.train.batched.trainer import batch_loss
    from twirls.train.loop import set_seed

    graph, x, labels, split = small_task()
    ops = GraphOps.from_graph(graph, device=device)
    x, labels = x.to(device), labels.to(device)
    train = split.train.to(device)
    classes = int(labels.max()) + 1

    def build() -> torch.nn.Module:
        return build_model(name, cfg, x.shape[1], classes)

    models = []
    for seed in seeds:
        set_seed(seed)
        models.append(build().to(device))
    net = stack_models(models).eval()
    logits = net(ops, x)
    assert logits.device.type == torch.device(device).type
    batch_loss(logits, labels, train).sum().backward()
    grads = {n: p.grad for n, p in zip(net.p.names, net.p.params, strict=True)}
    for k, model in enumerate(models):
        model.eval()
        single = model(ops, x)
        scale = float(single.detach().abs().max().clamp(min=1e-6))
        torch.testing.assert_close(logits[k].detach(), single.detach(), rtol=1e-4,
                                   atol=1e-4 * scale, msg=lambda m, k=k: f"{name} seed {k}: {m}")
        F.cross_entropy(single[train], labels[train]).backward()
        for pname, param in model.named_parameters():
            mine = grads[pname][k]
            torch.testing.assert_close(mine.t() if mine.dim() == 2 and param.dim() == 2
                                       else mine, param.grad, rtol=1e-4, atol=1e-5,
                                       msg=lambda m, p=pname, k=k: f"{name} {p} seed {k}: {m}")

    sparse_graph, *task = small_task(edges=240)  # its training nodes' components: 205 of 240
    ops = GraphOps.from_graph(sparse_graph, device=device)
    x, labels, split = task[0].to(device), task[1].to(device), task[2]
    for components in (False, True):  # the whole graph; the components an epoch reads
        result = run_seeds_batched(build, ops, x, labels, split,
                                   TrainConfig(epochs=epochs, lr=0.01), list(seeds),
                                   BatchConfig(components=components))
        assert [r.seed for r in result.runs] == list(seeds)
        for run in result.runs:
            assert len(run.history) == epochs
            assert all(math.isfinite(h["loss"]) for h in run.history), run.history
            assert all(0.0 <= h[k] <= 1.0 for h in run.history
                       for k in ("train", "val", "test"))


# ----------------------------------------------------------------------------- Table 12 taggers
CWS_TAGGERS = {  # label: (model, config), small versions of params/table12.yaml's
    "MLP": ("mlp", {"layers": 2, "hidden": 16, "dropout": 0.0}),
    "GCN": ("gcn", {"layers": 2, "hidden": 16, "dropout": 0.0}),
    "TWIRLS-base": ("twirls", {"steps": 8, "lam": 1.0, "alpha": 0.5, "mlp_before": 0,
                               "mlp_after": 2, "hidden": 16}),
    "bi-LSTM": ("bilstm", {"hidden": 8})}


def cws_sentences(num: int, seed: int) -> tuple[Sentences, int]:
    """Segmented random sentences as Table 12's loader gives them; and the vocabulary size."""
    sentences = random_sentences(num, seed=seed)
    vocab = pku.build_vocab("".join(ch for s in sentences for w in s for ch in w))
    tokens, tags, _ = pku.sentence_arrays(sentences, vocab)
    return Sentences(tokens, tags), len(vocab) + 1


def cws_same_logits_then_train(label: str, device: str, *, epochs: int = 3) -> None:
    """A tagger's logits on a batch agree on the CPU and on ``device`` (same weights); then
    ``seeded_run`` trains a fresh one on ``device`` with finite losses and a macro F1 score."""
    model_name, cfg = CWS_TAGGERS[label]
    train, vocab_size = cws_sentences(24, 0)
    torch.manual_seed(0)
    cpu_model = build_tagger(model_name, cfg, vocab_size, 8)
    dev_model = copy.deepcopy(cpu_model).to(device)
    cpu_model.eval()
    dev_model.eval()
    index = list(range(8))
    with torch.no_grad():
        expected = cpu_model(make_batch(train, index))
        got = dev_model(make_batch(train, index, device))
    assert got.device.type == torch.device(device).type and got.shape == expected.shape
    scale = float(expected.abs().max().clamp(min=1e-6))
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-4 * scale,
                               msg=lambda m: f"{label}: CPU vs {device} logits: {m}")
    cfg_train = CWSTrainConfig(epochs=epochs, lr=0.03, batch_size=8, bucket=2)
    run = seeded_run(lambda: build_tagger(model_name, cfg, vocab_size, 8), train, train, train,
                     cfg_train, seed=0, device=device)
    assert len(run.history) == epochs and all(math.isfinite(h["loss"]) for h in run.history)
    assert 0.0 <= run.test <= 1.0


#: model families whose training step must make the host wait, and why
SYNCS_BY_DESIGN = {"ignn": "its fixed-point solve reads each iteration's residual on the host "
                           "to decide when to stop, as IGNN's reference code does"}
HOST_READ_LINE = next(i for i, line in enumerate(Path(loop.__file__).read_text().splitlines(), 1)
                      if "the one host read" in line)


def epoch_loop_syncs(name: str, cfg: dict[str, Any], device: str, *, epochs: int = 6
                     ) -> list[str]:
    """Where ``train_run`` makes the host wait for ``device`` during ``epochs`` epochs whose
    scores are read back once (``read_every=epochs``), after a 2-epoch warm-up (CUDA's lazy
    set-up, the caches of ``GraphOps``): ``file:line`` of every synchronizing call that torch's
    CUDA sync debug mode reports (none off CUDA)."""
    if name in SYNCS_BY_DESIGN:
        pytest.skip(f"{name}: {SYNCS_BY_DESIGN[name]}")
    graph, x, labels, split = small_task()
    torch.manual_seed(0)
    model = build_model(name, cfg, x.shape[1], int(labels.max()) + 1,
                        num_nodes=graph.num_nodes(), **model_meta(name, graph)).to(device)
    ops = GraphOps.from_graph(graph, device=device)
    x, labels = x.to(device), labels.to(device)
    split = Split(split.train.to(device), split.val.to(device), split.test.to(device))
    cuda = torch.device(device).type == "cuda"
    # The warm-up runs in the mode too, its warnings dropped: the first switch into the mode in a
    # process warns once that the mode "is a prototype feature and does not yet detect all
    # synchronizing operations" (torch 2.11 on an H200), which the filter below would count.
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            train_run(model, ops, x, labels, split, TrainConfig(epochs=2), read_every=2)
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            result = train_run(model, ops, x, labels, split, TrainConfig(epochs=epochs),
                               read_every=epochs)
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
    assert len(result.history) == epochs
    return [f"{Path(w.filename).name}:{w.lineno}" for w in caught
            if "synchroniz" in str(w.message)]


def run_experiment_on(preference: str, expected: str, monkeypatch) -> None:
    """``run_experiment`` on a tiny bag-of-words dataset (sparse CSR features) uses the device
    that ``pick_device(preference)`` picks for its graph, features and model."""
    from twirls.train import experiment

    graph, x, labels, split = small_task()
    words = (x > 0.95).float()  # 5% ones: run_experiment passes them as sparse CSR
    data = GraphData("tiny", graph, words, labels, {"public": split})
    exp = {"model": "twirls", "dataset": "tiny",
           "model_cfg": {"steps": 4, "lam": 1.0, "alpha": 1.0, "mlp_before": 2, "hidden": 16,
                         "attention": ATTENTION},
           "train_cfg": {"epochs": 5, "lr": 0.05}}
    device = pick_device(preference, who="test")
    assert device.type == expected
    seen = []
    seed_run = experiment.seed_run

    def spy(build, ops, x, labels, split, cfg, seed):
        seen.append((ops.device.type, x.device.type, x.layout))
        return seed_run(build, ops, x, labels, split, cfg, seed)

    monkeypatch.setattr(experiment, "seed_run", spy)
    result = experiment.run_experiment(exp, data, 2, device, progress=False)
    assert seen == [(expected, expected, torch.sparse_csr)] * 2  # one per seed
    assert len(result.runs) == 2
    assert all(0.0 <= r.test <= 1.0 and math.isfinite(r.history[-1]["loss"])
               for r in result.runs)


# ----------------------------------------------------------------------------- fast Mettack
@pytest.fixture(scope="module")
def attack_task():
    adj, x, y = block_model()
    perm = np.random.default_rng(1).permutation(adj.shape[0])
    train, unlabeled = np.sort(perm[:20]), np.sort(perm[20:])
    torch.manual_seed(15)
    targets = sur.self_training_labels(sur.train_gcn(adj, x, y, train, sur.SURROGATE), y, train)
    return adj, x, y, train, unlabeled, targets


def same_flips(task, device: str, flips: int = 10) -> None:
    """From one random state: the CPU's default engine and ``engine="torch"`` on ``device``
    make the same ``flips`` flips and consume the same random stream."""
    adj, x, y, train, unlabeled, targets = task
    torch.manual_seed(3)
    state = torch.get_rng_state()
    cpu = Metattack(adj, x, y, train, unlabeled, targets)
    assert cpu.engine == "scipy"
    cpu.attack(flips, progress=False)
    after = torch.get_rng_state()
    torch.set_rng_state(state)
    dev = Metattack(adj, x, y, train, unlabeled, targets, device=device, engine="torch")
    assert dev._scores.device.type == torch.device(device).type
    dev.attack(flips, progress=False)
    assert dev.flips == cpu.flips
    assert torch.equal(torch.get_rng_state(), after)
    assert abs(dev.modified_adj() - cpu.modified_adj()).sum() == 0


def same_meta_gradient(task, device: str, lambda_: float) -> None:
    adj, x, y, train, unlabeled, targets = task
    grads = []
    for where, engine in (("cpu", "scipy"), (device, "torch")):
        attack = Metattack(adj, x, y, train, unlabeled, targets, lambda_=lambda_,
                           device=where, engine=engine)
        attack._toggle(0, 1)
        attack._toggle(int(adj[2].indices[0]), 2)
        torch.manual_seed(5)
        grads.append(attack.meta_gradient().cpu().clone())
    expected, got = grads
    assert float(expected.abs().max()) > 1e-3
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5 * float(expected.abs().max()))
    assert torch.equal(got, got.T)


def attack_stage_on(device: str, tmp_path: Path) -> None:
    """The ``attack`` stage (``--device``) makes the same 10 flips on ``device`` as on the CPU
    (its surrogate, split and evaluation stay on the CPU)."""
    raw = write_nettack(tmp_path / "raw", *block_model())
    flips, threads = [], torch.get_num_threads()
    try:
        for where in ("cpu", device):
            out = tmp_path / f"{where.replace(':', '-')}.npz"
            assert attack_stage.main(["--dataset", "nettack-cora", "--raw", str(raw),
                                      "--rate", str(10.5 / load_attacked_adj_edges(raw)),
                                      "--device", where, "--eval-seeds", "1", "--quiet",
                                      "--out", str(out)]) == 0
            flips.append(load_attacked(out).flips.tolist())
    finally:
        torch.set_num_threads(threads)  # the stage sets its own
    assert len(flips[0]) == 10 and flips[1] == flips[0]


def load_attacked_adj_edges(raw: Path) -> int:
    with np.load(raw / "cora.npz") as f:
        return len(f["adj_data"]) // 2


def first_argmax_ties(device: str) -> None:
    gen = torch.Generator().manual_seed(0)
    for shape in ((13, 9), (300, 300)):
        for _ in range(20):
            m = torch.randint(0, 4, shape, generator=gen).float()  # many ties
            i, j = first_argmax(m.to(device))
            assert i * shape[1] + j == int(torch.argmax(m))


def wide_sddmm_matches_the_cpus(device: str) -> None:
    """The attention weights' gradient of 16 steps of width 7 as one wide SDDMM
    (``SparseMatrix.grad_entries_sum``: ``torch.sparse.sampled_addmm``, cuSPARSE's SDDMM on
    CUDA) on ``device``, on A's edges and on the whole pattern: the CPU's to float32 rounding."""
    graph, _, _, _ = small_task()
    gen = torch.Generator().manual_seed(1)
    off = torch.rand(graph.edges()[0].numel(), generator=gen)
    grads = [torch.randn(graph.num_nodes(), 7, generator=gen) for _ in range(16)]
    ys = [torch.randn(graph.num_nodes(), 7, generator=gen) for _ in range(16)]
    for constant in (True, False):
        got = []
        for dev in ("cpu", device):
            mat = GraphOps.from_graph(graph, device=dev).matrix(off.to(dev), 0.5)
            mat.constant_diagonal = constant
            got.append(mat.grad_entries_sum([g.to(dev) for g in grads],
                                            [y.to(dev) for y in ys]))
        assert got[1].device.type == torch.device(device).type
        torch.testing.assert_close(got[1].cpu(), got[0], rtol=1e-5, atol=1e-5)


def low_rank_adjacency_matches_the_cpus(device: str) -> None:
    """GCN-SVD's normalised adjacency held as its factors (``LowRankAdjacency``, the product
    DeepRobust's GCN layers call) on ``device``: the dense guarded matrix's product on the CPU,
    forward and gradient, to float32 rounding (a random rank-15 matrix, one degree negative)."""
    gen = torch.Generator().manual_seed(2)
    n = 300
    us = torch.rand(n, 15, generator=gen) / n
    us[7] *= -100  # row 7 of A_k sums to below -1: a node the guard isolates
    vt = torch.rand(15, n, generator=gen)
    us, vt = us.numpy(), vt.numpy()
    low = drm.low_rank_product(us, vt)
    r, touched = drm.guarded_scaling(low)
    assert touched == 1 and r[7] == 0
    dense, _ = drm.guarded_normalize(low)
    factored = drm.LowRankAdjacency.build(us, vt, r, torch.device(device))
    h = torch.randn(n, 16, generator=gen)
    want_h = h.clone().requires_grad_(True)
    want = torch.spmm(dense, want_h)
    want.square().sum().backward()
    h_dev = h.to(device).requires_grad_(True)
    got = torch.spmm(factored, h_dev)
    got.square().sum().backward()
    assert got.device.type == torch.device(device).type
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(h_dev.grad.cpu(), want_h.grad, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- peak memory
PEAKS: dict[str, dict[str, int]] = {}
PLUGIN = "twirls-test-gpu-peak-memory"


class PeakMemorySummary:
    """pytest plugin (registered while the tests run) that prints :data:`PEAKS` in the terminal
    summary and writes them to ``$GPU_REPORT`` (JSON) when set."""

    def __init__(self, peaks: dict[str, dict[str, int]], device_name: str) -> None:
        self.peaks, self.device_name = peaks, device_name

    def lines(self) -> list[str]:
        out = [f"device: {self.device_name}"]
        for test, peak in sorted(self.peaks.items(), key=lambda kv: -kv[1]["peak_bytes"]):
            out.append(f"{peak['peak_bytes'] / 2**20:10.1f} MiB  {test}")
        if self.peaks:
            top = max(p["peak_bytes"] for p in self.peaks.values())
            out.append(f"{top / 2**20:10.1f} MiB  peak over {len(self.peaks)} GPU tests")
        return out

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.peaks:
            return
        terminalreporter.write_sep("-", "peak GPU memory (torch.cuda.max_memory_allocated)")
        for line in self.lines():
            terminalreporter.write_line(line)
        path = os.environ.get("GPU_REPORT", "").strip()
        if path:
            data = {"device": self.device_name, "torch": torch.__version__,
                    "cuda": torch.version.cuda, "tests": self.peaks,
                    "peak_bytes": max(p["peak_bytes"] for p in self.peaks.values())}
            tmp = Path(path).with_name(Path(path).name + ".part")
            tmp.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data, indent=1) + "\n")
            os.replace(tmp, path)
            terminalreporter.write_line(f"wrote {path}")


@pytest.fixture(autouse=True)
def gpu_peak_memory(request):
    """Peak GPU memory of every test marked ``gpu`` that runs on CUDA."""
    if not CUDA or request.node.get_closest_marker("gpu") is None:
        yield
        return
    manager = request.config.pluginmanager
    if manager.get_plugin(PLUGIN) is None:
        manager.register(PeakMemorySummary(PEAKS, torch.cuda.get_device_name()), PLUGIN)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    yield
    torch.cuda.synchronize()
    peak = int(torch.cuda.max_memory_allocated())
    PEAKS[request.node.nodeid] = {"peak_bytes": peak, "allocated_before_bytes": int(before)}
    request.node.user_properties.append(("peak_gpu_memory_bytes", peak))


@pytest.fixture(autouse=True, scope="module")
def highest_float32_precision():
    """Full float32 matmuls and cuDNN kernels (the bi-LSTM's; no TF32) while comparing CPU and
    CUDA numbers."""
    before, cudnn_before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.set_float32_matmul_precision(before)
    torch.backends.cudnn.allow_tf32 = cudnn_before


# ----------------------------------------------------------------------------- benchmark
def paper_train_seconds() -> dict[str, float]:
    with open(PAPER_CSV, newline="") as fh:
        return {r["model"]: float(r["mean"]) for r in csv.DictReader(fh)
                if r["table"] == "table11" and r["metric"] == "train_seconds"}


def run_benchmark(device: str, tmp_path: Path, monkeypatch, *, subset: bool) -> dict[str, Any]:
    """``python -m twirls.bench.gpu --device <device> --quick`` into ``tmp_path``; checks the
    JSON. ``subset``: MLP, GCN, TWIRLS* and GAT only (GAT torch-native, timed like the rest)."""
    import yaml

    from twirls.bench import gpu

    args = ["--device", device, "--quick", "--out", str(tmp_path / "gpu.json")]
    if subset:
        timing = read_all(REPO)["table11"]
        timing["models"] = {k: timing["models"][k] for k in ("MLP", "GCN", "TWIRLS*", "GAT")}
        (tmp_path / "params.yaml").write_text(yaml.safe_dump({"table11": timing}))
        args += ["--params", str(tmp_path / "params.yaml")]
    gpu.main(args)
    report = json.loads((tmp_path / "gpu.json").read_text())
    assert not list(tmp_path.glob("*.part"))
    assert report["quick"] is True and report["device"]["type"] == torch.device(device).type
    assert report["device"]["name"] and report["device"]["torch"] == torch.__version__

    rows = {r["model"]: r for r in report["epoch_time"]["models"]}
    paper = paper_train_seconds()
    for label, row in rows.items():
        p = row["paper_t4"]
        assert p["train_seconds"] == paper[label]
        assert p["train_to_mlp"] == pytest.approx(paper[label] / paper["MLP"])
        assert p["train_to_gcn"] == pytest.approx(paper[label] / paper["GCN"])
        assert p["test_to_gcn"] > 0 and p["parameters"] > 0
        assert row["status"] == "timed", row
        assert len(row["train_seconds_all"]) == report["settings"]["epochs"]
        for key in ("train", "test"):
            seconds = row[f"{key}_seconds"]
            assert seconds > 0
            assert row["ratios"][f"{key}_to_mlp"] == pytest.approx(
                seconds / rows["MLP"][f"{key}_seconds"])
            assert row["ratios"][f"{key}_to_gcn"] == pytest.approx(
                seconds / rows["GCN"][f"{key}_seconds"])
        if torch.device(device).type == "cuda":
            assert row["peak_memory_bytes"] > 0
    assert rows["MLP"]["ratios"]["train_to_mlp"] == pytest.approx(1.0)
    if subset:
        assert set(rows) == {"MLP", "GCN", "TWIRLS*", "GAT"}

    mt = report["mettack"]
    assert mt["engine"] == "torch" and mt["seconds_per_flip"] > 0
    assert len(mt["flipped_pairs"]) == report["settings"]["flips"]
    ref = mt["cpu_reference"]
    assert ref["engine"] == "scipy" and ref["leading_flips_agree"] == ref["flips_compared"]
    if torch.device(device).type == "cuda":
        assert mt["peak_memory_bytes"] > 0
    return report


# ============================================================================= GPU tests
@gpu_test
@pytest.mark.parametrize(("case", "name", "cfg"), CASES, ids=CASE_IDS)
def test_model_family_same_logits_on_cuda_then_trains(case, name, cfg):
    same_logits_then_train(name, cfg, "cuda")


@gpu_test
@pytest.mark.parametrize(("case", "name", "cfg"), SPARSE_CASES, ids=SPARSE_IDS)
def test_model_family_on_sparse_features_same_logits_on_cuda_then_trains(case, name, cfg):
    same_logits_then_train(name, cfg, "cuda", sparse=True)


@gpu_test
@pytest.mark.parametrize(("case", "name", "cfg"), CASES, ids=CASE_IDS)
def test_epoch_loop_waits_for_the_gpu_only_at_its_host_read(case, name, cfg):
    """At least one sync (the sync debug mode works), and every one at the host read."""
    assert set(epoch_loop_syncs(name, cfg, "cuda")) == {f"loop.py:{HOST_READ_LINE}"}


@gpu_test
@pytest.mark.parametrize("label", list(CWS_TAGGERS))
def test_table12_tagger_same_logits_on_cuda_then_trains(label):
    cws_same_logits_then_train(label, "cuda")


@gpu_test
@pytest.mark.parametrize("case", list(BATCHED_CASES))
def test_batched_seeds_equal_single_seeds_on_cuda_then_train(case):
    batched_same_as_single_then_trains(*BATCHED_CASES[case], "cuda")


@gpu_test
def test_run_experiment_trains_on_the_gpu_that_auto_picks(monkeypatch):
    run_experiment_on("auto", "cuda", monkeypatch)


@gpu_test
def test_fast_mettack_makes_the_cpus_first_10_flips_on_cuda(attack_task):
    same_flips(attack_task, "cuda", flips=10)


@gpu_test
@pytest.mark.parametrize("lambda_", [0.0, 0.5])
def test_fast_mettack_meta_gradient_on_cuda_equals_the_cpus(attack_task, lambda_):
    same_meta_gradient(attack_task, "cuda", lambda_)


@gpu_test
def test_attack_stage_makes_the_cpus_flips_with_device_cuda(tmp_path):
    attack_stage_on("cuda", tmp_path)


@gpu_test
def test_first_argmax_keeps_the_first_index_on_cuda():
    first_argmax_ties("cuda")


@gpu_test
def test_wide_sddmm_on_cuda_equals_the_cpus():
    wide_sddmm_matches_the_cpus("cuda")


@gpu_test
def test_gcn_svd_low_rank_adjacency_on_cuda_equals_the_cpus():
    low_rank_adjacency_matches_the_cpus("cuda")


@gpu_test
def test_benchmark_runs_on_cuda(tmp_path, monkeypatch):
    report = run_benchmark("cuda", tmp_path, monkeypatch, subset=False)
    assert report["device"]["name"] == torch.cuda.get_device_name()


# ============================================================================= on the CPU
def test_every_model_family_has_a_gpu_case():
    assert {name for _, name, _ in CASES} == set(MODELS)


@pytest.mark.parametrize(("case", "name", "cfg"), CASES, ids=CASE_IDS)
def test_model_family_check_runs_on_the_cpu(case, name, cfg):
    same_logits_then_train(name, cfg, "cpu", epochs=2)


@pytest.mark.parametrize(("case", "name", "cfg"), SPARSE_CASES, ids=SPARSE_IDS)
def test_model_family_sparse_check_runs_on_the_cpu(case, name, cfg):
    same_logits_then_train(name, cfg, "cpu", epochs=2, sparse=True)


@pytest.mark.parametrize(("case", "name", "cfg"), CASES, ids=CASE_IDS)
def test_epoch_loop_sync_check_runs_on_the_cpu(case, name, cfg):
    assert epoch_loop_syncs(name, cfg, "cpu") == []


@pytest.mark.parametrize("label", list(CWS_TAGGERS))
def test_table12_tagger_check_runs_on_the_cpu(label):
    cws_same_logits_then_train(label, "cpu", epochs=2)


def test_table12_taggers_are_those_of_params():
    models = read_all(REPO)["table12"]["models"]
    assert {m["model"] for m in models.values()} == {m for m, _ in CWS_TAGGERS.values()}


@pytest.mark.parametrize("case", list(BATCHED_CASES))
def test_batched_seeds_check_runs_on_the_cpu(case):
    batched_same_as_single_then_trains(*BATCHED_CASES[case], "cpu")


def test_run_experiment_check_runs_on_the_cpu(monkeypatch):
    run_experiment_on("cpu", "cpu", monkeypatch)


def test_wide_sddmm_check_runs_on_the_cpu():
    wide_sddmm_matches_the_cpus("cpu")


def test_low_rank_adjacency_check_runs_on_the_cpu():
    low_rank_adjacency_matches_the_cpus("cpu")


def test_mettack_device_path_runs_on_the_cpu(attack_task, tmp_path):
    same_flips(attack_task, "cpu", flips=10)
    attack_stage_on("cpu", tmp_path)
    same_meta_gradient(attack_task, "cpu", 0.5)
    first_argmax_ties("cpu")


def test_peak_memory_summary_is_printed_and_written(tmp_path, monkeypatch):
    class Reporter:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def write_sep(self, sep: str, title: str) -> None:
            self.lines.append(title)

        def write_line(self, line: str) -> None:
            self.lines.append(line)

    report = tmp_path / "out" / "gpu-tests.json"
    monkeypatch.setenv("GPU_REPORT", str(report))
    peaks = {"tests/test_gpu.py::a": {"peak_bytes": 3 * 2**20, "allocated_before_bytes": 0},
             "tests/test_gpu.py::b": {"peak_bytes": 5 * 2**20, "allocated_before_bytes": 1}}
    reporter = Reporter()
    PeakMemorySummary(peaks, "Some GPU").pytest_terminal_summary(reporter)
    text = "\n".join(reporter.lines)
    assert "peak GPU memory" in text and "device: Some GPU" in text
    assert text.index("::b") < text.index("::a")  # largest first
    assert "5.0 MiB  peak over 2 GPU tests" in text
    data = json.loads(report.read_text())
    assert data["device"] == "Some GPU" and data["peak_bytes"] == 5 * 2**20
    assert data["tests"] == peaks
    empty = Reporter()
    PeakMemorySummary({}, "Some GPU").pytest_terminal_summary(empty)
    assert empty.lines == []


def test_benchmark_quick_on_the_cpu(tmp_path, monkeypatch):
    report = run_benchmark("cpu", tmp_path, monkeypatch, subset=True)
    assert report["epoch_time"]["graph"]["nodes"] == 1_000
    assert report["mettack"]["dataset"].startswith("random graph")


def test_benchmark_attack_graph_is_cora_or_a_random_graph_of_its_sizes(monkeypatch, tmp_path):
    from twirls.bench import gpu

    monkeypatch.setattr(gpu, "_cora_candidates", lambda raw: [tmp_path / "cora.npz"])
    adj, x, labels, train, unlabeled, desc = gpu.attack_graph()
    assert desc["dataset"] == "random graph with nettack-Cora's sizes"
    assert "not found" in desc["source"] and str(tmp_path) in desc["source"]
    assert (desc["nodes"], desc["edges"], desc["features"]) == (2_485, 5_069, 1_433)
    assert adj.shape == (2_485, 2_485) and abs(adj - adj.T).sum() == 0
    assert set(np.unique(x.data)) == {1.0} and len(train) + len(unlabeled) <= 2_485
    monkeypatch.undo()
    if not any(p.is_file() for p in gpu._cora_candidates(None)):
        pytest.skip("nettack-Cora's cora.npz is not on this machine")
    adj, x, labels, train, unlabeled, desc = gpu.attack_graph()
    assert desc["dataset"] == "nettack-cora"
    assert (desc["nodes"], desc["edges"], desc["features"]) == (2_485, 5_069, 1_433)
