"""Building blocks of the batched models: ``K`` seeds of one model as one set of stacked tensors.

Shapes. A hidden state is ``(K, n, h)``: seed ``k``'s ``(n, h)`` state is ``h[k]``. An input that
every seed shares (the node features before any dropout, SGC's and TWIRLS*' cached propagations)
stays ``(n, d)``, dense or sparse CSR. Sparse features after input dropout are a
:class:`SparseBatch`: the shared pattern of ``X`` with ``K`` rows of values.

* A dense layer on ``(K, n, h)`` is ``torch.baddbmm(b, H, W)``: ``K`` products in one call; on a
  shared dense ``X`` one wide product ``X [W_1 … W_K]`` (``(n, d) @ (d, K·o)``).
* A layer on sparse features is one ``O(nnz)`` sparse product per seed (:class:`_SparseLinear`),
  and a two-layer MLP on them runs seed by seed (:class:`_SparseMLP`), so that each seed's wide
  hidden state stays in the CPU's cache.
* A graph product ``M H`` multiplies ``M`` once by the ``(n, K·h)`` matrix ``[H_1 … H_K]``
  (:func:`graph_mm`): one sparse kernel call for all seeds, with :class:`GraphOps`' own
  :class:`SparseMatrix` (and its fast backward). Where a model goes back to ``(K, n, h)``
  after every product (GCNII's layers), :func:`seeds_addmm` multiplies each seed's slice in
  place of the two copies, with the same bits.
* Dropout draws seed ``k``'s masks from seed ``k``'s own random stream
  (:class:`twirls.models.masks.Masks`), so a seed's masks do not depend on which other seeds
  share its batch.

Parameters are stacked by name (:class:`Stacked`): ``p["lins.0.weight"]`` is ``(K, d, o)``, the
``K`` models' ``nn.Linear`` weights (transposed) one above the other; one Adam over the stacked
tensors is ``K`` Adams (Adam and its weight decay are elementwise, and the gradient of the
summed loss with respect to seed ``k``'s slice is that of seed ``k``'s loss).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from twirls.models import csr_kernel
from twirls.models.graph_ops import SparseMatrix
from twirls.models.layers import is_sparse
from twirls.models.masks import Masks
from twirls.models.sparse_features import drop_zeros, skips_zeros, transpose_pattern


class Stacked(nn.Module):
    """The parameters of ``K`` models of one architecture, stacked by name: ``self["a.b"]`` is
    ``(K, *shape)`` where ``model.a.b`` is ``shape``, except that a 2-D parameter (an
    ``nn.Linear`` weight, ``(out, in)``) is stored transposed, ``(K, in, out)``, the layout the
    batched products read without a copy. :meth:`seed_state` gives seed ``k``'s slices back
    under the models' own names and shapes (a ``state_dict`` of the unbatched model)."""

    def __init__(self, models: Sequence[nn.Module]) -> None:
        super().__init__()
        if any(len(list(m.buffers())) for m in models):
            raise NotImplementedError("batched training: models with buffers (batch norm) are "
                                      "not supported")
        self.names = [name for name, _ in models[0].named_parameters()]
        per_model = [dict(m.named_parameters()) for m in models]
        self.params = nn.ParameterList(
            nn.Parameter(torch.stack([_t(p[name].detach()) for p in per_model]).contiguous())
            for name in self.names)
        self.index = {name: i for i, name in enumerate(self.names)}

    def __getitem__(self, name: str) -> Tensor:
        return self.params[self.index[name]]

    def __contains__(self, name: str) -> bool:
        return name in self.index

    def seed_state(self, k: int) -> dict[str, Tensor]:
        return {name: _t(p[k].detach()).clone()
                for name, p in zip(self.names, self.params, strict=True)}

    def keep(self, index: Tensor) -> list[tuple[nn.Parameter, nn.Parameter]]:
        """Keep the seeds at positions ``index`` (in that order): each stacked parameter is
        replaced by a new one holding their slices (a parameter cannot change its shape under
        autograd). Returns the ``(old, new)`` pairs, for the optimizer's state."""
        pairs = []
        for i, old in enumerate(self.params):
            self.params[i] = nn.Parameter(old.detach().index_select(0, index))
            pairs.append((old, self.params[i]))
        return pairs


