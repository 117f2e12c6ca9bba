"""The gradient of the attention-weighted entries of a run of TWIRLS steps: step by step against
one wide SDDMM (:meth:`twirls.models.graph_ops.SparseMatrix.grad_entries_sum`), written to
``reports/benchmarks/sddmm.json``.

``python -m twirls.bench.sddmm [--datasets nettack-cora nettack-citeseer] [--out FILE]``

* On each attacked graph (the attack stage's, in ``--attacked``; Table 4's TWIRLS propagates on
  it), alone (one seed) and as the 5 disjoint copies one batch of 5 seeds propagates on
  (:func:`twirls.train.batched.models.copies`), on A's edges (the paper's equations: a constant
  diagonal), one torch thread.
* ``steps`` records: the ``S/2`` steps after Table 4's middle attention layer, ``C`` = the
  classes wide (random gradients and inputs): milliseconds of their ``S/2`` SDDMMs summed step
  by step (:meth:`~twirls.models.graph_ops.SparseMatrix.grad_entries`, last step first: the
  path below ``SDDMM_MIN_WIDTH``) and as one wide SDDMM in groups of ``SDDMM_GROUP_WIDTH``
  columns, and in one product of all ``S/2`` steps (``ungrouped``).
* ``width`` records: one step of each width in :data:`WIDTHS`, gathers against
  ``torch.sparse.sampled_addmm`` (where ``SDDMM_MIN_WIDTH`` comes from).
* Each time is the median of ``--repeats`` timings after two warm-up calls. Every record
  carries ``reference_s`` (:func:`twirls.bench.calibrate.reference_seconds`).
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from twirls.bench.calibrate import median_ms, reference_seconds
from twirls.bench.pipeline import bench_header
from twirls.data.registry import load_dataset
from twirls.files import write_json
from twirls.models import graph_ops
from twirls.models.graph_ops import GraphOps, SparseMatrix
from twirls.params import read_all
from twirls.stages.attacked import attacked_graph
from twirls.train.batched.models import copies
from twirls.train.cpu import configure_cpu

WIDTHS = (6, 7, 8, 16, 32, 64, 128)
COPIES = (1, 5)


def step_by_step(mat: SparseMatrix, grads: list[torch.Tensor],
                 ys: list[torch.Tensor]) -> torch.Tensor:
    """:meth:`SparseMatrix.grad_entries_sum` at any width as below ``SDDMM_MIN_WIDTH``: one
    :meth:`SparseMatrix.grad_entries` a step (gathers), summed from the last step."""
    with mock.patch.object(graph_ops, "SDDMM_MIN_WIDTH", sys.maxsize):
        return mat.grad_entries_sum(grads, ys)


def wide(mat: SparseMatrix, grads: list[torch.Tensor], ys: list[torch.Tensor],
         group_width: int) -> torch.Tensor:
    """:meth:`SparseMatrix.grad_entries_sum` at any width, in groups of ``group_width``."""
    with (mock.patch.object(graph_ops, "SDDMM_MIN_WIDTH", 0),
          mock.patch.object(graph_ops, "SDDMM_GROUP_WIDTH", group_width)):
        return mat.grad_entries_sum(grads, ys)


def timings(mat: SparseMatrix, grads: list[torch.Tensor], ys: list[torch.Tensor],
            group_widths: tuple[int, ...], repeats: int) -> list[float]:
    """Milliseconds step by step, then wide in groups of each of ``group_widths``."""
    return ([median_ms(partial(step_by_step, mat, grads, ys), repeats)]
            + [median_ms(partial(wide, mat, grads, ys, w), repeats) for w in group_widths])


def bench_graph(ops: GraphOps, steps: int, classes: int, repeats: int,
                gen: torch.Generator) -> list[dict[str, Any]]:
    mat = ops.matrix(torch.rand(ops.num_edges, generator=gen), 0.5)
    base = {"nodes": ops.n, "edges": ops.num_edges}

    def pairs(k: int, width: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        return ([torch.randn(ops.n, width, generator=gen) for _ in range(k)],
                [torch.randn(ops.n, width, generator=gen) for _ in range(k)])

    old, new, whole = timings(mat, *pairs(steps, classes),
                              (graph_ops.SDDMM_GROUP_WIDTH, steps * classes), repeats)
    records = [{"kind": "steps", **base, "steps": steps, "width": classes,
                "step_by_step_ms": old, "wide_ms": new, "ungrouped_ms": whole,
                "speedup": round(old / new, 2)}]
    for width in WIDTHS:
        old, new = timings(mat, *pairs(1, width), (width,), repeats)
        records.append({"kind": "width", **base, "steps": 1, "width": width,
                        "step_by_step_ms": old, "wide_ms": new, "speedup": round(old / new, 2)})
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["nettack-cora", "nettack-citeseer"])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    parser.add_argument("--attacked", type=Path, default=Path("data/attacked"))
    parser.add_argument("--out", type=Path, default=Path("reports/benchmarks/sddmm.json"))
    args = parser.parse_args(argv)
    configure_cpu(1)
    params = read_all()
    out = {**bench_header("sddmm", argv, __doc__.split("\n\n")[0].replace("\n", " ")),
           "min_width": graph_ops.SDDMM_MIN_WIDTH, "group_width": graph_ops.SDDMM_GROUP_WIDTH,
           "reference_s": reference_seconds(), "records": []}
    gen = torch.Generator().manual_seed(0)
    for dataset in args.datasets:
        data = attacked_graph(load_dataset(dataset, args.raw), "fast", args.raw, args.attacked)
        steps = params["table4"]["twirls"][dataset]["model_cfg"]["steps"] // 2
        ops = GraphOps.from_graph(data.graph)
        for count in COPIES:
            graph = copies(ops, count) if count > 1 else ops
            for record in bench_graph(graph, steps, data.num_classes, args.repeats, gen):
                out["records"].append({"graph": dataset, "copies": count, **record})
                print(out["records"][-1], flush=True)
    out["reference_s_end"] = reference_seconds()
    write_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
