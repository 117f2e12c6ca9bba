"""Independent runs (seeds, splits, grid points) in worker processes, one result per run.

A stage has many runs that share nothing but their inputs: the seeds and splits of one
experiment, or every (grid point, seed) of a sweep. DVC runs stages one at a time, so the
stage itself spreads its runs over ``jobs`` worker processes (params.yaml ``jobs``; ``auto``:
one per CPU core this process may use).

Each run is a zero-argument callable that seeds everything it uses (see
:func:`twirls.train.loop.seed_run`), so its result does not depend on which process runs it or
what ran there before: the parallel results are bit-identical to the sequential ones, in the
same order. Workers are forked (Linux/macOS), so they inherit the loaded dataset and the runs
themselves without pickling them; only results travel back. Each worker keeps the parent's
torch thread count, the count the sequential run used, and its flushing of denormals
(:mod:`twirls.train.cpu`).

CUDA runs stay in the stage's own process, one after another: a forked child cannot use the
parent's CUDA context, and one GPU gains little from several processes.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import torch
from tqdm import tqdm

from twirls.train import journal

T = TypeVar("T")

#: the runs of the pool being executed, inherited by the forked workers (index -> callable)
_RUNS: Sequence[Callable[[], Any]] = ()


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, e.g. a container's quota)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def resolve_jobs(jobs: int | str, device: torch.device) -> int:
    """Worker processes for a stage: ``jobs`` (``auto``: :func:`available_cores`), 1 on CUDA."""
    if device.type != "cpu":
        return 1
    if jobs == "auto":
        return available_cores()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be 'auto' or an integer >= 1, got {jobs!r}")
    return jobs


def _init_worker(threads: int) -> None:
    # a SIGTERM handler inherited from the parent (one that does not exit, like the rehearsal's
    # while it waits on a child) would keep a worker alive when the pool is torn down
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # Ctrl-C reaches the whole process group: the parent stops the pool (SIGTERM) and prints
    # one line; a worker printing its own traceback would bury that line
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(threads)


def _call(index: int) -> Any:
    return _RUNS[index]()


def run_all(runs: Sequence[Callable[[], T]], jobs: int = 1, *, desc: str = "runs",
            progress: bool = False) -> list[T]:
    """``[run() for run in runs]``, in ``min(jobs, len(runs))`` forked workers when ``jobs > 1``.

    Results come back in the order of ``runs``; an exception in a run is raised here (the pool is
    torn down). ``progress``: one tqdm bar over the runs. Under a stage's journal
    (:mod:`twirls.train.journal`) each finished run is kept as it arrives, and the runs it
    already holds are read back instead of trained again.
    """
    book = journal.current()
    keys = book.keys(runs) if book is not None and runs else None  # None: no journal here
    results: list[Any] = [None] * len(runs)
    pending = list(range(len(runs)))
    if keys is not None:
        found = [(i, *book.load(key)) for i, key in enumerate(keys)]
        for i, hit, result in found:
            if hit:
                results[i] = result
        pending = [i for i, hit, _ in found if not hit]
        if len(pending) < len(runs):
            print(f"{desc}: {len(runs) - len(pending)} of {len(runs)} runs read back from "
                  f"{book.folder} (finished before the stage was stopped)", file=sys.stderr)
    done = len(runs) - len(pending)
    for i, result in _run_pending(runs, pending, jobs, desc, progress, done):
        results[i] = result
        if keys is not None:
            book.save(keys[i], result)
    return results


def _run_pending(runs: Sequence[Callable[[], T]], pending: list[int], jobs: int, desc: str,
                 progress: bool, done: int) -> Iterator[tuple[int, T]]:
    """``(index, result)`` of each run of ``pending``, in order, as it finishes."""
    global _RUNS
    workers = min(jobs, len(pending))
    bar = {"total": len(runs), "initial": done}
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        for i in tqdm(pending, desc=desc, disable=not progress or len(runs) < 2, **bar):
            yield i, runs[i]()
        return
    import torch._dynamo  # noqa: F401  (imported by the first optimizer: pay it once, not per worker)

    _RUNS = runs
    try:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(workers, initializer=_init_worker,
                      initargs=(torch.get_num_threads(),)) as pool:
            results = tqdm(pool.imap(_call, pending, chunksize=1),
                           desc=f"{desc} ({workers} workers)", disable=not progress, **bar)
            yield from zip(pending, results, strict=True)
            pool.close()  # the workers exit on their own: no SIGTERM needed on success
            pool.join()
    finally:
        _RUNS = ()
