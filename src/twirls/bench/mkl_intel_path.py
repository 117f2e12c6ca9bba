"""MKL's kernels on this CPU: torch's CPU products with the kernels MKL runs here against those it
runs on an Intel CPU, written to ``reports/benchmarks/mkl-intel-path.json``.

``make mkl-intel-path && python -m twirls.bench.mkl_intel_path [--configs cora-gcn ...]
[--seeds 10] [--out reports/benchmarks/mkl-intel-path.json]``

* MKL (torch's BLAS and sparse BLAS on x86-64) asks its function ``mkl_serv_intel_cpu_true``
  whether the CPU is Intel's; on any other (AMD's) it runs generic kernels, whatever instructions
  the CPU has. ``make mkl-intel-path`` builds a library whose one function of that name answers
  yes; preloaded (``LD_PRELOAD``; ``make repro MKL_INTEL_PATH=1``) it is found before MKL's own,
  and MKL runs the kernels of an Intel CPU with the same instructions. On an Intel CPU it changes
  nothing. Each record says which kernels ran (``mkl``:
  :func:`twirls.train.cpu.mkl_code_path`).
* Every timing runs in a child process, once without the library (``generic``) and once with it
  (``intel``; the configurations below in alternating order):
* ``kernels``: products the models run, on one torch thread, the best of ``--repeats`` rounds:
  dense ones (GCNII's layer on Citeseer, a two-layer ``f``'s input layer on Cora, TWIRLS-base's
  row operator for a batch of 5 on Citeseer) and CSR x dense ones on a random graph of Citeseer's
  size at the widths of one seed's and a batch's steps; ``same_bits`` says whether the two
  processes' outputs are bit for bit the same.
* ``records``: :mod:`twirls.bench.batched_seeds` of each of ``--configs`` at ``--seeds`` seeds,
  in batches of 5 with the row operator, as the stages run them: seconds a seed of today's path
  (one run a seed) and of the batched one, their test means, and ``reference_s`` (whose sparse
  half runs MKL too, so it is faster with the library: compare the two sides by their ratios).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from twirls.bench.calibrate import random_csr, reference_seconds
from twirls.bench.pipeline import bench_header
from twirls.files import write_json
from twirls.train.cpu import mkl_code_path

LIBRARY = Path(".venv/lib/libmkl_intel_path.so")
CONFIGS = ["cora-twirls-base-k2", "table8:64:0.1", "cora-gcn", "table4-twirls:nettack-cora"]
SIDES = ("generic", "intel")
DENSE = {  # name: (rows, inner, columns)
    "gcnii-citeseer-layer": (3327, 256, 256),
    "f-input-cora": (2708, 1433, 64),
    "row-operator-citeseer-batch5": (120, 3327, 30),
}
CSR_WIDTHS = (6, 30, 64, 256)  # one seed's classes on Citeseer, a batch of 5's, hidden widths


def _best_ms(left: torch.Tensor, right: torch.Tensor, repeats: int, calls: int) -> float:
    """Milliseconds of one ``left @ right``: the best of ``repeats`` rounds of ``calls``."""
    left @ right
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            left @ right
        best = min(best, (time.perf_counter() - start) / calls)
    return round(best * 1e3, 4)


def _digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.numpy().tobytes()).hexdigest()[:16]


def kernels(repeats: int) -> dict[str, Any]:
    """Milliseconds (best of ``repeats``) and output digest of each product, on one thread."""
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    out: dict[str, Any] = {}
    for name, (rows, inner, columns) in DENSE.items():
        left, right = torch.randn(rows, inner, generator=gen), torch.randn(inner, columns,
                                                                             generator=gen)
        out[name] = {"ms": _best_ms(left, right, repeats, 5),
                     "digest": _digest(left @ right)}
    nodes = 3327
    graph = random_csr(nodes, 12431, gen)  # Citeseer's size, self-loops included
    for width in CSR_WIDTHS:
        dense = torch.randn(nodes, width, generator=gen)
        out[f"csr-x-dense-width{width}"] = {"ms": _best_ms(graph, dense, repeats, 50),
                                            "digest": _digest(graph @ dense)}
    return out


def child_env(side: str, library: Path) -> dict[str, str]:
    """This process's environment with ``library`` preloaded (``intel``) or not (``generic``)."""
    env = dict(os.environ)
    kept = [part for part in env.pop("LD_PRELOAD", "").split() if Path(part) != library]
    if side == "intel":
        kept.append(str(library))
    if kept:
        env["LD_PRELOAD"] = " ".join(kept)
    return env


