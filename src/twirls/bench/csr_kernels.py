"""Sparse x dense products on the CPU: MKL's CSR kernel (``torch.sparse.mm``), this project's
kernel with MKL's arithmetic (:mod:`twirls.models.csr_kernel`, which the models run from 5
columns) and FBGEMM's ``embedding_bag`` (``mode="sum"``, a row's stored values as the per-sample
weights of the dense rows it picks), written to ``reports/benchmarks/csr-kernels.json``.

``python -m twirls.bench.csr_kernels [--datasets cora citeseer] [--widths 7 16 ...]
[--repeats 30] [--out FILE]``

* The sparse operands of a dataset, as the stages multiply them: its bag-of-words features
  row-normalised (:func:`twirls.train.experiment.prepare_features`) after input dropout 0.5
  (``features``); the same features raw, 0/1, after input dropout 0.5 (``features-raw``: the
  attacked graphs' are used raw); GCN's normalised adjacency with self-loops (``graph``, the
  operator of a propagation step). Zeros that dropout stored are dropped first, as
  :func:`twirls.models.sparse_features.drop_zeros` does. The dense operand is random, ``width``
  columns wide (a batch of 5 seeds propagates 5 x the classes: 35 on Cora, 30 on Citeseer).
* A record: each kernel's milliseconds (the median of ``--repeats`` calls after two of warm-up,
  one torch thread, 32-bit indices; the project's kernel at every width, also below the 5
  columns from which the models take it), MKL's over each other's (``speedup``,
  ``csr_kernel_speedup``), and whether each product has MKL's bits (``same_bits``; else
  ``max_rel_diff``, the largest difference over the largest entry; ``csr_kernel_same_bits``).
  ``embedding_bag`` adds a row's terms in the same order but fuses multiply and add, so only
  operands whose every product is exact (``features-raw``: values 0 and 2) give MKL's bits; the
  project's kernel rounds as MKL's generic kernel does, so it gives them on an AMD CPU. Without
  the kernel's library (``make`` builds it) its fields are absent.
* ``--steps``: whole training epochs of a few configurations as their stages run them
  (:mod:`twirls.bench.batched_seeds`' names; one batch of ``--batch`` seeds, the training step
  and the evaluation forward, :func:`~twirls.bench.batched_seeds.epoch_parts`), milliseconds a
  seed-epoch three ways, alternating, ``--rounds`` rounds each: with the project's C kernels
  (``csr_kernel_ms``), without the CSR kernel's library (``mkl_ms``: MKL's products, NumPy's
  :func:`~twirls.models.sparse_features.drop_zeros`) and with NumPy's masks instead of the
  masks kernel's (``numpy_masks_ms``; :mod:`twirls.models.masks`) (``steps``: every round's
  times and the medians' ratios, ``speedup`` and ``masks_kernel_speedup``). ``--datasets``
  with no name times the epochs alone.
* The file carries ``reference_s`` (:func:`twirls.bench.calibrate.reference_seconds`) at its
  start and end, and the machine's kernels (``mkl``: generic ones on an AMD CPU,
  ``docs/costs.md``; ``csr_kernel``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F

from twirls.bench.calibrate import median_ms, reference_seconds
from twirls.bench.pipeline import bench_header
from twirls.data.registry import load_dataset
from twirls.files import write_json
from twirls.models import csr_kernel, masks
from twirls.models.graph_ops import GraphOps
from twirls.models.sparse_features import drop_zeros
from twirls.train.cpu import configure_cpu
from twirls.train.experiment import prepare_features

WIDTHS = (5, 6, 7, 16, 30, 32, 35, 64, 100, 128, 320)
DROPOUT = 0.5


def csr32(x: Tensor) -> Tensor:
    """``x`` (CSR) with 32-bit indices and without stored zeros."""
    crow, col, values = drop_zeros(x.crow_indices().to(torch.int32),
                                   x.col_indices().to(torch.int32), x.values())
    return torch.sparse_csr_tensor(crow, col, values, x.shape, check_invariants=False)


def embedding_bag_mm(x: Tensor, w: Tensor) -> Tensor:
    """``x @ w`` for CSR ``x`` by ``embedding_bag``: row ``i`` sums ``w``'s rows at its column
    ids, weighted by its values, in stored order."""
    return F.embedding_bag(x.col_indices(), w, x.crow_indices(), mode="sum",
                           per_sample_weights=x.values(), include_last_offset=True)


def dropped(features: Tensor, gen: torch.Generator) -> Tensor:
    """``features`` (dense) as CSR after input dropout :data:`DROPOUT` on its stored entries."""
    x = features.to_sparse_csr()
    keep = torch.rand(x.values().shape, generator=gen) >= DROPOUT
    values = x.values() * keep.to(x.values().dtype) / (1.0 - DROPOUT)
    return torch.sparse_csr_tensor(x.crow_indices(), x.col_indices(), values, x.shape,
                                   check_invariants=False)


def operands(name: str, raw: Path, gen: torch.Generator) -> dict[str, Tensor]:
    data = load_dataset(name, raw)
    features = data.features
    if features is None:
        raise SystemExit(f"csr_kernels: {name} has no node features to multiply; pick "
                         "bag-of-words datasets such as cora or citeseer (--datasets)")
    return {"features": csr32(dropped(prepare_features(features, {"dataset": name}), gen)),
            "features-raw": csr32(dropped(features, gen)),
            "graph": csr32(GraphOps.from_graph(data.graph).gcn_norm().csr)}


def compare(x: Tensor, width: int, repeats: int, gen: torch.Generator) -> dict[str, Any]:
    w = torch.randn(x.shape[1], width, generator=gen)
    mkl, bag = torch.sparse.mm(x, w), embedding_bag_mm(x, w)
    same = torch.equal(mkl, bag)
    mkl_ms = median_ms(lambda: torch.sparse.mm(x, w), repeats)
    bag_ms = median_ms(lambda: embedding_bag_mm(x, w), repeats)
    record = {"width": width, "mkl_ms": mkl_ms, "embedding_bag_ms": bag_ms,
              "speedup": round(mkl_ms / bag_ms, 2), "same_bits": same}
    if not same:
        record["max_rel_diff"] = rel_diff(mkl, bag)
    ours = csr_kernel.product(x, w)
    if ours is not None:
        ours_ms = median_ms(lambda: csr_kernel.product(x, w), repeats)
        record.update({"csr_kernel_ms": ours_ms, "csr_kernel_speedup": round(mkl_ms / ours_ms, 2),
                       "csr_kernel_same_bits": torch.equal(mkl, ours)})
        if not record["csr_kernel_same_bits"]:
            record["csr_kernel_max_rel_diff"] = rel_diff(mkl, ours)
    return record


def rel_diff(reference: Tensor, other: Tensor) -> float:
    """The largest difference over the largest entry of ``reference`` (3 digits)."""
    scale = float(reference.abs().max()) or 1.0
    return float(f"{float((reference - other).abs().max()) / scale:.3g}")


STEPS = ("table8:paper-k2:16:0.5", "table8:reference-k2:64:0.1", "cora-twirls-base-k2",
         "cora-gcnii", "table4-twirls:nettack-cora", "table4-twirls:nettack-citeseer")


def step_times(name: str, args: argparse.Namespace, params: dict[str, Any]) -> dict[str, Any]:
    """Milliseconds a seed-epoch of configuration ``name`` takes with MKL's products and with
    the project's kernel (see module doc)."""
    from twirls.bench.batched_seeds import config_inputs, epoch_parts
    from twirls.train.experiment import run_inputs

    exp, data = config_inputs(name, args, params)
    inp = run_inputs(exp, data, torch.device("cpu"), progress=False)
    split = data.splits[inp.splits[0]]
    sides = {"mkl_ms": csr_kernel.disabled, "csr_kernel_ms": nullcontext,
             "numpy_masks_ms": masks.kernel_disabled}
    times: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(args.rounds):
        for side, use in sides.items():
            with use():
                parts = epoch_parts(inp, data, split, args.batch, args.epochs, row_operator=True)
            times[side].append(round(parts["train_step"] + parts["eval"], 3))
    median = {side: statistics.median(ms) for side, ms in times.items()}
    return {"config": name, "batch": args.batch, "epochs": args.epochs, **times,
            "speedup": round(median["mkl_ms"] / median["csr_kernel_ms"], 2),
            "masks_kernel_speedup": round(median["numpy_masks_ms"] / median["csr_kernel_ms"], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="*", default=["cora", "citeseer"])
    parser.add_argument("--widths", nargs="+", type=int, default=list(WIDTHS))
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    parser.add_argument("--out", type=Path, default=Path("reports/benchmarks/csr-kernels.json"))
    parser.add_argument("--steps", nargs="*", default=[], metavar="CONFIG",
                        help=f"also time training epochs of these configurations (e.g. "
                             f"{' '.join(STEPS)})")
    parser.add_argument("--batch", type=int, default=5, help="seeds a batch in --steps")
    parser.add_argument("--epochs", type=int, default=20, help="epochs a round in --steps")
    parser.add_argument("--rounds", type=int, default=3, help="rounds each way in --steps")
    parser.add_argument("--attacked", type=Path, default=Path("data/attacked"),
                        help="the attack stage's graphs (--steps table4-twirls:<dataset>)")
    args = parser.parse_args(argv)
    configure_cpu(1)
    out = {**bench_header("csr_kernels", argv, __doc__.split("\n\n")[0].replace("\n", " ")),
           "dropout": DROPOUT, "reference_s": reference_seconds(), "records": []}
    gen = torch.Generator().manual_seed(0)
    for dataset in args.datasets:
        for operand, x in operands(dataset, args.raw, gen).items():
            for width in args.widths:
                record = {"dataset": dataset, "operand": operand, "rows": int(x.shape[0]),
                          "nnz": int(x.values().numel()), **compare(x, width, args.repeats, gen)}
                out["records"].append(record)
                print(record, flush=True)
    if args.steps:
        from twirls.params import read_all

        params = read_all()
        out["steps"] = []
        for name in args.steps:
            out["steps"].append(step_times(name, args, params))
            print(out["steps"][-1], flush=True)
    out["reference_s_end"] = reference_seconds()
    write_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
