"""``X W`` for sparse CSR node features, with the transpose of ``X`` built once.

Bag-of-words features (Cora 1.3 %, Citeseer 0.9 % nonzeros) enter the first layer of most
models as a sparse CSR matrix, so ``X W`` costs ``O(nnz)``. Torch's own backward of
``torch.sparse.mm(X, W)`` computes ``∂L/∂W = Xᵀ G`` by converting ``Xᵀ`` to CSR (a sort of
every nonzero) in every epoch: on attacked Cora that conversion was 12 % of a TWIRLS run.
:func:`csr_matmul` does the same products with the same kernel, but sorts the pattern of ``X``
once and afterwards only permutes the (dropped-out) values, so its gradients are bit-identical
to torch's.

The transposed pattern is cached per index storage (input dropout builds a new CSR tensor each
epoch around the same ``crow``/``col`` indices, see :func:`twirls.models.layers.dropout`); the
cache keeps those storages alive, so an address it is keyed on is never reused while cached.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from typing import NamedTuple

import torch
from torch import Tensor

CACHE_SIZE = 8  # patterns kept (one per feature matrix in use; a stage has one or two)


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


class _CSRMatmul(torch.autograd.Function):
    """``X W`` for CSR ``X`` with ``∂L/∂W = Xᵀ G`` from the cached pattern (``X`` is data: no
    gradient flows to it)."""

    @staticmethod
    def forward(ctx, w: Tensor, x: Tensor) -> Tensor:  # type: ignore[override]
        ctx.x = x
        return torch.sparse.mm(x, w)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x: Tensor = ctx.x
        t = transpose_pattern(x)
        xt = _csr(t.t_crow, t.t_col, x.values().index_select(0, t.perm), (x.shape[1], x.shape[0]))
        return torch.sparse.mm(xt, grad), None


def csr_matmul(x: Tensor, w: Tensor) -> Tensor:
    """``x @ w`` for a sparse CSR ``x`` (``(n, d)``, node features: no gradient) and dense ``w``
    (``(d, k)``), the same numbers as ``torch.sparse.mm(x, w)`` forward and backward (see module
    doc)."""
    if x.requires_grad:
        raise ValueError("csr_matmul: x must not require grad (it is the input features)")
    if not w.requires_grad:
        return torch.sparse.mm(x, w)
    return _CSRMatmul.apply(w, x)
