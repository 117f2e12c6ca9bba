"""The training protocol: model selection, determinism, multi-label metrics, device choice."""

from __future__ import annotations

import statistics
import sys

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score

from twirls.data.graph import Split, undirected_graph
from twirls.models import GraphOps, build_model
from twirls.train.device import cuda_status, pick_device
from twirls.train.loop import TrainConfig, evaluate, run_seeds, train_run
from twirls.train.metrics import accuracy, multilabel_f1


def easy_dataset(seed: int = 0, n: int = 150, classes: int = 3, d: int = 16):
    """Homophilous graph, noisy class-mean features: every sensible model should learn it."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=gen)
    means = 1.5 * torch.randn(classes, d, generator=gen)
    x = means[labels] + 2.0 * torch.randn(n, d, generator=gen)
    src = torch.randint(0, n, (8 * n,), generator=gen)
    dst = torch.randint(0, n, (8 * n,), generator=gen)
    same = labels[src] == labels[dst]
    keep = same | (torch.rand(8 * n, generator=gen) < 0.1)
    ops = GraphOps.from_graph(undirected_graph(src[keep], dst[keep], n))
    perm = torch.randperm(n, generator=gen)
    split = Split(perm[:30], perm[30:60], perm[60:])
    return ops, x, labels, split


TWIRLS_CFG = {"steps": 4, "lam": 1.0, "alpha": 1.0, "mlp_before": 2, "hidden": 16,
              "dropout": 0.5, "input_dropout": 0.2,
              "attention": {"p": 0.5, "tau": 0.1, "T": 20.0}}


@pytest.mark.parametrize("name,cfg", [("twirls", TWIRLS_CFG), ("gcn", {"hidden": 16})])
def test_training_learns_an_easy_task(name, cfg):
    ops, x, labels, split = easy_dataset()
    result = run_seeds(lambda: build_model(name, cfg, 16, 3), ops, x, labels, split,
                       TrainConfig(epochs=60, lr=0.02, weight_decay=5e-4), seeds=[0])
    run = result.runs[0]
    assert run.test > 0.85 and run.train >= 0.9
    assert run.history[0]["loss"] > run.history[-1]["loss"]


def test_same_seed_gives_bit_identical_results():
    ops, x, labels, split = easy_dataset(1)
    cfg = TrainConfig(epochs=15, lr=0.05, weight_decay=5e-4)

    def runs(seed):
        return run_seeds(lambda: build_model("twirls", TWIRLS_CFG, 16, 3), ops, x, labels,
                         split, cfg, seeds=[seed]).runs[0]

    a, b, c = runs(7), runs(7), runs(8)
    assert a.history == b.history and (a.best_epoch, a.test) == (b.best_epoch, b.test)
    assert [h["loss"] for h in a.history] != [h["loss"] for h in c.history]


def test_selection_by_best_validation_with_ties_to_the_later_epoch():
    ops, x, labels, split = easy_dataset(2)
    torch.manual_seed(0)
    model = build_model("gcn", {"hidden": 8, "dropout": 0.8}, 16, 3)
    run = train_run(model, ops, x, labels, split, TrainConfig(epochs=40, lr=0.05))
    vals = [h["val"] for h in run.history]
    best = max(vals)
    assert run.best_epoch == max(i for i, v in enumerate(vals) if v == best)
    chosen = run.history[run.best_epoch]
    assert (run.train, run.val, run.test) == (chosen["train"], chosen["val"], chosen["test"])
    # the reported scores are those of an eval-mode forward at that epoch
    assert run.history[-1]["test"] == evaluate(model, ops, x, labels, split)["test"]


def test_empty_validation_reports_the_last_epoch_and_patience_stops_early():
    ops, x, labels, split = easy_dataset(3)
    no_val = Split(split.train, split.val[:0], split.test)
    torch.manual_seed(0)
    run = train_run(build_model("mlp", {}, 16, 3), ops, x, labels, no_val,
                    TrainConfig(epochs=12, lr=0.05))
    assert run.best_epoch == 11 and run.test == run.history[-1]["test"]
    torch.manual_seed(0)
    run = train_run(build_model("mlp", {}, 16, 3), ops, x, labels, split,
                    TrainConfig(epochs=500, lr=0.05, patience=5))
    assert len(run.history) == run.best_epoch + 6 < 500


@pytest.mark.parametrize("patience", [20, 150])  # 20 stops early, 150 lets the lr decay
def test_geom_gcn_selection_follows_the_authors_training_loop(patience):
    """``selection: geom-gcn`` against train_GeomGCN.py's loop written out by hand: the same
    epochs, learning rates, stopping epoch and last-epoch scores."""
    import copy

    import torch.nn.functional as F

    ops, x, labels, split = easy_dataset(4)
    torch.manual_seed(0)
    model = build_model("gcn", {"hidden": 8, "dropout": 0.8}, 16, 3)
    theirs = copy.deepcopy(model)
    cfg = TrainConfig(epochs=600, lr=0.05, patience=patience, selection="geom-gcn")
    torch.manual_seed(1)
    run = train_run(model, ops, x, labels, split, cfg)

    torch.manual_seed(1)
    opt = torch.optim.Adam(theirs.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.8, patience=50)
    vacc_mx, vlss_mn, curr_step, lrs = 0.0, float("inf"), 0, []
    for _ in range(600):
        theirs.train()
        loss = F.nll_loss(F.log_softmax(theirs(ops, x), 1)[split.train], labels[split.train])
        opt.zero_grad()
        loss.backward()
        opt.step()
        theirs.eval()
        with torch.no_grad():
            logp = F.log_softmax(theirs(ops, x), 1)
        val_loss = F.nll_loss(logp[split.val], labels[split.val]).item()
        val_acc = (logp[split.val].argmax(1) == labels[split.val]).sum().item() / len(split.val)
        sched.step(val_loss)
        lrs.append(opt.param_groups[0]["lr"])
        if val_acc >= vacc_mx or val_loss <= vlss_mn:
            vacc_mx, vlss_mn, curr_step = max(val_acc, vacc_mx), min(val_loss, vlss_mn), 0
        else:
            curr_step += 1
            if curr_step >= patience:
                break
    test_acc = (logp[split.test].argmax(1) == labels[split.test]).sum().item() / len(split.test)
    last = len(lrs) - 1
    assert run.best_epoch == last == len(run.history) - 1  # stopped at the same epoch: the last
    assert run.test == test_acc and run.val == val_acc
    assert run.history[-1]["val_loss"] == pytest.approx(val_loss, rel=1e-6)
    assert "val_loss" not in run.extra
    if patience == 20:
        assert last < 599  # the stopping rule fired
    else:
        assert min(lrs) < 0.05  # the learning rate decayed (equal losses: equal decays)
    with pytest.raises(ValueError, match="selection 'best-vall' is not one of best-val"):
        TrainConfig(selection="best-vall")


def test_multilabel_training_and_ignn_f1():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(60, 6, generator=gen)
    truth = (torch.rand(60, 6, generator=gen) < 0.3).float()
    truth[truth.sum(1) == 0, 0] = 1.0
    micro, macro = multilabel_f1(logits, truth)
    # IGNN's Evaluation: each node predicts its k top-scored classes, k = its number of labels
    pred = np.zeros((60, 6), dtype=int)
    for i in range(60):
        k = int(truth[i].sum())
        pred[i, np.argsort(logits[i].numpy())[-k:]] = 1
    assert micro == pytest.approx(f1_score(truth.numpy(), pred, average="micro"))
    assert macro == pytest.approx(f1_score(truth.numpy(), pred, average="macro",
                                           zero_division=0))
    # training with (n, C) labels uses BCE and reports micro-F1 (+ macro in extra)
    ops, x, labels, split = easy_dataset(4)
    multi = torch.nn.functional.one_hot(labels, 3).float()
    torch.manual_seed(0)
    run = train_run(build_model("gcn", {"hidden": 16}, 16, 3), ops, x, multi, split,
                    TrainConfig(epochs=40, lr=0.05))
    assert run.test > 0.8 and "test_macro_f1" in run.extra
    # with one label per node, micro-F1 of the top-1 prediction is the accuracy
    one = torch.nn.functional.one_hot(truth.argmax(1), 6).float()
    assert multilabel_f1(logits, one)[0] == pytest.approx(accuracy(logits, truth.argmax(1)))


def test_accuracy_is_the_exact_fraction_and_nan_for_no_rows():
    labels = torch.zeros(1000, dtype=torch.int64)
    logits = torch.zeros(1000, 3)
    logits[:715, 0] = 1.0  # 715 right, 285 predicted as class 1
    logits[715:, 1] = 1.0
    assert accuracy(logits, labels) == 0.715  # float32's mean would give 0.7149999737739563
    assert accuracy(logits[:3], labels[:3]) == 1.0
    assert accuracy(logits[:0], labels[:0]) != accuracy(logits[:0], labels[:0])  # nan


def test_seeds_summary_is_mean_and_population_std():
    ops, x, labels, split = easy_dataset(5)
    res = run_seeds(lambda: build_model("sgc", {"steps": 2}, 16, 3), ops, x, labels, split,
                    TrainConfig(epochs=10, lr=0.1), seeds=[0, 1, 2])
    tests = [r.test for r in res.runs]
    assert res.mean() == pytest.approx(statistics.fmean(tests))
    assert res.std() == pytest.approx(float(np.std(tests)))
    summary = res.summary()
    assert summary["runs"] == 3 and summary["test_mean"] == pytest.approx(res.mean())


def test_train_config_and_device_errors():
    assert TrainConfig.from_config({"epochs": 3, "lr": 0.1}) == TrainConfig(epochs=3, lr=0.1)
    with pytest.raises(ValueError, match="unknown key 'weightdecay'"):
        TrainConfig.from_config({"weightdecay": 0.1})
    assert pick_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="device must be one of"):
        pick_device("gpu")
    usable, reason = cuda_status()
    assert pick_device("auto").type == ("cuda" if usable else "cpu")
    if not usable:
        with pytest.raises(RuntimeError, match="'cuda' was requested but .*`device: cpu`"):
            pick_device("cuda")
        assert reason


def test_auto_picks_cuda_for_every_model_family(monkeypatch, capsys):
    """A GPU torch supports: every stage goes to CUDA (GAT and GraphSAGE too, torch-native),
    silently, with or without DGL installed."""
    from twirls.train import device as dev

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(dev, "gpu_arch_status", lambda: (True, ""))  # a GPU torch supports
    monkeypatch.setitem(sys.modules, "dgl", None)  # `import dgl` raises ImportError
    assert pick_device("auto", who="train@texas-gat") == torch.device("cuda")
    assert pick_device("cuda", who="train@texas-graphsage") == torch.device("cuda")
    assert pick_device("cuda:0") == torch.device("cuda:0")
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("capability", "arches", "ok"), [
    ((8, 6), ["sm_50", "sm_80", "sm_90"], True),  # sm_80 binaries run on sm_86
    ((9, 0), ["sm_80", "sm_90"], True),
    ((12, 0), ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"], False),  # 2.2.1
    ((12, 0), ["sm_80", "sm_90", "compute_90"], True),  # PTX, compiled when first loaded
    ((7, 0), ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"], False),  # V100, 2.15
    ((8, 0), ["sm_86"], False),  # a newer minor's binary does not run on an older one
    ((8, 0), [], True),
])
def test_kernels_for_a_gpu_follow_cudas_compatibility_rules(capability, arches, ok):
    from twirls.train.device import has_kernels_for

    assert has_kernels_for(capability, arches) is ok


def test_the_installed_torch_runs_on_its_own_architectures_and_not_past_them():
    """On the build's own list (torch 2.2.1 has sm_50 ... sm_90, no PTX; 2.15 sm_75 ... sm_120)."""
    from twirls.train.device import has_kernels_for

    flags = getattr(torch._C, "_cuda_getArchFlags", lambda: "")().split()
    if not flags:
        pytest.skip("this torch is built without CUDA")
    sms = [(int(f[3:-1]), int(f[-1])) for f in flags if f.startswith("sm_")]
    assert all(has_kernels_for(cap, flags) for cap in sms)
    beyond = (max(sms)[0] + 1, 0)
    assert has_kernels_for(beyond, flags) == any(f.startswith("compute_") for f in flags)


