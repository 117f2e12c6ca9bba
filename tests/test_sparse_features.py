"""``csr_matmul``: the same numbers as ``torch.sparse.mm`` forward and backward, with the
transposed pattern built once per feature matrix and, in wide products, the entries input dropout
zeroed skipped."""

from __future__ import annotations

import pytest
import torch

from twirls.models import sparse_features
from twirls.models.layers import dropout
from twirls.models.sparse_features import (
    DROP_ZEROS_MIN_WIDTH,
    csr_matmul,
    drop_zeros,
    transpose_pattern,
)


def bag_of_words(n: int = 300, d: int = 500, density: float = 0.02, seed: int = 0
                 ) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, d, generator=g) < density).float()
    x[0] = 0.0  # an empty row, and below an empty column
    x[:, 7] = 0.0
    return (x / x.sum(1, keepdim=True).clamp(min=1)).to_sparse_csr()


def test_forward_and_weight_gradient_equal_torch_bit_for_bit_under_dropout():
    x = bag_of_words()
    for seed in range(3):
        torch.manual_seed(seed)
        weight = torch.randn(4, x.shape[1], requires_grad=True)
        grad = torch.randn(x.shape[0], 4)
        xd = dropout(x, 0.5, True)  # a new CSR tensor around the same indices
        ours = csr_matmul(xd, weight.t())
        ours.backward(grad)
        ours_grad, weight.grad = weight.grad.clone(), None
        ref = torch.sparse.mm(xd, weight.t())
        ref.backward(grad)
        assert torch.equal(ours, ref)
        assert torch.equal(ours_grad, weight.grad)


def test_transpose_pattern_is_the_transpose_and_is_built_once():
    sparse_features._CACHE.clear()
    x = bag_of_words(seed=1)
    t = transpose_pattern(x)
    xt = torch.sparse_csr_tensor(t.t_crow, t.t_col, x.values()[t.perm], (x.shape[1], x.shape[0]),
                                 check_invariants=False)
    assert torch.equal(xt.to_dense(), x.to_dense().t())
    for _ in range(3):
        assert transpose_pattern(dropout(x, 0.5, True)) is t  # same indices: cached
    assert transpose_pattern(bag_of_words(seed=2)) is not t
    assert len(sparse_features._CACHE) == 2


def test_drop_zeros_removes_exactly_the_stored_zeros_in_either_order():
    x = dropout(bag_of_words(seed=3), 0.5, True)
    crow, col, values = drop_zeros(x.crow_indices(), x.col_indices(), x.values())
    assert values.numel() == int((x.values() != 0).sum()) < x.values().numel()
    dense = torch.sparse_csr_tensor(crow, col, values, x.shape, check_invariants=True).to_dense()
    assert torch.equal(dense, x.to_dense())
    t = transpose_pattern(x)
    crow, col, values = drop_zeros(t.t_crow, t.t_col, x.values(), t.perm)
    assert crow.dtype == t.t_crow.dtype and torch.all(values != 0)
    dense_t = torch.sparse_csr_tensor(crow, col, values, (x.shape[1], x.shape[0]),
                                      check_invariants=True).to_dense()
    assert torch.equal(dense_t, x.to_dense().t())
    full = bag_of_words(seed=3)  # nothing to drop: the same tensors back
    same = drop_zeros(full.crow_indices(), full.col_indices(), full.values())
    assert same[2] is not None and torch.equal(same[2], full.values())


@pytest.mark.parametrize("width", [DROP_ZEROS_MIN_WIDTH, 100])
def test_wide_products_skip_dropped_entries_and_give_torchs_bits(monkeypatch, width):
    calls = []
    monkeypatch.setattr(sparse_features, "drop_zeros",
                        lambda *a: calls.append(1) or drop_zeros(*a))
    x = bag_of_words()
    for seed in range(3):
        torch.manual_seed(seed)
        weight = torch.randn(width, x.shape[1], requires_grad=True)
        grad = torch.randn(x.shape[0], width)
        xd = dropout(x, 0.8, True)
        ours = csr_matmul(xd, weight.t())
        ours.backward(grad)
        ours_grad, weight.grad = weight.grad.clone(), None
        ref = torch.sparse.mm(xd, weight.t())  # the zeros stored
        ref.backward(grad)
        assert torch.equal(ours, ref)
        assert torch.equal(ours_grad, weight.grad)
    assert len(calls) == 6  # forward and backward, each time
    calls.clear()
    csr_matmul(dropout(x, 0.8, True), torch.randn(x.shape[1], DROP_ZEROS_MIN_WIDTH - 1))
    assert not calls  # narrower: the zeros stay


def test_embedding_bag_gives_mkls_bits_exactly_where_no_product_rounds():
    # python -m twirls.bench.csr_kernels: embedding_bag against torch.sparse.mm. Both add a
    # row's terms in stored order; with values 0 and 2 (0/1 features after dropout 0.5) every
    # product is exact, so the bits agree; row-normalised values round, within float32. The
    # bits are MKL's generic kernels' (an AMD CPU); its Intel kernels choose their own order at
    # some widths (csr-kernels-mkl-intel.json: 16), so elsewhere only the tolerance is checked.
    from twirls.bench.csr_kernels import compare, csr32, embedding_bag_mm
    from twirls.train.cpu import mkl_code_path

    generic = mkl_code_path() == "generic"
    gen = torch.Generator().manual_seed(0)
    binary = bag_of_words().to_dense().ne(0).float()
    keep = (torch.rand(binary.shape, generator=gen) >= 0.5).float()
    raw = csr32((binary * keep * 2.0).to_sparse_csr())
    normalised = csr32(bag_of_words())
    for width in (7, 64, 320):
        w = torch.randn(raw.shape[1], width, generator=gen)
        ours, mkl = embedding_bag_mm(raw, w), torch.sparse.mm(raw, w)
        torch.testing.assert_close(ours, mkl)
        assert torch.equal(ours, mkl) or not generic
        torch.testing.assert_close(embedding_bag_mm(normalised, w),
                                   torch.sparse.mm(normalised, w))
    from twirls.models import csr_kernel

    for x in (raw, normalised):  # the project's kernel rounds as MKL's generic kernel does
        record = compare(x, 64, repeats=1, gen=gen)
        assert record["same_bits"] == ("max_rel_diff" not in record)
        assert record["same_bits"] or not generic or x is normalised
        assert record["mkl_ms"] > 0 and record["embedding_bag_ms"] > 0
        built = csr_kernel.status().startswith("sha256:")
        assert ("csr_kernel_ms" in record) == built
        if built:
            assert record["csr_kernel_same_bits"] == ("csr_kernel_max_rel_diff" not in record)
            assert record["csr_kernel_same_bits"] or not generic
