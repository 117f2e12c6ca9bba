"""GCN normalisation ``Â = D^{-1/2} (A + I) D^{-1/2}`` from an edge list, in float32.

Mettack's surrogate propagates with the renormalised adjacency of Kipf & Welling (2017), the
same matrix as the paper's SGC baseline, eq. (7), with ``d_i = 1 + deg(i)``. DeepRobust builds it
densely (``normalize_adj_tensor``: ``rowsum.pow(-1/2)`` then two products with a diagonal
matrix); we build it sparsely with the same float32 operations, so that every stored entry
``s_i * s_j`` (``s = d^{-1/2}``) is bit-identical to DeepRobust's.

:meth:`NormalizedAdjacency.to` copies that matrix and its vectors to a torch device (a GPU) for
the fast Mettack's device path; the entries are computed on the CPU first, so they are the same
bits on every device.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch


@dataclass(frozen=True)
class NormalizedAdjacency:
    """``Â`` (scipy CSR float32, self-loops included) with its degree vectors.

    ``d`` is ``1 + deg`` (float32) and ``s = d^{-1/2}``, so ``Â_ij = s_i s_j`` on ``A + I``.
    ``row``/``col`` list the off-diagonal entries of ``A`` in both directions (int64).
    """

    matrix: sp.csr_matrix
    d: torch.Tensor
    s: torch.Tensor
    row: np.ndarray
    col: np.ndarray

    def to(self, device: str | torch.device) -> DeviceAdjacency:
        """The same ``Â`` as torch tensors on ``device`` (same values, bit for bit)."""
        device = torch.device(device)
        return DeviceAdjacency(
            matrix=to_torch(self.matrix, device=device),
            d=self.d.to(device), s=self.s.to(device),
            row=torch.from_numpy(self.row).to(device), col=torch.from_numpy(self.col).to(device))


@dataclass(frozen=True)
class DeviceAdjacency:
    """:class:`NormalizedAdjacency` on a torch device: ``matrix`` is a sparse CSR tensor (float32,
    sorted column indices), ``d``/``s`` float32 ``(n,)``, ``row``/``col`` int64 (off-diagonal
    entries of ``A``, both directions), all on ``matrix.device``."""

    matrix: torch.Tensor
    d: torch.Tensor
    s: torch.Tensor
    row: torch.Tensor
    col: torch.Tensor


def normalize_edges(upper_row: np.ndarray, upper_col: np.ndarray, n: int) -> NormalizedAdjacency:
    """``Â`` of the undirected graph whose edges are ``(upper_row[k], upper_col[k])`` (i < j)."""
    row = np.concatenate([upper_row, upper_col, np.arange(n)])
    col = np.concatenate([upper_col, upper_row, np.arange(n)])
    d = torch.from_numpy(np.bincount(row, minlength=n).astype(np.float32))  # 1 + degree
    s = d.pow(-0.5)
    s_np = s.numpy()
    values = s_np[row] * s_np[col]  # float32 * float32, like DeepRobust's diag products
    matrix = sp.csr_matrix((values, (row, col)), shape=(n, n), dtype=np.float32)
    off = len(upper_row) * 2
    return NormalizedAdjacency(matrix=matrix, d=d, s=s, row=row[:off], col=col[:off])


def normalize(adj: sp.spmatrix) -> NormalizedAdjacency:
    """``Â`` of a symmetric 0/1 adjacency without self-loops (scipy sparse)."""
    upper = sp.triu(adj, k=1).tocoo()
    return normalize_edges(upper.row.astype(np.int64), upper.col.astype(np.int64), adj.shape[0])


def to_torch(matrix: sp.spmatrix, device: str | torch.device | None = None) -> torch.Tensor:
    """A scipy sparse matrix as a torch sparse CSR tensor (same dtype).

    Without ``device``: on the CPU, sharing the values' memory, entries in scipy's order. With a
    ``device``: copied there, with column indices sorted within each row (what the GPU's sparse
    kernels expect; the values are the same).
    """
    csr = sp.csr_matrix(matrix)
    if device is not None and not csr.has_sorted_indices:
        csr = csr.sorted_indices()
    with warnings.catch_warnings():  # "sparse CSR support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        parts = (torch.from_numpy(csr.indptr.astype(np.int64)),
                 torch.from_numpy(csr.indices.astype(np.int64)),
                 torch.from_numpy(csr.data))
        if device is not None:
            parts = tuple(t.to(device) for t in parts)
        return torch.sparse_csr_tensor(*parts, size=csr.shape, check_invariants=False)
