"""``twirls.bench.floor``: the products a run's epoch multiplies, counted as they run, and the
floor they put on a cell's time."""

from __future__ import annotations

import json

import pytest
import torch

from twirls.bench import floor
from twirls.bench.floor import (
    Products,
    cell_floor,
    epoch_products,
    needed_products,
    needed_rows_forward,
    product_flops,
    reach_sets,
)

from fixtures import toy_data


def test_products_counts_each_product_once_dense_and_sparse():
    a, b = torch.randn(5, 3), torch.randn(3, 4)
    s = (torch.randn(5, 3) * (torch.rand(5, 3) < 0.4)).to_sparse_csr()
    batch = torch.randn(2, 5, 3), torch.randn(2, 3, 4)
    with Products() as counted:
        a @ b
        torch.addmm(torch.zeros(5, 4), a, b)
        torch.bmm(*batch)
        torch.baddbmm(torch.zeros(2, 5, 4), *batch)
        s @ b
    assert counted.dense == 2 * (2 * 5 * 3 * 4) + 2 * (2 * 2 * 5 * 3 * 4)
    assert counted.sparse == 2 * s._nnz() * 4
    assert counted.shapes == {(5, 3, 4): counted.dense}
    assert product_flops(b.t(), s.t().to_sparse_csr()) == (2 * s._nnz() * 4, True)


def test_a_gcnii_epochs_products_are_its_formula():
    """One seed's epoch of GCNII (L layers of width h, n nodes, c classes): the training step
    multiplies 6·L·n·h² + 6·n·h·c dense FLOPs (forward, the states' and the weights' gradients),
    the evaluation forward 2·L·n·h² + 2·n·h·c; the evaluation's sparse products are the L graph
    products and the bag-of-words input layer, 2·nnz·h each."""
    from twirls.models.baselines.gcnii import residual_adjacency
    from twirls.train.experiment import run_inputs

    data = toy_data()
    layers, hidden, alpha = 3, 8, 0.1
    exp = {"dataset": "toy", "model": "gcnii", "split": "a", "seeds": 1,
           "model_cfg": {"layers": layers, "hidden": hidden, "alpha": alpha, "lam": 0.5,
                         "dropout": 0.6},
           "train_cfg": {"epochs": 2, "lr": 0.01, "masks": "fast"}}
    inp = run_inputs(exp, data, torch.device("cpu"), progress=False)
    counted = epoch_products(inp, data, data.splits["a"])
    n, c = data.labels.numel(), int(data.labels.max()) + 1
    assert counted["train_step"].dense == 6 * layers * n * hidden**2 + 6 * n * hidden * c
    assert counted["eval"].dense == 2 * layers * n * hidden**2 + 2 * n * hidden * c
    graph = residual_adjacency(inp.ops, alpha).csr._nnz()
    words = int((data.features != 0).sum())
    assert counted["eval"].sparse == 2 * layers * graph * hidden + 2 * words * hidden
    # the training step's graph products run forward and back; dropout thins the input layer's
    assert 4 * layers * graph * hidden < counted["train_step"].sparse <= (
        4 * layers * graph * hidden + 4 * words * hidden)


def toy_gcnii(dropout: float = 0.6):
    from twirls.train.experiment import run_inputs

    data = toy_data()
    exp = {"dataset": "toy", "model": "gcnii", "split": "a", "seeds": 1,
           "model_cfg": {"layers": 3, "hidden": 8, "alpha": 0.1, "lam": 0.5,
                         "dropout": dropout},
           "train_cfg": {"epochs": 2, "lr": 0.01, "masks": "fast"}}
    return data, run_inputs(exp, data, torch.device("cpu"), progress=False)


def gcnii_matrix(inp):
    import scipy.sparse as sp

    from twirls.models.baselines.gcnii import residual_adjacency

    csr = residual_adjacency(inp.ops, 0.1).csr
    return sp.csr_matrix((csr.values().numpy(), csr.col_indices().numpy(),
                          csr.crow_indices().numpy()), shape=tuple(csr.shape))


