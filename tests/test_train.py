"""The training protocol: model selection, determinism, multi-label metrics, device choice."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score

from twirls.data.graph import Split, undirected_graph
from twirls.models import GraphOps, build_model
from twirls.train import (
    TrainConfig,
    accuracy,
    evaluate,
    multilabel_f1,
    pick_device,
    run_seeds,
    train_run,
)
from twirls.train.device import cuda_status


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
    ops = GraphOps.from_dgl(undirected_graph(src[keep], dst[keep], n))
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
        with pytest.raises(RuntimeError, match="'cuda' was requested but .*Set `device: cpu`"):
            pick_device("cuda")
        assert reason
