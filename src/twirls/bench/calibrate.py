"""How fast this machine is right now: a fixed single-threaded workload, timed.

The same 2-core machine has run the same commit's ``dvc status`` in 3.9 s one day and 5.8 s
another (a shared host). A benchmark that records :func:`reference_seconds` next to its timings
lets two of its runs be compared: a stage that took 1.5x longer while the reference also took
1.5x longer did not get slower.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch


def _python_work() -> int:
    """The interpreter alone (DVC's own overhead is Python)."""
    total = 0
    for i in range(4_000_000):
        total += i * i % 7
    return total


def random_csr(nodes: int, entries: int, gen: torch.Generator) -> torch.Tensor:
    """A ``nodes x nodes`` CSR matrix of ``entries`` random positions (repeats summed) and
    uniform values, drawn from ``gen``."""
    idx = torch.randint(0, nodes, (2, entries), generator=gen)
    mat = torch.sparse_coo_tensor(idx, torch.rand(entries, generator=gen), (nodes, nodes),
                                  check_invariants=False).coalesce()
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        return mat.to_sparse_csr()


def _torch_work() -> float:
    """Sparse CSR x dense products on a fixed random graph (the kernels TWIRLS' steps run)."""
    gen = torch.Generator().manual_seed(0)
    n, nnz, width = 3000, 30_000, 16
    mat = random_csr(n, nnz, gen)
    y = torch.rand(n, width, generator=gen)
    for _ in range(3000):
        y = torch.addmm(y, mat, y).mul_(1e-3)
    return float(y.sum())


def reference_seconds(repeats: int = 3) -> dict[str, float]:
    """Best-of-``repeats`` seconds of each fixed workload, on one torch thread (the thread count
    is restored): ``python`` (the interpreter) and ``torch`` (sparse kernels)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = {}
        for name, work in (("python", _python_work), ("torch", _torch_work)):
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                work()
                best = min(best, time.perf_counter() - start)
            out[name] = round(best, 4)
        return out
    finally:
        torch.set_num_threads(threads)


def median_ms(func: Callable[[], Any], repeats: int) -> float:
    """Milliseconds of ``func()``: the median of ``repeats`` calls after two of warm-up (the
    kernel benchmarks' timer)."""
    for _ in range(2):
        func()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return round(1000 * statistics.median(times), 4)
