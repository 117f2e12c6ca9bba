"""``csr_matmul``: the same numbers as ``torch.sparse.mm`` forward and backward, with the
transposed pattern built once per feature matrix."""

from __future__ import annotations

import torch

from twirls.models import sparse_features
from twirls.models.layers import dropout
from twirls.models.sparse_features import csr_matmul, transpose_pattern


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
