"""Runs in worker processes (``jobs``): the same results, bit for bit and in the same order, as
one process running them one after another; errors surface; CUDA and bad values are handled."""

from __future__ import annotations

import os

import pytest
import scipy.sparse as sp
import torch

from twirls.train.cpu import configure_cpu, flushes_denormals
from twirls.train.experiment import run_experiment
from twirls.train.parallel import available_cores, resolve_jobs, run_all

from fixtures import toy_data
from requires import needs_deeprobust


def _square(i: int) -> int:
    return i * i


def _fail() -> int:
    raise ValueError("run 3 failed")


def test_run_all_keeps_order_and_uses_other_processes():
    runs = [lambda i=i: (_square(i), os.getpid()) for i in range(6)]
    out = run_all(runs, jobs=2)
    assert [v for v, _ in out] == [i * i for i in range(6)]
    assert os.getpid() not in {pid for _, pid in out}


def test_an_error_in_a_worker_is_raised_in_the_stage():
    with pytest.raises(ValueError, match="run 3 failed"):
        run_all([lambda: 1, lambda: 2, _fail, lambda: 4], jobs=2)


def test_workers_inherit_the_stage_flushing_denormals():
    # a stage flushes denormals (the late epochs of long trainings stay fast); its forked
    # workers must too, or the parallel runs would be the slow ones
    before = flushes_denormals()  # a stage run earlier in this process may have set it
    try:
        torch.set_flush_denormal(False)
        assert not flushes_denormals()  # torch's default
        configure_cpu()
        assert flushes_denormals()
        assert run_all([flushes_denormals] * 4, jobs=2) == [True] * 4
    finally:
        torch.set_flush_denormal(before)
    assert flushes_denormals() == before


def test_resolve_jobs():
    assert resolve_jobs("auto", torch.device("cpu")) == available_cores()
    assert resolve_jobs(3, torch.device("cpu")) == 3
    assert resolve_jobs(4, torch.device("cuda")) == 1  # CUDA runs stay in the stage's process
    for bad in (0, "two", 1.5, True):
        with pytest.raises(ValueError, match="jobs"):
            resolve_jobs(bad, torch.device("cpu"))


@pytest.mark.parametrize("model, model_cfg", [
    ("twirls", {"steps": 4, "lam": 1.0, "alpha": 1.0, "mlp_before": 1, "mlp_after": 0,
                "input_dropout": 0.5, "attention": {"p": 0.1, "tau": 0.2, "T": 2.0}}),
    ("gcn", {"layers": 2, "hidden": 16, "dropout": 0.5}),
])
def test_parallel_seeds_equal_sequential_bit_for_bit(model, model_cfg):
    torch.set_num_threads(1)
    data = toy_data()
    exp = {"dataset": "toy", "model": model, "model_cfg": model_cfg,
           "train_cfg": {"epochs": 15, "lr": 0.05, "weight_decay": 5.0e-4}}
    one = run_experiment(exp, data, 3, torch.device("cpu"), progress=False, jobs=1)
    two = run_experiment(exp, data, 3, torch.device("cpu"), progress=False, jobs=2)
    assert len(one.runs) == len(two.runs) == 6  # 3 seeds x 2 splits, in the same order
    for a, b in zip(one.runs, two.runs, strict=True):
        assert (a.seed, a.best_epoch, a.test, a.val, a.train) == \
            (b.seed, b.best_epoch, b.test, b.val, b.train)
        assert a.history == b.history  # every epoch's loss and scores, exactly
    assert len({r.test for r in one.runs}) > 1  # the seeds differ: the comparison means something


@needs_deeprobust
def test_parallel_defense_seeds_equal_sequential():
    from twirls.stages.attacked import entry_runs

    torch.set_num_threads(1)
    data = toy_data()
    coo = sp.coo_matrix((torch.ones(data.graph.num_edges()).numpy(),
                         tuple(t.numpy() for t in data.graph.edges())),
                        shape=(data.num_nodes,) * 2)
    data.meta.update(adj=coo.tocsr(), features_sparse=sp.csr_matrix(data.features.numpy()))
    data.splits = {"attack": data.splits["a"]}
    exp = {"defense": "gcn-jaccard", "model_cfg": {}, "seeds": 3}
    one = run_all(entry_runs(exp, data, torch.device("cpu")), jobs=1)
    two = run_all(entry_runs(exp, data, torch.device("cpu")), jobs=2)
    assert [(r.seed, r.val, r.test) for r in one] == [(r.seed, r.val, r.test) for r in two]


def test_pool_shuts_down_under_an_inherited_sigterm_handler_that_does_not_exit():
    """The rehearsal installs such a handler while it waits on a stage, and forked workers
    inherit handlers: run_all must still return (and raise a run's error) with one installed.
    In a subprocess with a timeout, so a regression fails instead of hanging the suite."""
    import subprocess
    import sys

    code = ("import signal\nfrom twirls.train.parallel import run_all\n"
            "signal.signal(signal.SIGTERM, lambda *_: None)\n"
            "print(run_all([lambda: 1, lambda: 2, lambda: 3], jobs=2))\n"
            "def boom():\n    raise ValueError('boom')\n"
            "try:\n    run_all([lambda: 1, boom, lambda: 3], jobs=2)\nexcept ValueError:\n"
            "    print('raised')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[1,", "2,", "3]", "raised"]