def _t(w: Tensor) -> Tensor:
    return w.t() if w.dim() == 2 else w


# ---------------------------------------------------------------------------- dropout
class SparseBatch:
    """Sparse CSR features ``X`` after per-seed input dropout: ``X``'s pattern, ``values``
    ``(K, nnz)`` (seed ``k``'s stored entries of ``X ⊙ mask_k``)."""

    def __init__(self, x: Tensor, values: Tensor) -> None:
        self.x, self.values = x, values

    def to_dense(self) -> Tensor:
        crow, col = self.x.crow_indices(), self.x.col_indices()
        return torch.stack([_csr(crow, col, v, self.x.shape).to_dense() for v in self.values])


def dropout(h: Tensor | SparseBatch, p: float, masks: Masks | None) -> Tensor | SparseBatch:
    """Per-seed dropout of ``h`` (``masks=None``: eval mode, identity). A shared ``(n, d)`` input
    becomes ``(K, n, d)`` (sparse CSR: a :class:`SparseBatch`)."""
    if masks is None or p == 0.0:
        return h
    if isinstance(h, SparseBatch):
        return SparseBatch(h.x, h.values * masks.noise(h.values.shape[1:], p))
    if is_sparse(h):  # the same draws as twirls.models.layers.dropout: the stored entries
        return SparseBatch(h, h.values() * masks.noise(h.values().shape, p))
    return h * masks.noise(h.shape[-2:], p)


def relu_dropout(h: Tensor, p: float, masks: Masks | None) -> Tensor:
    """``dropout(relu(h))`` for ``(K, n, c)`` ``h`` as one autograd node (:class:`_ReluDropout`)."""
    if masks is None or p == 0.0:
        return torch.relu(h)
    return _ReluDropout.apply(h, masks.noise(h.shape[-2:], p), 1.0 / (1.0 - p))


class _ReluDropout(torch.autograd.Function):
    """``out = relu(h) ⊙ noise``, ``noise ∈ {0, 1/(1-p)}``; backward
    ``∂h = [out > 0] ∂out / (1-p)`` (``out > 0`` exactly where ``h > 0`` and the entry is kept),
    so only ``out`` is saved: two passes over memory each way instead of four."""

    @staticmethod
    def forward(ctx, h: Tensor, noise: Tensor, scale: float) -> Tensor:  # type: ignore[override]
        out = torch.relu(h).mul_(noise)
        ctx.save_for_backward(out)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        (out,) = ctx.saved_tensors
        return torch.ops.aten.threshold_backward(grad, out, 0).mul_(ctx.scale), None, None


# ---------------------------------------------------------------------------- products
def _csr(crow: Tensor, col: Tensor, values: Tensor, shape: Sequence[int]) -> Tensor:
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, values, tuple(shape), check_invariants=False)


def _int32(index: Tensor) -> Tensor:
    """MKL's sparse kernels take 32-bit indices (int64 ones are converted on every call)."""
    return index.to(torch.int32) if index.numel() < 2**31 else index


def _seed_csr(x: Tensor, values: Tensor | None, k: int, crow: Tensor, col: Tensor,
              width: int) -> Tensor:
    """Seed ``k``'s ``X_k`` (``values=None``: ``X``) in CSR form with the indices ``crow``,
    ``col``, for a product ``width`` columns wide: without the entries its input dropout zeroed
    where :func:`~twirls.models.sparse_features.skips_zeros`."""
    if values is None:
        return _csr(crow, col, x.values(), x.shape)
    if not skips_zeros(x, width):
        return _csr(crow, col, values[k], x.shape)
    return _csr(*drop_zeros(crow, col, values[k]), x.shape)