def run_child(args: list[str], side: str, library: Path) -> str:
    """stdout of ``python -m <args>`` with or without the library; its stderr passes through."""
    done = subprocess.run([sys.executable, "-m", *args], env=child_env(side, library),
                          stdout=subprocess.PIPE, text=True, check=True)
    return done.stdout


def compare_kernels(library: Path, repeats: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Which kernels each side ran, with its ``reference_s``; and each product's milliseconds
    without and with the library, and whether their bits agree."""
    runs = {side: json.loads(run_child(["twirls.bench.mkl_intel_path", "--kernels-only",
                                        "--repeats", str(repeats)], side, library).splitlines()[-1])
            for side in SIDES}
    sides = {side: {"mkl": runs[side]["mkl"], "reference_s": runs[side]["reference_s"]}
             for side in SIDES}
    products = {}
    for name, generic in runs["generic"]["kernels"].items():
        intel = runs["intel"]["kernels"][name]
        products[name] = {"generic_ms": generic["ms"], "intel_ms": intel["ms"],
                          "speedup": round(generic["ms"] / intel["ms"], 2),
                          "same_bits": generic["digest"] == intel["digest"]}
    return sides, products


def compare_config(name: str, seeds: int, library: Path, order: tuple[str, ...],
                   folder: Path) -> dict[str, Any]:
    """One configuration's batched_seeds record without and with the library."""
    record: dict[str, Any] = {"config": name, "seeds": seeds, "batch": 5, "row_operator": True}
    for side in order:
        path = folder / f"{side}.json"
        path.unlink(missing_ok=True)
        run_child(["twirls.bench.batched_seeds", "--configs", name, "--seeds", str(seeds),
                   "--batch", "5", "--row-operator", "--out", str(path)], side, library)
        timed = json.loads(path.read_text())
        done = timed["records"][-1]
        record[side] = {"mkl": timed["mkl"], "reference_s": done["reference_s"],
                        **{f"{path_}_{key}": done[path_][key] for path_ in ("today", "batched")
                           for key in ("seconds_per_seed", "test_mean")}}
    for path_ in ("today", "batched"):
        record[f"speedup_{path_}"] = round(record["generic"][f"{path_}_seconds_per_seed"]
                                           / record["intel"][f"{path_}_seconds_per_seed"], 2)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", type=Path, default=LIBRARY,
                        help="the library `make mkl-intel-path` builds")
    parser.add_argument("--configs", nargs="*", default=CONFIGS,
                        help="twirls.bench.batched_seeds configurations")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kernels-only", action="store_true",
                        help="(the child processes) print this process's kernels as JSON")
    parser.add_argument("--out", type=Path, default=Path("reports/benchmarks/mkl-intel-path.json"))
    args = parser.parse_args(argv)
    if args.kernels_only:
        print(json.dumps({"mkl": mkl_code_path(), "reference_s": reference_seconds(),
                          "kernels": kernels(args.repeats)}))
        return 0
    library = args.lib.resolve()
    if not library.is_file():
        parser.error(f"{args.lib} does not exist: build it with `make mkl-intel-path` (a C "
                     "compiler makes it in a second), or name it with --lib")
    if mkl_code_path() is None:
        parser.error("torch has no MKL here (it has on x86-64 Linux): nothing to compare")
    out = bench_header("mkl_intel_path", argv, (
        "torch's CPU products with MKL's kernels for this CPU (generic: not preloaded) against "
        "those of an Intel CPU with the same instructions (intel: LD_PRELOAD of `make "
        "mkl-intel-path`'s library); speedup = generic / intel"))
    out["sides"], out["kernels"] = compare_kernels(library, args.repeats)
    out["records"] = []
    with tempfile.TemporaryDirectory() as tmp:
        for number, name in enumerate(args.configs):
            order = SIDES if number % 2 == 0 else SIDES[::-1]
            out["records"].append(compare_config(name, args.seeds, library, order, Path(tmp)))
            print(json.dumps(out["records"][-1]), flush=True)
    write_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