def test_a_gpu_this_torch_has_no_kernels_for_counts_as_no_gpu(monkeypatch, capsys):
    """The reference stack's torch 2.2.1 on a Blackwell GPU: `auto` uses the CPU with one line
    saying why, `cuda` is one clear error, instead of a failure at the first kernel."""
    from twirls.train import device as dev

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (12, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA RTX PRO 6000")
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_80", "sm_86", "sm_90"])
    dev.gpu_arch_status.cache_clear()
    try:
        assert pick_device("auto", who="train@cora-gcn") == torch.device("cpu")
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("train@cora-gcn: runs on the CPU")
        assert "has no kernels for the GPU NVIDIA RTX PRO 6000 (compute capability 12.0" in err
        assert "A torch build with kernels for this GPU fixes this" in err
        with pytest.raises(RuntimeError, match="'cuda' was requested but this torch .* no kernels"):
            pick_device("cuda", who="train@cora-gcn")
    finally:
        dev.gpu_arch_status.cache_clear()


def test_an_unknown_model_is_one_named_error():
    from twirls.train.experiment import check_model

    check_model({"model": "gat"}, "table3@texas-gat")
    with pytest.raises(ValueError, match="table3@x: unknown model 'twirlz'; known: "):
        check_model({"model": "twirlz"}, "table3@x")


def test_stage_device_error_is_one_line():
    from twirls.train.device import stage_device

    with pytest.raises(SystemExit, match="^error: device must be one of"):
        stage_device("gpu")


@pytest.mark.parametrize("multilabel", [False, True])
def test_reading_scores_in_chunks_changes_nothing(multilabel):
    """On CUDA the loop reads scores every HOST_READ_EVERY epochs; replaying them must select
    the same epoch, scores, history and early stop as reading every epoch."""
    n = 40
    gen = torch.Generator().manual_seed(3)
    src, dst = torch.randint(0, n, (90,), generator=gen), torch.randint(0, n, (90,), generator=gen)
    keep = src != dst
    ops = GraphOps.from_graph(undirected_graph(src[keep], dst[keep], n))
    x = torch.randn(n, 5, generator=gen)
    labels = (torch.rand(n, 4, generator=gen) < 0.4).float() if multilabel else torch.arange(n) % 3
    split = Split(torch.arange(0, 20), torch.arange(20, 30), torch.arange(30, 40))
    for cfg in (TrainConfig(epochs=23, lr=0.1), TrainConfig(epochs=60, lr=0.2, patience=5)):
        runs = []
        for read_every in (1, 7):
            torch.manual_seed(0)
            model = _GraphFree(torch.nn.Linear(5, 4 if multilabel else 3))
            runs.append(train_run(model, ops, x, labels, split, cfg, seed=1,
                                  read_every=read_every))
        a, b = runs
        assert (a.best_epoch, a.train, a.val, a.test, a.extra) == \
            (b.best_epoch, b.train, b.val, b.test, b.extra)
        assert a.history == b.history
    assert len(a.history) < 60  # the patience run stopped early


class _GraphFree(torch.nn.Module):
    """A model with the ``forward(ops, x)`` interface that ignores the graph."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.Dropout(0.3), inner)

    def forward(self, ops, x):
        return self.inner(x)
