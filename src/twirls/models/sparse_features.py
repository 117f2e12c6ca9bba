"""``X W`` for sparse CSR node features, with the transpose of ``X`` built once.

Bag-of-words features (Cora 1.3 %, Citeseer 0.9 % nonzeros) enter the first layer of most
models as a sparse CSR matrix, so ``X W`` costs ``O(nnz)``. Torch's own backward of
``torch.sparse.mm(X, W)`` computes ``∂L/∂W = Xᵀ G`` by converting ``Xᵀ`` to CSR (a sort of
every nonzero) in every epoch: on attacked Cora that conversion was 12 % of a TWIRLS run.
:func:`csr_matmul` does the same products with the same arithmetic
(:mod:`twirls.models.csr_kernel`), but sorts the pattern of ``X`` once and afterwards only
permutes the (dropped-out) values, so its gradients are bit-identical to torch's.

Input dropout zeroes stored entries without removing them; on the CPU both products skip them
(:func:`drop_zeros`): a stored zero adds only ``±0`` to its row's sum, so the kernel gives the
same values, in ``O(kept)`` time: at Cora's input dropout of 0.8 each product takes a third of
its time.

The transposed pattern is cached per index storage (input dropout builds a new CSR tensor each
epoch around the same ``crow``/``col`` indices, see :func:`twirls.models.layers.dropout`); the
cache keeps those storages alive, so an address it is keyed on is never reused while cached.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from twirls.models import csr_kernel

CACHE_SIZE = 8  # patterns kept (one per feature matrix in use; a stage has one or two)
# Products at least this wide skip stored zeros (drop_zeros): dropping them costs ~2 ns an entry
# and saves ~0.1 ns an entry and output column (Citeseer, 2 cores, AVX-512), so narrower
# products (Table 8's K = 1: 6 columns) are faster with the zeros kept.
DROP_ZEROS_MIN_WIDTH = 32


class _Transpose(NamedTuple):
    crow: Tensor  # the cached pattern's own indices (kept alive with the entry)
    col: Tensor
    t_crow: Tensor  # Xᵀ in CSR form: row pointers, column ids, and
    t_col: Tensor
    perm: Tensor  # values of Xᵀ = values of X [perm]


_CACHE: OrderedDict[tuple, _Transpose] = OrderedDict()


def _csr(crow: Tensor, col: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, values, shape, check_invariants=False)


def _key(crow: Tensor, col: Tensor, shape: tuple[int, int]) -> tuple:
    return (crow.untyped_storage().data_ptr(), crow.storage_offset(),
            col.untyped_storage().data_ptr(), col.storage_offset(), col.numel(), shape,
            crow.device)


def transpose_pattern(x: Tensor) -> _Transpose:
    """The CSR pattern of ``xᵀ`` and the permutation of ``x``'s values into it (cached)."""
    crow, col = x.crow_indices(), x.col_indices()
    shape = (int(x.shape[0]), int(x.shape[1]))
    key = _key(crow, col, shape)
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        return hit
    rows = torch.repeat_interleave(torch.arange(shape[0], device=crow.device), crow.diff())
    # sorted by column, then by row: the order of Xᵀ's CSR with sorted column ids
    perm = torch.argsort(col * shape[0] + rows, stable=True)
    counts = torch.bincount(col, minlength=shape[1])
    t_crow = torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(crow.dtype)
    entry = _Transpose(crow, col, t_crow, rows[perm].to(col.dtype), perm)
    _CACHE[key] = entry
    while len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return entry


