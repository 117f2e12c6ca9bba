"""CSR x dense products on the CPU with MKL's bits, faster than MKL from 5 columns.

Every sparse product of the models (a propagation step ``M Y``, bag-of-words features times a
weight, their transposes in the backward passes) is a CSR matrix times a dense one. On x86 CPUs
torch runs MKL's CSR kernel for it, and on AMD CPUs MKL runs its generic kernel, which sums a
row's products in stored order, each product rounded before it is added. ``csr_kernel.c`` (built
by ``make`` into the environment, ``$(VENV)/lib/libtwirls_csr_kernel.so``) computes exactly
that, with a row's sums in vector registers (blocks of 64 columns, the rest in 8-lane vectors
read once) and the rows of ``W`` prefetched.

* Bits: the same as MKL's generic kernel, product by product (``tests/test_csr_kernel.py``;
  ``python -m twirls.bench.csr_kernels`` checks every product it times). So it runs only where
  MKL would run that kernel (:func:`twirls.train.cpu.mkl_code_path` is ``"generic"``: AMD CPUs,
  without ``make repro MKL_INTEL_PATH=1``), and no result moves: on an Intel CPU, or with MKL's
  Intel kernels preloaded, the products stay MKL's.
* Where: :func:`mm` and :func:`addmm` take it for a CPU float32 CSR matrix times a contiguous
  float32 matrix at least :data:`MIN_WIDTH` columns wide, of at least :data:`MIN_WORK`
  multiply-adds, with one torch thread (the stages' ``threads: 1``) and no autograd to record;
  anything else, or no library, goes to torch as before.
* Safety: when the library loads, its products on a small matrix must equal the same sums done
  one torch operation at a time; otherwise it is not used and :func:`status` says why.
* Speed: ``python -m twirls.bench.csr_kernels`` times it against MKL on Cora's and Citeseer's
  features and graphs (``reports/benchmarks/csr-kernels.json``, ``docs/costs.md``): faster
  from 5 columns, by the most where a row's sums fill its vectors (a batch of 5 seeds of 6 or
  7 classes: 30 and 35 columns); below 5 columns MKL is as fast or faster.
* The library also copies a CSR matrix without its stored zeros (:func:`drop_zeros`, what
  :func:`twirls.models.sparse_features.drop_zeros` runs where it can): one pass in C instead of
  NumPy's several, the same entries.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from twirls.models.c_library import Switch, open_library

SOURCE = Path(__file__).with_name("csr_kernel.c")  # what `make` compiles into LIBRARY
LIBRARY = Path(sys.prefix) / "lib" / "libtwirls_csr_kernel.so"
MIN_WIDTH = 5  # narrower products stay MKL's (as fast or faster there)
MIN_WORK = 2**16  # and so do products of fewer multiply-adds (the call costs ~3 µs more)
VERSION = 3  # twirls_csr_version() of csr_kernel.c: a library built from another is not called
_use = Switch()  # off within disabled()


class _Library(NamedTuple):
    """The library's functions (``csr_kernel.c``)."""

    mm: Callable[..., None]  # twirls_csr_mm
    drop_zeros: Callable[..., int]  # twirls_csr_drop_zeros


@functools.cache
def _load() -> tuple[_Library | None, str]:
    """The library (or ``None``) and its status: ``"none"`` (not built), ``"off: ..."`` (MKL
    does not run its generic kernel here), ``"rejected: ..."`` or ``"sha256:<library's first 12
    hex digits>"``."""
    from twirls.train.cpu import mkl_code_path

    if not LIBRARY.is_file():
        return None, "none"
    if mkl_code_path() != "generic":
        return None, f"off: MKL's kernels here are {mkl_code_path() or 'absent'}, not generic"
    return _open(LIBRARY)


def _open(library: Path) -> tuple[_Library | None, str]:
    """:func:`_load`'s library from ``library``: refused (with a warning) when it was built
    from another version of :data:`SOURCE` (its ``twirls_csr_version``) or its products are
    not the sums in order (:func:`_self_check`)."""
    return open_library(library, SOURCE, ("twirls_csr_version", VERSION), _bind,
                        "the products stay MKL's", unversioned=1)  # version 1 had no such function


def _bind(lib: ctypes.CDLL) -> tuple[_Library, str]:
    func = lib.twirls_csr_mm
    func.argtypes = [ctypes.c_int64] * 3 + [ctypes.c_void_p] * 5
    func.restype = None
    compact = lib.twirls_csr_drop_zeros
    compact.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * 7
    compact.restype = ctypes.c_int64
    return _Library(func, compact), _self_check(func)


def status() -> str:
    """Whether this process's CSR products run the kernel (part of a run's journal key and of
    every benchmark record): see :func:`_load`."""
    return _load()[1]


def disabled() -> AbstractContextManager[None]:
    """Within it, every product goes to torch (for comparisons)."""
    return _use.off()


def applies(x: Tensor, w: Tensor, out: Tensor | None = None) -> bool:
    """Whether ``x @ w`` (into ``out``) runs the kernel (see module doc)."""
    if not (_use.on and w.dim() == 2 and w.shape[1] >= MIN_WIDTH
            and x.layout == torch.sparse_csr and x._nnz() * w.shape[1] >= MIN_WORK):
        return False
    return (x.dtype == torch.float32 and w.dtype == torch.float32 and x.device.type == "cpu"
            and w.device.type == "cpu" and x.shape[1] == w.shape[0] and w.is_contiguous()
            and (out is None or (out.dtype == torch.float32 and out.is_contiguous()
                                 and tuple(out.shape) == (x.shape[0], w.shape[1])))
            and not (torch.is_grad_enabled() and w.requires_grad)
            and x._nnz() < 2**31 and torch.get_num_threads() == 1
            and _load()[0] is not None)