def _transposed(x: Tensor, values: Tensor | None, width: int) -> Callable[[int], Tensor]:
    """Seed ``k``'s ``X_kᵀ`` in CSR form, ``k -> X_kᵀ`` (``values=None``: ``Xᵀ`` for every
    seed), for a product ``width`` columns wide: ``Xᵀ``'s pattern sorted once
    (:func:`transpose_pattern`), the values gathered by ``index_select`` (the same values as
    advanced indexing, ~8x faster on the CPU), without the entries input dropout zeroed where
    :func:`~twirls.models.sparse_features.skips_zeros`."""
    t = transpose_pattern(x)
    crow, col, shape = _int32(t.t_crow), _int32(t.t_col), (x.shape[1], x.shape[0])
    if values is None:
        shared = _csr(crow, col, x.values().index_select(0, t.perm), shape)
        return lambda k: shared
    if not skips_zeros(x, width):
        return lambda k: _csr(crow, col, values[k].index_select(0, t.perm), shape)
    return lambda k: _csr(*drop_zeros(crow, col, values[k], t.perm), shape)


class _SparseLinear(torch.autograd.Function):
    """``out[k] = b_k + X_k W_k`` for CSR features (``values``: ``(K, nnz)`` on ``X``'s pattern,
    or ``None``: ``X`` itself for every seed) and ``weight`` ``(K, d, o)``: one sparse product a
    seed (``O(nnz)``, as :func:`~twirls.models.sparse_features.csr_matmul`), each written into
    one ``(K, n, o)`` tensor. Backward ``∂W_k = X_kᵀ G_k`` with ``Xᵀ``'s pattern sorted once
    (:func:`~twirls.models.sparse_features.transpose_pattern`), ``∂b_k = Σ_i G_k``; no gradient
    to ``X``."""

    @staticmethod
    def forward(ctx, weight: Tensor, bias: Tensor | None, x: Tensor,
                values: Tensor | None) -> Tensor:  # type: ignore[override]
        ctx.x, ctx.values, ctx.has_bias = x, values, bias is not None
        num, _, out_dim = weight.shape
        crow, col = _int32(x.crow_indices()), _int32(x.col_indices())
        out = weight.new_empty(num, x.shape[0], out_dim)
        for k in range(num):
            xk = _seed_csr(x, values, k, crow, col, out_dim)
            if bias is None:
                csr_kernel.mm(xk, weight[k], out=out[k])
            else:  # b + X W written into out[k]
                csr_kernel.addmm(bias[k].expand(out.shape[1:]), xk, weight[k], out=out[k])
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, values = ctx.x, ctx.values
        x_t = _transposed(x, values, grad.shape[2])
        grad = grad.contiguous()
        grad_w = grad.new_empty(grad.shape[0], x.shape[1], grad.shape[2])
        for k in range(grad.shape[0]):
            csr_kernel.mm(x_t(k), grad[k], out=grad_w[k])
        grad_b = grad.sum(1) if ctx.has_bias else None
        return grad_w, grad_b, None, None


def sparse_mlp(h: Tensor | SparseBatch, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor,
               p: float, masks: Masks | None) -> Tensor:
    """``b2 + dropout(relu(b1 + X W1)) W2`` for sparse CSR features ``h`` (shared, or a
    :class:`SparseBatch`), seed by seed (:class:`_SparseMLP`): a two-layer
    :class:`~twirls.models.layers.FeedForward` on bag-of-words features."""
    x, values = (h.x, h.values) if isinstance(h, SparseBatch) else (h, None)
    draws = None if masks is None or p == 0.0 else masks
    keep = torch.is_grad_enabled() and w1.requires_grad
    return _SparseMLP.apply(w1, b1, w2, b2, x, values, draws, p, keep)


