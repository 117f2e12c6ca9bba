"""The least time Table 2's cells can take on this machine whatever the code: the products a
seed's epoch multiplies, counted as they run, times the epochs the cell's committed runs took,
at this machine's peak rate of dense products; written to ``reports/benchmarks/floor.json``.

``python -m twirls.bench.floor [--configs cora-gcnii citeseer-gcnii] [--seeds 100]
[--results results/table2] [--out reports/benchmarks/floor.json]``

* A configuration is an entry of ``params/table2.yaml``, built as its stage builds it
  (:func:`twirls.train.experiment.run_inputs`). One seed's epoch, the training step (forward
  with dropout, backward, Adam step) and the evaluation forward that scores every node, runs
  under :class:`Products`, which counts every matrix product torch is asked for (``mm``,
  ``addmm``, ``bmm``, ``baddbmm``): ``2·m·k·n`` multiply-adds' FLOPs for a dense one, ``2·nnz·n``
  for one with a sparse side (the project's CSR kernel is switched off within, so that every
  product passes through torch). Elementwise work (dropout, ReLU, Adam) is left out: a floor.
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
  they run at (they are memory-bound), which keeps the sum a floor; so does a product that an
  operation other than these four would run (not counted).
* ``floor_s`` = FLOPs / peak: no float32 code on this CPU multiplies these products in less, so
  none trains the cell at ``--seeds`` seeds in less (for its mean epochs). The record carries
  ``reference_s`` (:func:`twirls.bench.calibrate.reference_seconds`, the best of its runs before
  and after the peak, ``reference_s_runs``), so that the floor can be set beside
  ``pipeline.json``'s full run, scaled as that run is scaled to its first part's day.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

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


def cell_floor(name: str, counted: dict[str, Products], epochs: list[int], seeds: int,
               peak_gflops: float) -> dict[str, Any]:
    """A configuration's record: its FLOPs per seed-epoch, its committed epochs, and the floor at
    ``seeds`` seeds and ``peak_gflops``."""
    per_epoch = {part: {"dense": p.dense, "sparse": p.sparse} for part, p in counted.items()}
    flops_epoch = sum(p.dense + p.sparse for p in counted.values())
    mean = statistics.fmean(epochs)
    total = flops_epoch * mean * seeds
    return {"config": name, "flops_per_seed_epoch": per_epoch,
            "gflop_per_seed_epoch": round(flops_epoch / 1e9, 3),
            "committed_runs": len(epochs), "epochs_mean": round(mean, 1),
            "epochs_sem": round(statistics.stdev(epochs) / len(epochs) ** 0.5, 1)
            if len(epochs) > 1 else None,
            "seeds": seeds, "flops": round(total), "pflop": round(total / 1e15, 3),
            "floor_s": round(total / (peak_gflops * 1e9), 1)}


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
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    from twirls.train.experiment import run_inputs

    counts, epochs = {}, {}
    for name in args.configs:
        exp = train_entry(params["table2"][name])
        try:
            epochs[name] = committed_epochs(args.results / f"{name}.csv")
            data = load_dataset(exp["dataset"], args.raw)
        except (FloorError, DatasetUnavailable) as exc:
            parser.exit(2, f"python -m twirls.bench.floor: {exc}\n")
        inp = run_inputs(exp, data, torch.device("cpu"), progress=False)
        counts[name] = epoch_products(inp, data, data.splits[inp.splits[0]])
    largest = [max(c.shapes, key=c.shapes.get) for cs in counts.values() for c in cs.values()
               if c.shapes]
    threads = available_cores()
    out = bench_header("floor", argv, (
        "the least seconds Table 2's cells can take here at --seeds seeds: FLOPs of the "
        "products of a seed's epoch (counted as they run) x the committed runs' mean epochs "
        "x seeds / the peak GFLOP/s of dense products on all cores"), threads=threads)
    calibrations = [reference_seconds()]  # before the peak and after it: the best of both
    kernels = peak_by_kernels([PEAK_SHAPE, *dict.fromkeys(largest)], threads, args.seconds)
    out["peak_gflops_by_kernels"] = kernels
    out["peak_gflops_by_shape"] = {shape: max(rates[shape] for rates in kernels.values())
                                   for shape in next(iter(kernels.values()))}
    out["peak_gflops"] = peak = max(out["peak_gflops_by_shape"].values())
    calibrations.append(reference_seconds())
    out["reference_s"] = {kind: min(c[kind] for c in calibrations) for kind in calibrations[0]}
    out["reference_s_runs"] = calibrations
    out["records"] = [cell_floor(n, counts[n], epochs[n], args.seeds, peak) for n in args.configs]
    out["floor_s"] = round(sum(r["floor_s"] for r in out["records"]), 1)
    write_json(args.out, out)
    for r in out["records"]:
        print(f"{r['config']}: {r['gflop_per_seed_epoch']} GFLOP a seed-epoch x "
              f"{r['epochs_mean']} epochs x {r['seeds']} seeds = {r['pflop']} PFLOP: "
              f"{r['floor_s'] / 3600:.2f} h at {peak} GFLOP/s")
    print(f"{args.out}: {out['floor_s'] / 3600:.2f} h in all", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