def _run(func, x: Tensor, w: Tensor, out: Tensor) -> Tensor:  # type: ignore[no-untyped-def]
    crow, col = x.crow_indices(), x.col_indices()
    if crow.dtype != torch.int32:
        crow, col = crow.to(torch.int32), col.to(torch.int32)
    return _call(func, crow, col, x.values().contiguous(), w, out)


def _call(func, crow: Tensor, col: Tensor, values: Tensor,  # type: ignore[no-untyped-def]
          w: Tensor, out: Tensor) -> Tensor:
    """``out = X w`` by ``func`` for ``X`` given by int32 ``crow``, ``col`` and ``values``."""
    func(crow.numel() - 1, w.shape[1], w.shape[0], crow.data_ptr(), col.data_ptr(),
         values.data_ptr(), w.data_ptr(), out.data_ptr())
    return out


def product(x: Tensor, w: Tensor) -> Tensor | None:
    """The kernel's ``x @ w`` at any width (for benchmarks; the models go through :func:`mm`),
    or ``None`` without the library."""
    lib = _load()[0]
    return None if lib is None else _run(lib.mm, x, w, w.new_empty(x.shape[0], w.shape[1]))


def mm(x: Tensor, w: Tensor, out: Tensor | None = None) -> Tensor:
    """``x @ w`` (``torch.mm(x, w, out=out)``) for a CSR ``x``."""
    if not applies(x, w, out):
        return x @ w if out is None else torch.mm(x, w, out=out)
    if out is None:
        out = w.new_empty(x.shape[0], w.shape[1])
    return _run(_load()[0].mm, x, w, out)


def addmm(add: Tensor, x: Tensor, w: Tensor, out: Tensor | None = None) -> Tensor:
    """``add + x @ w`` (``torch.addmm(add, x, w, out=out)``) for a CSR ``x``: the product, then
    ``add`` added to it, which is how MKL rounds it."""
    if not (applies(x, w, out) and not (torch.is_grad_enabled() and add.requires_grad)):
        return torch.addmm(add, x, w, out=out)
    return mm(x, w, out).add_(add)


def drop_zeros(crow: Tensor, col: Tensor, values: Tensor, order: Tensor | None = None
               ) -> tuple[Tensor, Tensor, Tensor] | None:
    """The library's :func:`twirls.models.sparse_features.drop_zeros`: the CSR matrix ``(crow,
    col, values[order])`` without its stored zeros, as int32 ``crow``, ``col`` and the kept
    values (views of arrays as long as ``col``), in one pass; ``None`` where the library is not
    loaded or not :func:`enabled <disabled>`, or the arguments are not CPU int32 indices,
    float32 values and an int64 ``order``."""
    lib = _load()[0] if _use.on else None
    if lib is None or not (crow.dtype == col.dtype == torch.int32
                           and values.dtype == torch.float32 and values.device.type == "cpu"
                           and values.numel() == col.numel()
                           and (order is None or (order.dtype == torch.int64
                                                  and order.numel() == col.numel()))):
        return None
    crow, col, values = crow.contiguous(), col.contiguous(), values.contiguous()
    order = None if order is None else order.contiguous()
    out_crow, out_col = torch.empty_like(crow), torch.empty_like(col)
    out_values = values.new_empty(col.numel())
    kept = lib.drop_zeros(crow.numel() - 1, crow.data_ptr(), col.data_ptr(), values.data_ptr(),
                          None if order is None else order.data_ptr(), out_crow.data_ptr(),
                          out_col.data_ptr(), out_values.data_ptr())
    return out_crow, out_col[:kept], out_values[:kept]


def reference_product(crow: Tensor, col: Tensor, values: Tensor, w: Tensor) -> Tensor:
    """The kernel's sums one torch operation at a time (slow; for checks): row ``i`` of the
    result is ``((0 + v_1 w_1) + v_2 w_2) + ...`` over its stored entries in order, each product
    rounded before it is added."""
    out = w.new_zeros(crow.numel() - 1, w.shape[1])
    for i in range(crow.numel() - 1):
        acc = w.new_zeros(w.shape[1])
        for j in range(int(crow[i]), int(crow[i + 1])):
            acc = acc + values[j] * w[int(col[j])]
        out[i] = acc
    return out


def _self_check(func) -> str:  # type: ignore[no-untyped-def]
    """``""`` when the kernel's products on a small random matrix (rows of 0-9 entries, some
    columns repeated within a row, widths that use every column block) equal
    :func:`reference_product`'s bit for bit; else what differed."""
    gen = torch.Generator().manual_seed(0)
    counts = torch.randint(0, 10, (12,), generator=gen)
    crow = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(torch.int32)
    col = torch.randint(0, 20, (int(counts.sum()),), generator=gen, dtype=torch.int32)
    values = torch.randn(col.numel(), generator=gen)
    for width in (1, 3, 7, 8, 9, 15, 16, 37, 127, 130):
        w = torch.randn(20, width, generator=gen)
        out = _call(func, crow, col, values, w, torch.empty(12, width))
        if not torch.equal(out, reference_product(crow, col, values, w)):
            return f"its products at width {width} differ from the sums in order (fused " \
                   f"multiply-add? it must be built with -ffp-contract=off)"
    return ""
