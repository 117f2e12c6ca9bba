"""Everything a model needs from a graph, built once per dataset.

Every model's forward is ``forward(ops: GraphOps, x: Tensor | None) -> logits``. ``GraphOps``
holds the graph's sparsity pattern as a torch CSR matrix, and builds (and caches) the sparse
matrices the models multiply with, so no model rebuilds graph structure inside a training step.

Conventions (paper, eq. 1): ``A`` is the symmetric 0/1 adjacency without self-loops, ``D`` its
degree matrix, ``Ã = A + I``. All matrices live on the pattern of ``Ã`` (the edges of ``A`` plus
the diagonal), stored in CSR order (row = target node ``i``, column = source node ``j``, so that
``(M Y)_i = Σ_j M_ij y_j``). "Edge ``e``" means the ``e``-th off-diagonal entry in that order:
``ops.dst[e] = i``, ``ops.src[e] = j``; each undirected edge appears twice (``i→j`` and ``j→i``).

Sparse products go through :class:`SparseMatrix`, whose autograd backward multiplies by a
precomputed transpose (torch's own CSR backward transposes on every call, ~10x slower on CPU)
and, when the matrix entries themselves require grad (attention weights), computes their
gradient by a chunked SDDMM.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import Tensor

from twirls.models import csr_kernel

if TYPE_CHECKING:
    import dgl

_SDDMM_CHUNK = 1 << 18  # entries per chunk when computing d(loss)/d(matrix entries)
# SparseMatrix.grad_entries_sum: one dot product an entry (torch.sparse.sampled_addmm) from this
# many columns up (narrower, its vectorised dot leaves a SIMD register part-empty and runs ~3x
# slower than the gathers; 16 fills one AVX-512 register), in products of up to
# SDDMM_GROUP_WIDTH columns (wider ones outgrow the cache: docs/costs.md)
SDDMM_MIN_WIDTH = 16
SDDMM_GROUP_WIDTH = 64
DENSE_MAX_NODES = 50_000  # an n x n dense matrix above this is a bug, not a choice (~10 GB)


class EdgeList(Protocol):
    """What :meth:`GraphOps.from_graph` reads: ``twirls.data.graph.Graph`` or a DGL graph."""

    def edges(self) -> tuple[Tensor, Tensor]: ...

    def num_nodes(self) -> int: ...


def check_dense_size(n: int, what: str) -> None:
    """Refuse to build an ``n × n`` dense matrix on a large graph (issue: no dense n×n above
    ~50k nodes; ogbn-arxiv would need 115 GB)."""
    if n > DENSE_MAX_NODES:
        raise ValueError(f"{what}: refusing a dense {n:,} x {n:,} matrix "
                         f"({4 * n * n / 2**30:.0f} GiB in float32) on a graph above "
                         f"{DENSE_MAX_NODES:,} nodes; use the sparse (iterative) path instead")


class GraphOps:
    """Precomputed structure of one undirected graph (``n`` nodes, ``m`` undirected edges).

    Attributes:
        n: number of nodes.
        src, dst: ``(2m,)`` int64 edge list of ``A`` (both directions), in CSR order.
        deg: ``(n,)`` node degrees of ``A`` (float, ``dtype``).
        crow, col, row: CSR arrays of the pattern of ``Ã = A + I`` (``2m + n`` entries).
        is_loop: ``(2m + n,)`` bool, True at the diagonal entries of the pattern.
        rev: position of entry ``(j, i)`` for every entry ``(i, j)`` (the transpose permutation).
        dtype, device: of every float tensor built here.

    Example:
        >>> ops = GraphOps.from_graph(data.graph)
        >>> gcn = ops.gcn_norm()            # D̃^-1/2 Ã D̃^-1/2, cached
        >>> h = gcn @ x                     # sparse-dense product with a fast backward
    """

    def __init__(
        self,
        src: Tensor,
        dst: Tensor,
        num_nodes: int,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        n = int(num_nodes)
        src = torch.as_tensor(src, dtype=torch.int64).cpu()
        dst = torch.as_tensor(dst, dtype=torch.int64).cpu()
        if src.shape != dst.shape or src.dim() != 1:
            raise ValueError(f"GraphOps: src and dst must be 1-D of equal length, got "
                             f"{tuple(src.shape)} and {tuple(dst.shape)}")
        if src.numel() and (int(torch.minimum(src, dst).min()) < 0
                            or int(torch.maximum(src, dst).max()) >= n):
            raise ValueError(f"GraphOps: edge endpoints must lie in [0, {n}) (num_nodes={n})")
        if bool((src == dst).any()):
            raise ValueError("GraphOps: the edge list has self-loops; build it from a graph "
                             "without them (twirls.data.graph.undirected_graph drops them)")
        loops = torch.arange(n)
        rows, cols = torch.cat([dst, loops]), torch.cat([src, loops])
        key = rows * n + cols
        order = torch.argsort(key)
        key_sorted = key[order]
        if key_sorted.numel() > 1 and bool((key_sorted[1:] == key_sorted[:-1]).any()):
            raise ValueError("GraphOps: the edge list has duplicate edges; deduplicate it first "
                             "(twirls.data.graph.undirected_graph does)")
        row, col = rows[order], cols[order]
        rev = torch.searchsorted(key_sorted, col * n + row)
        rev = rev.clamp(max=max(key_sorted.numel() - 1, 0))
        if not bool((key_sorted[rev] == col * n + row).all()):
            raise ValueError("GraphOps: the graph is not symmetric (some edge i->j has no j->i); "
                             "pass every undirected edge in both directions")
        is_loop = row == col
        # position p of the pattern takes value cat([off, diag])[gather[p]]
        num_off = src.numel()
        gather = torch.empty_like(order)
        gather[~is_loop] = torch.arange(num_off)
        gather[is_loop] = num_off + row[is_loop]

        self.n = n
        self.device = torch.device(device)
        self.dtype = dtype
        to = dict(device=self.device)
        self.row, self.col = row.to(**to), col.to(**to)
        self.crow = _crow(row, n).to(**to)
        self.is_loop = is_loop.to(**to)
        self.rev = rev.to(**to)
        self._gather = gather.to(**to)
        self.src, self.dst = col[~is_loop].to(**to), row[~is_loop].to(**to)
        self.deg = torch.bincount(self.dst, minlength=n).to(dtype)
        self._cache: dict[Hashable, Any] = {}

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_graph(
        cls,
        graph: EdgeList,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> GraphOps:
        """From a symmetric graph without self-loops: ``GraphData.graph`` (or a DGL graph)."""
        src, dst = graph.edges()
        return cls(src, dst, graph.num_nodes(), device=device, dtype=dtype)

    @property
    def num_edges(self) -> int:
        """Number of directed edges of ``A`` (twice the undirected count)."""
        return int(self.src.numel())

    def __repr__(self) -> str:
        return (f"GraphOps(n={self.n}, undirected_edges={self.num_edges // 2}, "
                f"device={self.device}, dtype={self.dtype})")

    # ------------------------------------------------------------------ caching
    def cached(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """``build()`` the first time ``key`` is asked for, the stored value afterwards."""
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def cached_for(self, key: Hashable, tensor: Tensor, build: Callable[[], Any]) -> Any:
        """Like :meth:`cached`, for a value derived from ``tensor``: rebuilt when a different
        tensor object is passed or ``tensor`` was modified in place since (one entry per key)."""
        entry = self._cache.get(key)
        if entry is None or entry[0] is not tensor or entry[1] != tensor._version:
            entry = (tensor, tensor._version, build())
            self._cache[key] = entry
        return entry[2]

    def dgl_graph(self, *, self_loops: bool) -> dgl.DGLGraph:
        """This graph for DGL's layers (GAT, GraphSAGE), cached: an edge ``j → i`` for every
        entry ``(i, j)`` of ``Ã``'s pattern (``self_loops``) or of ``A``'s."""

        def build() -> dgl.DGLGraph:
            import dgl

            src, dst = (self.col, self.row) if self_loops else (self.src, self.dst)
            return dgl.graph((src, dst), num_nodes=self.n, device=self.device)

        return self.cached(("dgl_graph", self_loops), build)

    def clear_cache(self) -> None:
        self._cache.clear()

    # ------------------------------------------------------------------ matrices
    def values(self, off: Tensor | float, diag: Tensor | float) -> Tensor:
        """Entries on the ``Ã`` pattern from per-edge ``off`` (2m,) and per-node ``diag`` (n,)."""
        like = off if isinstance(off, Tensor) else diag if isinstance(diag, Tensor) else None
        dtype = like.dtype if like is not None else self.dtype
        off_t = self._filled(off, dtype, self.num_edges)
        diag_t = self._filled(diag, dtype, self.n)
        return torch.cat([off_t, diag_t]).index_select(0, self._gather)

    def _filled(self, value: Tensor | float, dtype: torch.dtype, size: int) -> Tensor:
        """``value`` as ``(size,)`` on the device. A Python number is filled in by a kernel:
        ``torch.as_tensor(number, device=cuda)`` would copy it from the host and make the host
        wait for the GPU (seen in the CUDA sync debug mode on every attention layer)."""
        if isinstance(value, Tensor):
            return value.to(dtype=dtype, device=self.device).expand(size)
        return torch.full((size,), value, dtype=dtype, device=self.device)

    def matrix(self, off: Tensor | float, diag: Tensor | float, *,
               symmetric: bool = False) -> SparseMatrix:
        """The sparse matrix with ``M_ij = off[e]`` on edge ``e = (i, j)`` and ``M_ii = diag[i]``.

        ``symmetric=True`` promises ``M = Mᵀ`` (saves building the transpose for backward).
        A ``diag`` without a gradient (a number, or a tensor that does not require grad) makes
        the diagonal constant: the gradient of the entries is then computed on ``A``'s edges
        alone (:meth:`SparseMatrix.grad_values`).
        """
        constant = not (isinstance(diag, Tensor) and diag.requires_grad)
        return SparseMatrix(self, self.values(off, diag), symmetric=symmetric,
                            constant_diagonal=constant)

    def weighted_degree(self, edge_weight: Tensor) -> Tensor:
        """``(n,)`` row sums ``Σ_j w_ij`` of edge weights ``(2m,)`` (no diagonal)."""
        out = torch.zeros(self.n, dtype=edge_weight.dtype, device=self.device)
        return out.index_add(0, self.dst, edge_weight)

    def gcn_norm(self) -> SparseMatrix:
        """``D̃^-1/2 Ã D̃^-1/2`` with ``D̃ = D + I`` (Kipf & Welling; SGC eq. 7), cached."""

        def build() -> SparseMatrix:
            d_inv_sqrt = (self.deg + 1.0).rsqrt()
            off = d_inv_sqrt[self.dst] * d_inv_sqrt[self.src]
            return self.matrix(off, d_inv_sqrt * d_inv_sqrt, symmetric=True)

        return self.cached(("gcn_norm", self.dtype), build)

    def laplacian_dense(self, edge_weight: Tensor | None = None) -> Tensor:
        """Dense ``L = D - A`` (or ``D_γ - A_γ`` with edge weights); for small graphs/tests."""
        check_dense_size(self.n, "GraphOps.laplacian_dense")
        w = torch.ones(self.num_edges, dtype=self.dtype, device=self.device) \
            if edge_weight is None else edge_weight
        lap = torch.zeros(self.n, self.n, dtype=w.dtype, device=self.device)
        lap[self.dst, self.src] = -w
        lap[torch.arange(self.n), torch.arange(self.n)] = self.weighted_degree(w)
        return lap

    # ------------------------------------------------------------------ edge features
    def edge_sq_dist(self, y: Tensor, *, with_loops: bool = False) -> Tensor:
        """``z_e² = ||y_i - y_j||²`` for every edge ``e = (i, j)`` of ``A`` (2m,), or for every
        entry of the ``Ã`` pattern (2m + n,, zeros on the diagonal) if ``with_loops``."""
        i, j = ("row", "col") if with_loops else ("dst", "src")
        return (self.gather(y, i) - self.gather(y, j)).pow(2).sum(-1)

    def gather(self, y: Tensor, index: str) -> Tensor:
        """``y.index_select(0, ops.<index>)`` (``index``: ``"row"``, ``"col"``, ``"dst"`` or
        ``"src"``), whose backward sums each node's rows through the CSR kernel
        (:class:`_Gather`): the same bits as ``index_select``'s backward (``index_add``), ~8x
        faster on CPU (a batch of 5 seeds' ``(60800, 7)`` edge gradients on attacked Cora:
        1.5 ms -> 0.2 ms)."""
        ix: Tensor = getattr(self, index)
        if not (torch.is_grad_enabled() and y.requires_grad) or y.device.type != "cpu":
            return y.index_select(0, ix)
        sums = self.cached(("gather_sums", index, y.dtype),
                           lambda: _gather_sums(ix, self.n, y.dtype))
        return _Gather.apply(y, ix, sums)


class SparseMatrix:
    """An ``n × n`` matrix on the ``Ã`` pattern of a :class:`GraphOps`.

    ``M @ y`` and ``M.addmm(c, y)`` (``= c + M y``) are differentiable w.r.t. ``y``, ``c`` and the
    matrix entries ``values`` (if they require grad, e.g. attention weights).
    ``constant_diagonal=True`` promises that no gradient flows from the diagonal entries (they
    are numbers, as in TWIRLS' eq. 6 steps): their gradient is then 0 and not computed.
    """

    def __init__(self, ops: GraphOps, values: Tensor, *, symmetric: bool = False,
                 constant_diagonal: bool = False) -> None:
        self.ops = ops
        self.values = values
        self.symmetric = symmetric
        self.constant_diagonal = constant_diagonal
        self._csr: Tensor | None = None
        self._csr_t: Tensor | None = None

    @property
    def csr(self) -> Tensor:
        if self._csr is None:
            self._csr = _csr(self.ops, self.values.detach())
        return self._csr

    @property
    def csr_t(self) -> Tensor:
        """``Mᵀ`` in CSR form (same pattern, entries permuted by ``ops.rev``)."""
        if self.symmetric:
            return self.csr
        if self._csr_t is None:
            self._csr_t = _csr(self.ops, self.values.detach()[self.ops.rev])
        return self._csr_t

    def __matmul__(self, y: Tensor) -> Tensor:
        return _SpMM.apply(self.values, y, None, self)

    def addmm(self, add: Tensor, y: Tensor) -> Tensor:
        """``add + M @ y`` in one sparse kernel call."""
        return _SpMM.apply(self.values, y, add, self)

    def addmm_no_grad(self, add: Tensor, y: Tensor) -> Tensor:
        """``add + M @ y`` outside autograd (the kernel :meth:`addmm` runs forward)."""
        return csr_kernel.addmm(add, self.csr, y)

    def t_matmul_no_grad(self, g: Tensor) -> Tensor:
        """``Mᵀ @ g`` outside autograd (the kernel :meth:`addmm`'s backward runs); ``g``
        contiguous."""
        return csr_kernel.mm(self.csr_t, g)

    def grad_values(self, grad: Tensor, y: Tensor) -> Tensor:
        """``∂L/∂M_ij = grad_i · y_j`` on the pattern (SDDMM), for ``out = M y`` with
        ``grad = ∂L/∂out`` (contiguous); 0 on a constant diagonal."""
        return self.full_grad(self.grad_entries(grad, y))

    def grad_entries(self, grad: Tensor, y: Tensor) -> Tensor:
        """:meth:`grad_values` on the entries that need it: every entry of the pattern, or the
        edges of ``A`` alone (``ops.dst``, ``ops.src``; 15-20 % fewer on the attacked graphs)
        when the diagonal is constant. Sums of such parts go back to the pattern through
        :meth:`full_grad`."""
        ops = self.ops
        row, col = (ops.dst, ops.src) if self.constant_diagonal else (ops.row, ops.col)
        # index_select copies whole rows (~4x faster than advanced indexing on CPU); the
        # products and sums are the same operations in the same order, so bit-identical
        parts = [
            (grad.index_select(0, row[s:s + _SDDMM_CHUNK])
             * y.index_select(0, col[s:s + _SDDMM_CHUNK])).sum(-1)
            for s in range(0, row.numel(), _SDDMM_CHUNK)
        ]
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def grad_entries_sum(self, grads: Sequence[Tensor], ys: Sequence[Tensor]) -> Tensor:
        """``Σ_j`` :meth:`grad_entries` ``(grads[j], ys[j])``, the entries' gradient of ``k``
        products ``M y_j`` (``grads[j] = ∂L/∂(M y_j)``, all ``(n, C)``): the pairs side by side,
        ``[g_1 … g_k]`` and ``[y_1 … y_k]``, so that each entry is one dot product of length
        ``kC`` (``torch.sparse.sampled_addmm``, in groups of at most
        :data:`SDDMM_GROUP_WIDTH` columns) instead of ``k`` gathers, products and sums of
        width ``C``: ~5x faster for the 16 steps of width 7 after a middle attention layer on
        attacked Cora. The same sum in another order (float32 rounding, ~1e-7 relative).
        Below :data:`SDDMM_MIN_WIDTH` columns in all, :meth:`grad_entries` summed from the
        last pair to the first (bit for bit what ``k`` chained products' backward gives)."""
        width = sum(g.shape[1] for g in grads)
        if width < SDDMM_MIN_WIDTH:
            total = None
            for g, y in zip(reversed(grads), reversed(ys), strict=True):
                part = self.grad_entries(g, y)
                total = part if total is None else total + part
            return total
        dtype = grads[0].dtype
        pattern = self.ops.cached(("sddmm_pattern", self.constant_diagonal, dtype),
                                  lambda: _sddmm_pattern(self.ops, self.constant_diagonal, dtype))
        per_group = max(1, SDDMM_GROUP_WIDTH // grads[0].shape[1])
        total = None
        for s in range(0, len(grads), per_group):
            g = torch.cat(grads[s:s + per_group], dim=1)
            y = torch.cat(ys[s:s + per_group], dim=1)
            part = torch.sparse.sampled_addmm(pattern, g, y.t(), beta=0.0).values()
            total = part if total is None else total + part
        return total

    def full_grad(self, entries: Tensor) -> Tensor:
        """The pattern's ``(2m + n,)`` gradient from :meth:`grad_entries`' (0 on a constant
        diagonal)."""
        return self.ops.values(entries, 0.0) if self.constant_diagonal else entries

    def to_dense(self) -> Tensor:
        check_dense_size(self.ops.n, "SparseMatrix.to_dense")
        return self.csr.to_dense()


class _Gather(torch.autograd.Function):
    """``y.index_select(0, index)``; backward ``zeros.index_add_(0, index, grad)`` as the
    product ``S grad`` with the 0/1 matrix ``S`` of :func:`_gather_sums` (row ``r``: the
    positions ``e`` with ``index[e] = r``, in increasing order) through
    :func:`csr_kernel.mm`, which sums ``((0 + g_e1) + g_e2) + ...`` in that order just as
    ``index_add`` does (``1 · g`` is exact), so the same bits; ``index_add`` where the kernel
    does not apply."""

    @staticmethod
    def forward(ctx, y: Tensor, index: Tensor, sums: Tensor) -> Tensor:  # type: ignore[override]
        ctx.index, ctx.sums, ctx.rows = index, sums, y.shape[0]
        return y.index_select(0, index)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        grad = grad.contiguous()
        if csr_kernel.applies(ctx.sums, grad):
            return csr_kernel.mm(ctx.sums, grad), None, None
        out = grad.new_zeros((ctx.rows, *grad.shape[1:]))
        return out.index_add_(0, ctx.index, grad), None, None


def _gather_sums(index: Tensor, n: int, dtype: torch.dtype) -> Tensor:
    """The ``n x len(index)`` CSR matrix with a 1 at ``(index[e], e)``, each row's entries in
    increasing ``e`` (:class:`_Gather`'s backward)."""
    order = torch.sort(index, stable=True)[1]
    crow, col = _as_int32(_crow(index, n), order)
    return _csr_tensor(crow, col, torch.ones(index.numel(), dtype=dtype,
                                                   device=index.device), (n, index.numel()))


def _csr(ops: GraphOps, values: Tensor) -> Tensor:
    crow, col = ops.cached("csr_int32_indices", lambda: _int32_indices(ops))
    return _csr_tensor(crow, col, values, (ops.n, ops.n))


def _csr_tensor(crow: Tensor, col: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    """The CSR tensor of ``(crow, col, values)`` of ``shape``, indices taken as valid."""
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, values, shape, check_invariants=False)


def _crow(row: Tensor, n: int) -> Tensor:
    """The CSR row pointer (int64) of entries sorted by ``row``."""
    crow = torch.zeros(n + 1, dtype=torch.int64, device=row.device)
    crow[1:] = torch.cumsum(torch.bincount(row, minlength=n), 0)
    return crow


def _sddmm_pattern(ops: GraphOps, edges_only: bool, dtype: torch.dtype) -> Tensor:
    """The CSR pattern whose entries :meth:`SparseMatrix.grad_entries_sum` computes, in the
    order of :meth:`SparseMatrix.grad_entries`: ``Ã``'s (``ops.row``, ``ops.col``), or ``A``'s
    edges alone (``ops.dst``, ``ops.src``, also in CSR order); values 0."""
    if not edges_only:
        return _csr(ops, torch.zeros(ops.row.numel(), dtype=dtype, device=ops.device))
    crow, col = _as_int32(_crow(ops.dst, ops.n), ops.src)
    return _csr_tensor(crow, col, torch.zeros(col.numel(), dtype=dtype, device=ops.device),
                       (ops.n, ops.n))


def _int32_indices(ops: GraphOps) -> tuple[Tensor, Tensor]:
    """The pattern's CSR indices as int32 when they fit: MKL's sparse kernels (LP64) take
    32-bit indices, so int64 ones are converted on every product (~4 µs of a ~30 µs call on
    the Planetoid graphs); same kernel, same result."""
    return _as_int32(ops.crow, ops.col)


def _as_int32(crow: Tensor, col: Tensor) -> tuple[Tensor, Tensor]:
    """CSR indices as int32 when the entries fit (:func:`_int32_indices`), else as they are."""
    if col.numel() >= 2**31:
        return crow, col
    return crow.to(torch.int32), col.to(torch.int32)


class _SpMM(torch.autograd.Function):
    """``out = add + M y`` with backward ``Mᵀ g`` (precomputed transpose) and SDDMM for ``M``."""

    @staticmethod
    def forward(ctx, values: Tensor, y: Tensor, add: Tensor | None,
                mat: SparseMatrix) -> Tensor:  # type: ignore[override]
        ctx.mat = mat
        ctx.save_for_backward(y if values.requires_grad else None)
        if add is None:
            return csr_kernel.mm(mat.csr, y)
        return mat.addmm_no_grad(add, y)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        mat: SparseMatrix = ctx.mat
        grad = grad.contiguous()
        grad_values = grad_y = grad_add = None
        if ctx.needs_input_grad[1]:
            grad_y = mat.t_matmul_no_grad(grad)
        if ctx.needs_input_grad[2]:
            grad_add = grad
        if ctx.needs_input_grad[0]:
            (y,) = ctx.saved_tensors
            grad_values = mat.grad_values(grad, y)
        return grad_values, grad_y, grad_add, None