class _SparseMLP(torch.autograd.Function):
    """``out[k] = b2_k + H_k W2_k``, ``H_k = relu(b1_k + X_k W1_k) ⊙ noise_k``, one seed at a
    time, so that seed ``k``'s ``(n, hidden)`` state stays in the CPU's cache between the steps
    that read it (as a batched op each, ``K`` of them would stream through memory ~10 times an
    epoch: most of TWIRLS-base K=2's time on Cora). The masks are drawn per seed in the order
    the unbatched FeedForward draws them. Backward by hand, with the saved ``H_k``:
    ``∂W2_k = H_kᵀ G_k``, ``∂b2_k = Σ_i G_k``, ``G_H = [H_k > 0] (G_k W2_kᵀ) / (1-p)``
    (``H_k > 0`` exactly where the pre-activation is positive and the entry kept),
    ``∂W1_k = X_kᵀ G_H``, ``∂b1_k = Σ_i G_H``. The products with a narrow side (the classes)
    run transposed, ``H W2 = (W2ᵀ Hᵀ)ᵀ`` and ``∂W2 = (Gᵀ H)ᵀ``: MKL's kernels for a 7-column
    output take 3-4x as long as for a 7-row one (0.9 against 0.25 ms, and 0.65 against 0.22, on
    Cora's ``2708 x 128`` hidden state, one core with AVX-512)."""

    @staticmethod
    def forward(ctx, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor, x: Tensor,
                values: Tensor | None, masks: Masks | None, p: float,
                keep: bool) -> Tensor:  # type: ignore[override]
        num, n = w1.shape[0], x.shape[0]
        crow, col = _int32(x.crow_indices()), _int32(x.col_indices())
        out = w2.new_empty(num, n, w2.shape[2])
        hidden = []
        for k in range(num):
            xk = _seed_csr(x, values, k, crow, col, w1.shape[2])
            h = csr_kernel.addmm(b1[k].expand(n, -1), xk, w1[k]).relu_()
            if masks is not None:
                h.mul_(masks.seed_noise(k, h.shape, p))
            out[k].copy_(torch.addmm(b2[k].unsqueeze(1), w2[k].t(), h.t()).t())  # (W2ᵀ Hᵀ)ᵀ
            if keep:
                hidden.append(h)
        ctx.save_for_backward(w2)
        ctx.x, ctx.values, ctx.hidden = x, values, hidden
        ctx.scale = 1.0 if masks is None else 1.0 / (1.0 - p)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        (w2,) = ctx.saved_tensors
        x, values, hidden = ctx.x, ctx.values, ctx.hidden
        grad = grad.contiguous()
        num, width = w2.shape[0], w2.shape[1]
        x_t = _transposed(x, values, width)
        grad_w1 = grad.new_empty(num, x.shape[1], width)
        grad_b1, grad_w2 = grad.new_empty(num, width), torch.empty_like(w2)
        for k in range(num):
            h, g = hidden[k], grad[k]
            grad_w2[k].copy_(torch.mm(g.t(), h).t())  # (Gᵀ H)ᵀ
            g_h = torch.ops.aten.threshold_backward(torch.mm(g, w2[k].t()), h, 0)
            if ctx.scale != 1.0:
                g_h.mul_(ctx.scale)
            torch.sum(g_h, 0, out=grad_b1[k])
            csr_kernel.mm(x_t(k), g_h, out=grad_w1[k])
        ctx.hidden = []
        return grad_w1, grad_b1, grad_w2, grad.sum(1), None, None, None, None, None