def test_gcnii_on_the_rows_that_matter_is_the_model_on_every_node():
    """Layer by layer on the rows within reach of the targets, GCNII gives the targets' logits
    of the whole model, and a loss on them the same gradients of every weight."""
    data, inp = toy_gcnii(dropout=0.0)
    torch.manual_seed(0)
    net = inp.build()
    targets = data.splits["a"].train.sort().values
    matrix = gcnii_matrix(inp)
    assert len(reach_sets(matrix, targets.numpy(), 3)[-1]) < data.labels.numel()  # rows left out

    def grads(logits):
        net.zero_grad()
        torch.nn.functional.cross_entropy(logits, data.labels[targets]).backward()
        return [p.grad.clone() for p in net.parameters()]

    whole = net(inp.ops, inp.x)[targets]
    part = needed_rows_forward(net, matrix, inp.x, targets.numpy(), training=True)
    torch.testing.assert_close(part, whole, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads(part), grads(net(inp.ops, inp.x)[targets]), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_the_rows_that_matter_multiply_gcniis_formula_on_them():
    """The training step multiplies 6·h²·Σ_j |R_j| + 6·h·c·|T| dense FLOPs (R_j: the nodes
    within j steps of the training nodes T, j < L), the evaluation 2·h²·Σ_j |R_j(V)| +
    2·h·c·|V|; with every node a target that is the stage's own count."""
    from twirls.data.graph import Split

    data, inp = toy_gcnii()
    split, (layers, hidden) = data.splits["a"], (3, 8)
    c, matrix = int(data.labels.max()) + 1, gcnii_matrix(inp)
    needed = needed_products(inp, data, split)
    for part, nodes, factor in (("train_step", split.train, 6), ("eval", split.val, 2),
                                ("test_once", split.test, 2)):
        sizes = [len(r) for r in reach_sets(matrix, nodes.numpy(), layers)[:layers]]
        assert needed[part].dense == factor * (hidden**2 * sum(sizes)
                                               + hidden * c * nodes.numel())
    every = torch.arange(data.labels.numel())
    whole = needed_products(inp, data, Split(every, every, every))
    stage = epoch_products(inp, data, split)
    assert whole["train_step"].dense == stage["train_step"].dense
    assert whole["eval"].dense == stage["eval"].dense
    assert whole["eval"].sparse == stage["eval"].sparse


def test_a_cells_floor_is_its_flops_over_the_peak():
    counted = {"train_step": Products(), "eval": Products()}
    counted["train_step"].dense, counted["train_step"].sparse = 3_000, 100
    counted["eval"].dense = 1_000
    needed = {part: Products() for part in ("train_step", "eval", "test_once")}
    needed["train_step"].dense, needed["eval"].dense, needed["test_once"].dense = 2_000, 500, 700
    record = cell_floor("x", counted, needed, [100, 200, 300], seeds=10, peak_gflops=2e-6)
    assert record["flops"] == (2_500 * 200 + 700) * 10
    assert record["floor_s"] == pytest.approx((2_500 * 200 + 700) * 10 / 2e3, rel=1e-3)
    assert record["all_rows_flops"] == 4_100 * 200 * 10
    assert record["all_rows_floor_s"] == pytest.approx(4_100 * 200 * 10 / 2e3, rel=1e-3)
    assert (record["committed_runs"], record["epochs_mean"], record["epochs_sem"]) == (
        3, 200.0, 57.7)


def test_the_peak_is_timed_on_each_of_mkls_code_paths():
    """One child process per code path this machine has (the generic one, and the Intel one
    where ``make mkl-intel-path`` built its library), each naming the kernels it ran."""
    from twirls.bench.mkl_intel_path import LIBRARY

    kernels = floor.peak_by_kernels([(64, 32, 16)], threads=1, seconds=0.01)
    assert len(kernels) == (2 if LIBRARY.is_file() and "generic" in kernels else 1)
    assert all(set(rates) == {"64x32x16"} and rates["64x32x16"] > 0
               for rates in kernels.values())


def test_unknown_configurations_and_missing_results_are_one_message(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        floor.main(["--configs", "cora-nothing"])
    assert exc.value.code == 2 and "cora-nothing" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        floor.main(["--configs", "cora-gcnii", "--results", str(tmp_path),
                    "--out", str(tmp_path / "floor.json")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "cora-gcnii.csv" in err and "Traceback" not in err
    (tmp_path / "cora-gcnii.csv").write_text("table,dataset,seed,value,epochs\n")  # no runs
    with pytest.raises(SystemExit) as exc:
        floor.main(["--configs", "cora-gcnii", "--results", str(tmp_path),
                    "--out", str(tmp_path / "floor.json")])
    assert exc.value.code == 2 and "no runs" in capsys.readouterr().err
    (tmp_path / "cora-gcnii.csv").write_text("table,dataset,seed,value,epochs\nt,cora,0,1,300\n")
    with pytest.raises(SystemExit) as exc:  # runs, but no data
        floor.main(["--configs", "cora-gcnii", "--results", str(tmp_path), "--raw",
                    str(tmp_path / "raw"), "--out", str(tmp_path / "floor.json")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "fetch@cora" in err and "Traceback" not in err
    assert not (tmp_path / "floor.json").exists()


def test_the_committed_floor_holds_its_own_arithmetic():
    from pathlib import Path

    out = json.loads((Path(__file__).parents[1] / "reports/benchmarks/floor.json").read_text())
    assert out["peak_gflops"] == max(out["peak_gflops_by_shape"].values())
    for shape, rate in out["peak_gflops_by_shape"].items():  # the fastest code path's
        assert rate == max(rates[shape] for rates in out["peak_gflops_by_kernels"].values())
    for kind, seconds in out["reference_s"].items():  # the best calibration of the run
        assert seconds == min(run[kind] for run in out["reference_s_runs"])
    for r in out["records"]:
        per_epoch = sum(p["dense"] + p["sparse"] for part, p in
                        r["needed_flops_per_seed_epoch"].items() if part != "test_once")
        once = sum(r["needed_flops_per_seed_epoch"]["test_once"].values())
        assert r["flops"] == pytest.approx((per_epoch * r["epochs_mean"] + once) * r["seeds"],
                                           rel=1e-3)  # epochs_mean is rounded
        assert r["floor_s"] == pytest.approx(r["flops"] / 1e9 / out["peak_gflops"], rel=1e-3)
        assert r["all_rows_floor_s"] == pytest.approx(
            r["all_rows_flops"] / 1e9 / out["peak_gflops"], rel=1e-3)
        assert r["flops"] < r["all_rows_flops"]
    for key in ("floor_s", "all_rows_floor_s"):
        assert out[key] == pytest.approx(sum(r[key] for r in out["records"]), abs=0.2)
