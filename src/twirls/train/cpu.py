"""The CPU settings of a stage's process: torch's thread count and flush-to-zero of denormals;
and which of MKL's kernels it runs (:func:`mkl_code_path`, part of a run's journal key).

Long trainings with weight decay drive some numbers into the denormal range (|x| < 1.2e-38 in
float32): Adam's first moment of a weight whose gradient stays zero shrinks by 0.9 per epoch and
gets there after ~800 epochs. On x86 CPUs every operation on a denormal takes a slow microcode
path, so late epochs cost several times the early ones (Geom-GCN on Wisconsin: 8 ms per epoch
for the first 500 epochs, 38 ms per epoch from epoch 2,000 on, with one thread). Flushing
denormals to zero (the CPU's FTZ/DAZ flags, :func:`torch.set_flush_denormal`) keeps every epoch
at its early cost. A denormal is below almost every quantity the models add it to by more
than 2^24, so scores rarely move: the full rerun with it (`reports/benchmarks/
rerun-flush-denormals.json`) moved 5 of the 1,078 runs last computed on this machine, all of
them MLP on the small heterophily graphs (Cornell, Texas, Wisconsin; their means by -0.81,
-0.54, -0.20 points, inside one std), where a weight flushed to zero ends a run at another
epoch; every other run is unchanged (the other 9 runs that moved, Table 12's stand-in, were last
computed on another machine).

The flags belong to the thread that sets them; threads created later and forked processes
(the workers of :mod:`twirls.train.parallel`) inherit them.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from pathlib import Path

import numpy as np
import torch


def configure_cpu(threads: int | None = None) -> None:
    """Flush denormals to zero in this process, and use ``threads`` torch threads if given."""
    if threads is not None:
        torch.set_num_threads(int(threads))
    for dtype in (np.float16, np.float32, np.float64):
        np.finfo(dtype)  # cached before flushing: numpy would warn that its subnormals are zero
    torch.set_flush_denormal(True)  # False on CPUs without SSE3 (nothing to flush there)


def flushes_denormals() -> bool:
    """Whether this thread flushes denormals: a float32 denormal times one comes out as zero."""
    return float(torch.tensor([1.0e-40], dtype=torch.float32).mul(1.0).item()) == 0.0


@functools.cache
def mkl_code_path() -> str | None:
    """Which of MKL's kernels torch's CPU products run in this process: ``"intel"`` (those of an
    Intel CPU with this CPU's instructions) or ``"generic"`` (what MKL runs on other vendors'
    CPUs, AMD's included); ``None`` where torch has no MKL (ARM, macOS) or this is not Linux.

    MKL asks its function ``mkl_serv_intel_cpu_true``. A library preloaded with one of that name
    (``make mkl-intel-path``, docs/costs.md) comes first in the process's global scope, where
    torch's copy of MKL looks it up; else torch's own copy answers."""
    library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    if not (sys.platform == "linux" and torch.backends.mkl.is_available() and library.is_file()):
        return None
    try:
        intel = ctypes.CDLL(None).mkl_serv_intel_cpu_true  # a preloaded library's
    except AttributeError:
        intel = ctypes.CDLL(str(library)).mkl_serv_intel_cpu_true  # MKL's own vendor check
    return "intel" if intel() else "generic"