def drop_zeros(crow: Tensor, col: Tensor, values: Tensor, order: Tensor | None = None
               ) -> tuple[Tensor, Tensor, Tensor]:
    """The CSR matrix ``(crow, col, values[order])`` (``order=None``: ``values``) without its
    stored zeros, as ``(crow, col, values)`` with the indices' dtype.

    A sparse product with it gives the same values as with the zeros stored (each dropped entry
    would add ``0 · w = ±0`` to a row's sum; only a weight of ``inf`` or ``NaN``, which would
    make that term ``NaN``, tells them apart) and costs ``O(kept)``. With nothing to drop, the
    inputs come back (``values[order]`` gathered). CPU tensors only: the CSR kernel's library
    copies the kept entries in one pass where it is loaded and the indices are int32
    (:func:`twirls.models.csr_kernel.drop_zeros`; Citeseer's 105k entries, half of them zero,
    one core: 0.13 ms, 0.24 ms gathered by ``order``), else NumPy does the bookkeeping (0.24
    and 0.38 ms; torch's ``nonzero`` alone takes 0.6)."""
    compact = csr_kernel.drop_zeros(crow, col, values.detach(), order)
    if compact is not None:
        if compact[2].numel() < col.numel():
            return compact
        return crow, col, values if order is None else compact[2]
    vals = values.detach().numpy()
    keep = vals != 0
    index = None if order is None else order.numpy()
    if index is not None:
        keep = keep.take(index)
    kept = np.flatnonzero(keep)
    if kept.size == keep.size:
        return crow, col, values if order is None else values.index_select(0, order)
    ends = np.empty(keep.size + 1, dtype=crow.numpy().dtype)
    ends[0] = 0
    np.cumsum(keep, out=ends[1:])
    source = kept if index is None else index.take(kept)
    return (torch.from_numpy(ends.take(crow.numpy())), torch.from_numpy(col.numpy().take(kept)),
            torch.from_numpy(vals.take(source)))


def skips_zeros(x: Tensor, width: int) -> bool:
    """Whether a product of CSR ``x`` ``width`` columns wide drops ``x``'s stored zeros first:
    on the CPU, from :data:`DROP_ZEROS_MIN_WIDTH` columns."""
    return x.device.type == "cpu" and width >= DROP_ZEROS_MIN_WIDTH


def without_zeros(x: Tensor, width: int) -> Tensor:
    """CSR ``x`` for a product ``width`` columns wide: without its stored zeros where
    :func:`skips_zeros` (:func:`drop_zeros`)."""
    if not skips_zeros(x, width):
        return x
    stored = x.values()
    crow, col, values = drop_zeros(x.crow_indices(), x.col_indices(), stored)
    return x if values is stored else _csr(crow, col, values, tuple(x.shape))


def transposed(x: Tensor, width: int) -> Tensor:
    """``Xᵀ`` in CSR form for CSR ``x``, from the cached pattern (:func:`transpose_pattern`),
    for a product ``width`` columns wide: without stored zeros where :func:`skips_zeros`."""
    t = transpose_pattern(x)
    shape = (int(x.shape[1]), int(x.shape[0]))
    if not skips_zeros(x, width):
        return _csr(t.t_crow, t.t_col, x.values().index_select(0, t.perm), shape)
    return _csr(*drop_zeros(t.t_crow, t.t_col, x.values(), t.perm), shape)


class _CSRMatmul(torch.autograd.Function):
    """``X W`` for CSR ``X`` with ``∂L/∂W = Xᵀ G`` from the cached pattern (``X`` is data: no
    gradient flows to it)."""

    @staticmethod
    def forward(ctx, w: Tensor, x: Tensor) -> Tensor:  # type: ignore[override]
        ctx.x = x
        return csr_kernel.mm(without_zeros(x, w.shape[1]), w)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        return csr_kernel.mm(transposed(ctx.x, grad.shape[1]), grad), None


def csr_matmul(x: Tensor, w: Tensor) -> Tensor:
    """``x @ w`` for a sparse CSR ``x`` (``(n, d)``, node features: no gradient) and dense ``w``
    (``(d, k)``), the same numbers as ``torch.sparse.mm(x, w)`` forward and backward (see module
    doc)."""
    if x.requires_grad:
        raise ValueError("csr_matmul: x must not require grad (it is the input features)")
    if not w.requires_grad:
        return csr_kernel.mm(without_zeros(x, w.shape[1]), w)
    return _CSRMatmul.apply(w, x)
