"""The least time Table 2's GCNII cells can take on this machine: the products a seed's epoch
has to multiply, counted as they run, times the epochs the cell's committed runs took, at this
machine's peak rate of dense products; written to ``reports/benchmarks/floor.json``.

``python -m twirls.bench.floor [--configs cora-gcnii citeseer-gcnii] [--seeds 100]
[--results results/table2] [--out reports/benchmarks/floor.json]``

* A configuration is a GCNII entry of ``params/table2.yaml``, built as its stage builds it
  (:func:`twirls.train.experiment.run_inputs`). Products are counted by :class:`Products`,
  which sees every matrix product torch is asked for (``mm``, ``addmm``, ``bmm``,
  ``baddbmm``): ``2·m·k·n`` FLOPs for a dense one, ``2·nnz·n`` for one with a sparse side.
  Elementwise work (dropout, ReLU, Adam) is left out: a floor.
* Two counts of one seed's epoch. *Every node's rows*: the stage's own training step (forward
  with dropout, backward, Adam step) and its evaluation forward, which scores every node (the
  project's CSR kernel off within, so that every product passes through torch). *The rows that
  matter* (:func:`needed_products`, the floor): a label that an epoch reads depends on the
  nodes within ``L - l`` graph steps of it at layer ``l`` alone, so the training step needs
  each layer's rows within reach of a training node, the evaluation those of a validation node
  (early stopping and model selection read nothing else), and the test nodes' logits are
  needed once a run, with the weights it selected (``test_once``).
  :func:`needed_rows_forward` computes GCNII layer by layer on those rows; it is the same
  function of the weights as the model on every node, its gradients too
  (``tests/test_bench_floor.py``). On Citeseer's public split, whose graph falls into 438
  components, that leaves about two thirds of the products.
* Epochs: the mean of the ``epochs`` column of the cell's committed per-run CSV (``--results``),
  over however many runs it holds; at ``--seeds`` seeds a cell needs that mean times the seeds.
  Early stopping decides the epochs, so a mean over few runs is an estimate (its standard error
  is in the record).
* The peak: the best FLOP/s of ``torch.mm`` over a 4096 x 4096 x 4096 product and the largest
  dense product of each configuration's epoch, on all of this process's cores
  (:func:`twirls.train.parallel.available_cores`), the fastest call in 3 rounds of
  ``--seconds`` each, in a child process per MKL code path: its generic kernels and, where
  ``make mkl-intel-path`` built the library, those it runs on an Intel CPU
  (:mod:`twirls.bench.mkl_intel_path`; faster on an AMD CPU), so that the peak is the fastest
  product this machine has. The sparse products are counted at that rate too, far above what
  they run at (they are memory-bound), which keeps the sum a floor.
* ``floor_s`` = FLOPs on the rows that matter / peak: no float32 code on this CPU that
  multiplies GCNII's layers (as dense products, the way every GCNII code does) trains the cell
  at ``--seeds`` seeds in less, for its mean epochs; ``all_rows_floor_s`` is the same on every
  node's rows, the stages' way. The record carries ``reference_s``
  (:func:`twirls.bench.calibrate.reference_seconds`, the best of its runs before and after the
  peak, ``reference_s_runs``), so that the floor can be set beside ``pipeline.json``'s full run,
  scaled as that run is scaled to its first part's day.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from twirls.bench.calibrate import reference_seconds
from twirls.bench.pipeline import bench_header
from twirls.config.entries import train_entry
from twirls.data.registry import DatasetUnavailable, load_dataset
from twirls.files import write_json
from twirls.params import read_all
from twirls.reports.runs import read_runs
from twirls.train.cpu import mkl_code_path
from twirls.train.parallel import available_cores

CONFIGS = ["cora-gcnii", "citeseer-gcnii"]
PEAK_SHAPE = (4096, 4096, 4096)  # (m, k, n) of the square product timed beside the models'


class FloorError(Exception):
    """A configuration that cannot be counted, said in one line (exit status 2)."""


_PRODUCTS = {"aten.mm": (0, 1), "aten.bmm": (0, 1),  # which arguments are the two factors
             "aten.addmm": (1, 2), "aten.baddbmm": (1, 2)}


def product_flops(a: torch.Tensor, b: torch.Tensor) -> tuple[int, bool]:
    """FLOPs of ``a @ b`` (batched if 3-d) and whether a side is sparse: ``2·m·k·n`` per batch
    entry dense, ``2·nnz(a or b)·(the other side's free dimension)`` sparse."""
    if a.layout != torch.strided:
        return 2 * int(a._nnz()) * int(b.shape[-1]), True
    if b.layout != torch.strided:
        return 2 * int(b._nnz()) * int(a.shape[-2]), True
    batch = int(a.shape[0]) if a.dim() == 3 else 1
    return 2 * batch * int(a.shape[-2]) * int(a.shape[-1]) * int(b.shape[-1]), False


class Products(TorchDispatchMode):
    """Counts the FLOPs of every matrix product run within it: ``dense`` and ``sparse`` totals,
    and ``shapes``, the dense products' FLOPs by ``(m, k, n)``."""

    def __init__(self) -> None:
        super().__init__()
        self.dense = 0
        self.sparse = 0
        self.shapes: dict[tuple[int, int, int], int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        sides = _PRODUCTS.get(str(func._overloadpacket))
        if sides is not None:
            a, b = args[sides[0]], args[sides[1]]
            flops, sparse = product_flops(a, b)
            if sparse:
                self.sparse += flops
            else:
                self.dense += flops
                shape = (int(a.shape[-2]), int(a.shape[-1]), int(b.shape[-1]))
                self.shapes[shape] = self.shapes.get(shape, 0) + flops
        return func(*args, **(kwargs or {}))


def epoch_products(inp: Any, data: Any, split: Any) -> dict[str, Products]:
    """The products of one seed's epoch of the run ``inp`` describes (one batch of one seed,
    :func:`twirls.bench.batched_seeds.epoch_steps`): its training step and its evaluation
    forward."""
    from twirls.bench.batched_seeds import epoch_steps
    from twirls.models import csr_kernel

    train, evaluate = epoch_steps(inp, data, split, batch=1)
    counted = {"train_step": Products(), "eval": Products()}
    with csr_kernel.disabled():
        with counted["train_step"]:
            train()
        with counted["eval"]:
            evaluate()
    return counted


def reach_sets(matrix: sp.csr_matrix, targets: np.ndarray, steps: int) -> list[np.ndarray]:
    """``R_0 ⊆ R_1 ⊆ … ⊆ R_steps``: the sorted nodes within ``j`` steps of ``targets`` along
    ``matrix``'s stored entries (``R_0``: the targets; ``matrix`` has its diagonal stored, as
    GCNII's ``(1-α) Â`` does, so each set holds the one before)."""
    sets = [np.unique(targets)]
    for _ in range(steps):
        last = sets[-1]
        sets.append(np.union1d(last, matrix[last].indices))
    return sets


def needed_rows_forward(net: Any, matrix: sp.csr_matrix, x: torch.Tensor, targets: np.ndarray,
                        training: bool) -> torch.Tensor:
    """GCNII's logits (:class:`~twirls.models.baselines.gcnii.GCNII` ``net``) at the sorted
    ``targets`` alone, each layer computed on the rows a target's logit reads and no others:
    layer ``l`` of ``L`` on ``R_{L-l}`` (:func:`reach_sets` of ``matrix``, the model's
    ``(1-α) Â``, with the whole graph's degrees), reading its input on ``R_{L-l+1}`` and
    ``h⁽⁰⁾`` on its own rows; the input layer on ``R_L``. The same function of the weights as
    ``net(ops, x)[targets]`` (``tests/test_bench_floor.py``), so its products are all that a
    training step on these targets, or an evaluation of them, has to multiply. ``x``: the
    features as the stage's input layer takes them: dense, or the CSR copy of bag-of-words ones
    (:func:`~twirls.models.baselines.gcnii.sparse_copy`), whose stored entries dropout draws.
    Dropout as the model draws it."""
    from twirls.models.layers import dropout, is_sparse
    from twirls.train.batched.components import rows_of

    layers = len(net.convs)
    sets = reach_sets(matrix, targets, layers)
    rows = sets[layers]
    x_rows = rows_of(x, torch.from_numpy(rows))
    if is_sparse(x_rows):  # the stage's sparse input layer (dropout_linear)
        kept = dropout(x_rows.values(), net.dropout, training)
        with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
            warnings.simplefilter("ignore", UserWarning)
            x_rows = torch.sparse_csr_tensor(x_rows.crow_indices(), x_rows.col_indices(), kept,
                                             x_rows.shape)
        h0 = torch.relu(x_rows @ net.lin_in.weight.t() + net.lin_in.bias)
    else:
        h0 = torch.relu(net.lin_in(dropout(x_rows, net.dropout, training)))
    h = h0
    for layer, conv in enumerate(net.convs, start=1):
        out_set, in_set = sets[layers - layer], sets[layers - layer + 1]
        sub = _csr_tensor(matrix[out_set][:, in_set])
        own = torch.from_numpy(np.searchsorted(rows, out_set))  # the rows of h0 it adds
        s = sub @ dropout(h, net.dropout, training) + conv.alpha * h0.index_select(0, own)
        h = torch.relu(torch.addmm(s, s, conv.weight, beta=1.0 - conv.beta, alpha=conv.beta))
    return net.lin_out(dropout(h, net.dropout, training))


def _csr_tensor(matrix: sp.csr_matrix) -> torch.Tensor:
    """``matrix`` (sorted indices) as a float32 torch CSR tensor."""
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(
            torch.from_numpy(matrix.indptr.astype(np.int64)),
            torch.from_numpy(matrix.indices.astype(np.int64)),
            torch.from_numpy(matrix.data.astype(np.float32)), matrix.shape)


def needed_products(inp: Any, data: Any, split: Any) -> dict[str, Products]:
    """The products of one seed's epoch on the rows that matter (:func:`needed_rows_forward`
    of the run ``inp`` describes, a GCNII): its training step on the training nodes (forward
    with dropout, the loss, backward), its evaluation of the validation nodes (what early
    stopping and model selection read), and ``test_once``, the test nodes' evaluation, which a
    run needs once, with the weights it selected."""
    with torch.random.fork_rng():  # a seeded model and dropout, the caller's stream untouched
        torch.manual_seed(0)
        return _needed_products(inp, data, split)


def _needed_products(inp: Any, data: Any, split: Any) -> dict[str, Products]:
    from twirls.models.baselines.gcnii import residual_adjacency, sparse_copy

    features = sparse_copy(inp.ops, inp.x)  # as the stage's input layer takes them
    features = inp.x if features is None else features
    net = inp.build()
    alpha = net.convs[0].alpha
    values = residual_adjacency(inp.ops, alpha).csr
    matrix = sp.csr_matrix((values.values().numpy(), values.col_indices().numpy(),
                            values.crow_indices().numpy()), shape=tuple(values.shape))
    train = split.train.numpy()
    labels = data.labels[torch.from_numpy(np.unique(train))]
    counted = {"train_step": Products(), "eval": Products(), "test_once": Products()}
    net.train()
    with counted["train_step"]:
        logits = needed_rows_forward(net, matrix, features, train, training=True)
        torch.nn.functional.cross_entropy(logits, labels).backward()
    net.eval()
    with torch.no_grad():
        for part, nodes in (("eval", split.val), ("test_once", split.test)):
            with counted[part]:
                needed_rows_forward(net, matrix, features, nodes.numpy(), training=False)
    return counted


def committed_epochs(path: Path) -> list[int]:
    """The ``epochs`` of every run in a cell's per-run CSV; a :class:`FloorError` if it holds
    none."""
    if not path.is_file():
        raise FloorError(f"{path}: no per-run results; run the cell's stage first (dvc repro) "
                         "or point --results at them")
    epochs = [int(float(row["epochs"])) for row in read_runs(path)]
    if not epochs:
        raise FloorError(f"{path}: no runs (a stage without its data here writes none)")
    return epochs


def peak_rate(shapes: list[tuple[int, int, int]], threads: int, seconds: float,
              rounds: int = 3) -> dict[str, float]:
    """GFLOP/s of ``torch.mm`` on ``threads`` threads for each ``(m, k, n)``: the fastest call
    of back-to-back calls for ``seconds`` a round, in ``rounds`` rounds over the shapes in turn
    (a shared machine's load comes and goes), after two calls of warm-up."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        pairs = {shape: (torch.randn(shape[0], shape[1]), torch.randn(shape[1], shape[2]))
                 for shape in shapes}
        best = dict.fromkeys(pairs, float("inf"))
        for _ in range(rounds):
            for shape, (a, b) in pairs.items():
                for _ in range(2):
                    a @ b
                start = time.perf_counter()
                while time.perf_counter() - start < seconds:
                    tick = time.perf_counter()
                    a @ b
                    best[shape] = min(best[shape], time.perf_counter() - tick)
        return {shape_name(shape): round(2 * shape[0] * shape[1] * shape[2] / best[shape] / 1e9,
                                         1) for shape in pairs}
    finally:
        torch.set_num_threads(before)


def shape_name(shape: tuple[int, int, int]) -> str:
    return "x".join(map(str, shape))


def peak_by_kernels(shapes: list[tuple[int, int, int]], threads: int, seconds: float
                    ) -> dict[str, dict[str, float]]:
    """:func:`peak_rate` in a child process for each MKL code path this machine has (``mkl``
    of :func:`twirls.train.cpu.mkl_code_path`: generic, and intel with the library of ``make
    mkl-intel-path`` preloaded), by the code path the child reports."""
    from twirls.bench.mkl_intel_path import LIBRARY, SIDES, run_child

    sides = SIDES if LIBRARY.is_file() else SIDES[:1]
    out = {}
    for side in sides:
        line = run_child(["twirls.bench.floor", "--threads", str(threads), "--seconds",
                          str(seconds), "--peak-only", *map(shape_name, shapes)], side, LIBRARY)
        child = json.loads(line.splitlines()[-1])
        out[child["mkl"]] = child["rates"]
    return out


def cell_floor(name: str, counted: dict[str, Products], needed: dict[str, Products],
               epochs: list[int], seeds: int, peak_gflops: float) -> dict[str, Any]:
    """A configuration's record: the FLOPs of a seed's epoch as the stage multiplies them
    (``counted``, every node's rows) and on the rows that matter (``needed``, with
    ``test_once`` a run), its committed epochs, and the floor at ``seeds`` seeds and
    ``peak_gflops`` of each: ``floor_s`` the rows that matter, ``all_rows_floor_s`` every node's."""

    def flops(parts: dict[str, Products]) -> dict[str, dict[str, int]]:
        return {part: {"dense": p.dense, "sparse": p.sparse} for part, p in parts.items()}

    def epoch_flops(parts: dict[str, Products]) -> int:
        return sum(p.dense + p.sparse for part, p in parts.items() if part != "test_once")

    mean = statistics.fmean(epochs)
    once = needed["test_once"].dense + needed["test_once"].sparse
    total = (epoch_flops(needed) * mean + once) * seeds
    all_rows = epoch_flops(counted) * mean * seeds
    return {"config": name, "flops_per_seed_epoch": flops(counted),
            "gflop_per_seed_epoch": round(epoch_flops(counted) / 1e9, 3),
            "needed_flops_per_seed_epoch": flops(needed),
            "needed_gflop_per_seed_epoch": round(epoch_flops(needed) / 1e9, 3),
            "committed_runs": len(epochs), "epochs_mean": round(mean, 1),
            "epochs_sem": round(statistics.stdev(epochs) / len(epochs) ** 0.5, 1)
            if len(epochs) > 1 else None,
            "seeds": seeds, "flops": round(total), "pflop": round(total / 1e15, 3),
            "floor_s": round(total / (peak_gflops * 1e9), 1),
            "all_rows_flops": round(all_rows), "all_rows_pflop": round(all_rows / 1e15, 3),
            "all_rows_floor_s": round(all_rows / (peak_gflops * 1e9), 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=CONFIGS,
                        help="entries of params/table2.yaml (default: %(default)s)")
    parser.add_argument("--seeds", type=int, default=100,
                        help="seeds a cell at which to count (issue 28's protocol: 100)")
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="seconds each peak-rate shape is timed in each of 3 rounds")
    parser.add_argument("--params", type=Path, default=Path("params"))
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    parser.add_argument("--results", type=Path, default=Path("results/table2"))
    parser.add_argument("--out", type=Path, default=Path("reports/benchmarks/floor.json"))
    parser.add_argument("--peak-only", nargs="+", metavar="MxKxN", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.peak_only:  # a child of peak_by_kernels: one code path's rates, as one JSON line
        shapes = [tuple(int(v) for v in name.split("x")) for name in args.peak_only]
        print(json.dumps({"mkl": mkl_code_path(), "rates": peak_rate(
            shapes, args.threads or available_cores(), args.seconds)}))
        return 0
    params = read_all(args.params.parent)
    if unknown := [n for n in args.configs if n not in params["table2"]]:
        parser.error(f"not entries of {args.params / 'table2.yaml'}: {', '.join(unknown)}")
    if other := [n for n in args.configs if params["table2"][n]["model"] != "gcnii"]:
        parser.error(f"the rows that matter are counted for GCNII's layers alone, not for "
                     f"{', '.join(other)}: pick entries with model: gcnii")
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    from twirls.train.experiment import run_inputs

    counts, needed, epochs = {}, {}, {}
    for name in args.configs:
        exp = train_entry(params["table2"][name])
        try:
            epochs[name] = committed_epochs(args.results / f"{name}.csv")
            data = load_dataset(exp["dataset"], args.raw)
        except (FloorError, DatasetUnavailable) as exc:
            parser.exit(2, f"python -m twirls.bench.floor: {exc}\n")
        inp = run_inputs(exp, data, torch.device("cpu"), progress=False)
        split = data.splits[inp.splits[0]]
        counts[name] = epoch_products(inp, data, split)
        needed[name] = needed_products(inp, data, split)
    largest = [max(c.shapes, key=c.shapes.get) for cs in counts.values() for c in cs.values()
               if c.shapes]
    threads = available_cores()
    out = bench_header("floor", argv, (
        "the least seconds Table 2's GCNII cells can take here at --seeds seeds: FLOPs of the "
        "products of a seed's epoch on the rows that matter (counted as they run; all_rows_*: "
        "on every node's rows, as the stages multiply them) x the committed runs' mean epochs "
        "x seeds (+ the test nodes' evaluation once a seed) / the peak GFLOP/s of dense "
        "products on all cores"), threads=threads)
    calibrations = [reference_seconds()]  # before the peak and after it: the best of both
    kernels = peak_by_kernels([PEAK_SHAPE, *dict.fromkeys(largest)], threads, args.seconds)
    out["peak_gflops_by_kernels"] = kernels
    out["peak_gflops_by_shape"] = {shape: max(rates[shape] for rates in kernels.values())
                                   for shape in next(iter(kernels.values()))}
    out["peak_gflops"] = peak = max(out["peak_gflops_by_shape"].values())
    calibrations.append(reference_seconds())
    out["reference_s"] = {kind: min(c[kind] for c in calibrations) for kind in calibrations[0]}
    out["reference_s_runs"] = calibrations
    out["records"] = [cell_floor(n, counts[n], needed[n], epochs[n], args.seeds, peak)
                      for n in args.configs]
    out["floor_s"] = round(sum(r["floor_s"] for r in out["records"]), 1)
    out["all_rows_floor_s"] = round(sum(r["all_rows_floor_s"] for r in out["records"]), 1)
    write_json(args.out, out)
    for r in out["records"]:
        print(f"{r['config']}: {r['needed_gflop_per_seed_epoch']} GFLOP a seed-epoch on the "
              f"rows that matter ({r['gflop_per_seed_epoch']} on every node's) x "
              f"{r['epochs_mean']} epochs x {r['seeds']} seeds = {r['pflop']} PFLOP "
              f"({r['all_rows_pflop']}): {r['floor_s'] / 3600:.2f} h "
              f"({r['all_rows_floor_s'] / 3600:.2f} h) at {peak} GFLOP/s")
    print(f"{args.out}: {out['floor_s'] / 3600:.2f} h in all on the rows that matter, "
          f"{out['all_rows_floor_s'] / 3600:.2f} h on every node's", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