def linear(h: Tensor | SparseBatch, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``b_k + h W_k`` for every seed: ``weight (K, d, o)`` (:class:`Stacked`'s layout),
    ``bias (K, o)``; ``h`` is ``(K, n, d)``, a :class:`SparseBatch`, or shared ``(n, d)``
    (dense or CSR). Out ``(K, n, o)``."""
    num, in_dim, out_dim = weight.shape
    if isinstance(h, SparseBatch):  # K sparse products, O(nnz) each
        return _SparseLinear.apply(weight, bias, h.x, h.values)
    if is_sparse(h):
        return _SparseLinear.apply(weight, bias, h, None)
    if h.dim() == 2:  # shared input: X [W_1 … W_K], one product of width K·o
        wide = weight.transpose(0, 1).reshape(in_dim, num * out_dim)
        out = (h @ wide).view(-1, num, out_dim).transpose(0, 1)
        return out if bias is None else out + bias.unsqueeze(1)
    if bias is None:
        return torch.bmm(h, weight)
    return torch.baddbmm(bias.unsqueeze(1), h, weight)


def narrow_linear(h: Tensor, weight: Tensor) -> Tensor:
    """``h_k W_k`` for ``(K, n, d)`` ``h`` and a narrow ``W`` ``(K, d, c)`` (the classes), as
    ``(W_kᵀ h_kᵀ)ᵀ``: a view of a ``(K, c, n)`` product, the layout MKL's batched kernels run
    ~1.5x as fast for a few columns, backward included (``(5, 3327, 128) x (5, 128, 6)``,
    one core: 8.6 against 5.7 ms)."""
    return torch.bmm(weight.transpose(1, 2), h.transpose(1, 2)).transpose(1, 2)


def to_wide(h: Tensor) -> Tensor:
    """``(K, n, c) -> (n, K·c)``: the seeds side by side, for one graph product."""
    return h.transpose(0, 1).reshape(h.shape[1], -1)


def from_wide(y: Tensor, num: int) -> Tensor:
    """``(n, K·c) -> (K, n, c)`` (a view)."""
    return y.view(y.shape[0], num, -1).transpose(0, 1)


def graph_mm(matrix: SparseMatrix, h: Tensor) -> Tensor:
    """``M h_k`` for every seed in one sparse product (``h`` ``(K, n, c)``, or shared
    ``(n, c)``)."""
    if h.dim() == 2:
        return matrix @ h
    return from_wide(matrix @ to_wide(h), h.shape[0])


def seeds_addmm(matrix: SparseMatrix, add: Tensor, h: Tensor) -> Tensor:
    """``add_k + M h_k`` for every seed, ``(K, n, c)`` in and out (``M``'s entries constant):
    one sparse product a seed on its own contiguous slice. Each entry is summed in the order
    :func:`graph_mm`'s wide product sums it, so the bits are the same, but neither side is
    copied to or from ``[H_1 … H_K]`` (:class:`_SeedsAddmm`). Off the CPU, the one wide
    product of :func:`graph_mm` (one launch for all seeds instead of ``K``)."""
    if h.device.type != "cpu":
        return from_wide(matrix.addmm(to_wide(add), to_wide(h)), h.shape[0])
    return _SeedsAddmm.apply(h, add, matrix)


class _SeedsAddmm(torch.autograd.Function):
    """``out[k] = add[k] + M h[k]``; backward ``∂h[k] = Mᵀ ∂out[k]``, ``∂add = ∂out``."""

    @staticmethod
    def forward(ctx, h: Tensor, add: Tensor,  # type: ignore[override]
                matrix: SparseMatrix) -> Tensor:
        if matrix.values.requires_grad:
            raise NotImplementedError("seeds_addmm: a matrix with trainable entries")
        ctx.matrix = matrix
        h, out = h.contiguous(), h.new_empty(h.shape)
        for k in range(h.shape[0]):  # what SparseMatrix.addmm_no_grad does, into out[k]
            csr_kernel.addmm(add[k], matrix.csr, h[k], out[k])
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        grad_h = None
        if ctx.needs_input_grad[0]:
            grad, csr_t = grad.contiguous(), ctx.matrix.csr_t
            grad_h = grad.new_empty(grad.shape)
            for k in range(grad.shape[0]):
                csr_kernel.mm(csr_t, grad[k], grad_h[k])
        return grad_h, grad if ctx.needs_input_grad[1] else None, None


def as_batch(h: Tensor, num: int) -> Tensor:
    """``h`` as ``(K, n, c)``: a shared ``(n, c)`` state repeated (a view)."""
    return h.expand(num, *h.shape) if h.dim() == 2 else h
