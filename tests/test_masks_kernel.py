"""``masks_kernel.c``: the fast dropout masks drawn in C are NumPy's, word for word and bit for
bit, so no result depends on whether the library was built."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch

from twirls.models import masks
from twirls.models.masks import Masks

from requires import needs_masks_kernel

SHAPES = [(7, 9), (1,), (3,), (5, 2), (2708, 64), (1031,)]


def draws(ours: Masks, theirs: Masks) -> None:
    """Both draw the same sequence of masks, ``noise`` and ``seed_noise`` interleaved, a seed
    dropped from the batch half way."""
    for i, shape in enumerate(SHAPES * 2):
        if i == len(SHAPES):
            ours.keep([1, 0])
            theirs.keep([1, 0])
        for p in (0.5, 0.2, 0.8, 0.0001):
            a, b = ours.noise(shape, p), theirs.noise(shape, p)
            assert a.dtype == b.dtype and torch.equal(a, b), (shape, p)
            assert torch.equal(ours.seed_noise(1, shape, p), theirs.seed_noise(1, shape, p))


@needs_masks_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_kernels_masks_are_numpys(dtype):
    """float32 masks come from the kernel in one pass, float64 ones from its words through
    NumPy's comparison: both the very masks NumPy's PCG64 gives."""
    ours = Masks([3, 2**33 + 1, 0], "fast", dtype=dtype)
    assert all(isinstance(s, masks._Stream) for s in ours.streams)
    with masks.kernel_disabled():
        theirs = Masks([3, 2**33 + 1, 0], "fast", dtype=dtype)
    assert all(isinstance(s, np.random.PCG64) for s in theirs.streams)
    draws(ours, theirs)


@needs_masks_kernel
def test_the_kernels_words_continue_numpys_stream():
    kernel = masks._kernel()[0]
    for seed in (0, 9, 123456789):
        ours, numpys_ = masks._Stream(seed, kernel), np.random.PCG64(seed)
        for size in (0, 1, 2, 3, 4, 5, 8, 13, 1000, 4099):
            assert np.array_equal(ours.random_raw(size), numpys_.random_raw(size)), size
        state = numpys_.state["state"]
        assert int(ours.state[0]) << 64 | int(ours.state[1]) == state["state"]


def test_a_kernel_whose_stream_differs_is_refused():
    def words(state, size, out):  # not the stream's words
        (ctypes.c_uint64 * size).from_address(out)[:] = [1] * size

    problem = masks._self_check(masks._Kernel(words, lambda *args: None))
    assert problem.startswith("its words differ from NumPy's PCG64")


def test_the_epochs_benchmark_times_three_ways(monkeypatch):
    """``csr_kernels --steps``: a seed-epoch with the C kernels, without the CSR kernel's
    library and with NumPy's masks, every round, and the medians' ratios."""
    import argparse

    from twirls.bench import batched_seeds, csr_kernels

    from fixtures import toy_data

    data = toy_data()
    exp = {"dataset": "toy", "model": "twirls", "split": "a",
           "model_cfg": {"steps": 4, "lam": 1.0, "alpha": 1.0, "mlp_before": 2,
                         "input_dropout": 0.5, "dropout": 0.5},
           "train_cfg": {"epochs": 4, "lr": 0.05}}
    monkeypatch.setattr(batched_seeds, "config_inputs", lambda name, args, params: (exp, data))
    args = argparse.Namespace(rounds=2, batch=2, epochs=1)
    record = csr_kernels.step_times("toy", args, {})
    for side in ("mkl_ms", "csr_kernel_ms", "numpy_masks_ms"):
        assert len(record[side]) == 2 and all(ms > 0 for ms in record[side])
    assert record["speedup"] > 0 and record["masks_kernel_speedup"] > 0
