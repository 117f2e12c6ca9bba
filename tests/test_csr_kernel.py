"""``twirls.models.csr_kernel``: the CSR x dense kernel sums a row's products in stored order
without fusing, which is MKL's generic kernel's arithmetic, so the models train to the same bits
with it and without it."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from contextlib import nullcontext

import pytest
import torch

from twirls.data.graph import undirected_graph
from twirls.models import GraphOps, build_model, csr_kernel
from twirls.models.csr_kernel import reference_product
from twirls.models.masks import Masks
from twirls.models.sparse_features import csr_matmul, drop_zeros, transpose_pattern
from twirls.train.batched import stack_models
from twirls.train.batched.trainer import batch_loss
from twirls.train.cpu import mkl_code_path
from twirls.train.loop import set_seed

from requires import needs_kernel

BUILT = csr_kernel.status().startswith("sha256:")
needs_generic_mkl = pytest.mark.skipif(
    mkl_code_path() != "generic", reason="MKL runs its generic kernel only on non-Intel x86 "
                                         f"CPUs (here: {mkl_code_path()})")


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """The stages' ``threads: 1``, under which the kernel runs, on these small products too."""
    monkeypatch.setattr(csr_kernel, "MIN_WORK", 0)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


SEEDS = [3, 11, 12]


@pytest.fixture
def kernel_calls(monkeypatch) -> list[int]:
    """One entry per product the kernel computes from now on."""
    calls: list[int] = []
    run = csr_kernel._run
    monkeypatch.setattr(csr_kernel, "_run", lambda *a: calls.append(1) or run(*a))
    return calls


def graph_and_features(n: int = 80, d: int = 300, seed: int = 0):
    """A random graph, ~30 % dense nonnegative CSR features, labels of 3 classes and 20
    training nodes."""
    gen = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, n, (2, 4 * n), generator=gen)
    ops = GraphOps.from_graph(undirected_graph(src, dst, n))
    x = torch.rand(n, d, generator=gen) * (torch.rand(n, d, generator=gen) < 0.3)
    return ops, x.to_sparse_csr(), torch.randint(0, 3, (n,), generator=gen), torch.arange(20)


def random_csr(rows: int = 40, cols: int = 30, seed: int = 0,
               index: torch.dtype = torch.int32) -> torch.Tensor:
    """Signed values, rows of 0-11 entries (empty rows included)."""
    gen = torch.Generator().manual_seed(seed)
    dense = torch.randn(rows, cols, generator=gen) * (torch.rand(rows, cols, generator=gen) < 0.2)
    dense[::7] = 0.0
    x = dense.to_sparse_csr()
    return torch.sparse_csr_tensor(x.crow_indices().to(index), x.col_indices().to(index),
                                   x.values(), x.shape, check_invariants=True)


def bag_of_words(seed: int = 0) -> torch.Tensor:
    """Row-normalised 0/1 features (Cora's kind) after input dropout 0.5: products round."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.rand(300, 500, generator=gen) < 0.02).float()
    x = x / x.sum(1, keepdim=True).clamp(min=1)
    return (x * (torch.rand(x.shape, generator=gen) >= 0.5) * 2.0).to_sparse_csr()


@needs_kernel
@pytest.mark.parametrize("index", [torch.int32, torch.int64])
def test_the_kernel_sums_each_row_in_stored_order_without_fusing(index):
    x = random_csr(index=index)
    gen = torch.Generator().manual_seed(1)
    for width in (5, 7, 8, 9, 15, 16, 17, 31, 35, 64, 79, 130, 320):
        w = torch.randn(x.shape[1], width, generator=gen)
        assert csr_kernel.applies(x, w)
        ours = csr_kernel.mm(x, w)
        assert torch.equal(ours, reference_product(x.crow_indices(), x.col_indices(),
                                                   x.values(), w)), width


# W ends where a page that may not be read begins: a read past W's last row would crash
GUARDED_W = """
import ctypes, mmap, torch
from twirls.models import csr_kernel
from twirls.models.csr_kernel import reference_product
csr_kernel.MIN_WORK = 0
torch.set_num_threads(1)
libc, page = ctypes.CDLL(None), mmap.PAGESIZE
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
gen = torch.Generator().manual_seed(6)
for width in (5, 7, 8, 9, 15, 35, 100):
    k = 3
    buf = mmap.mmap(-1, 2 * page)
    start = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert libc.mprotect(start + page, page, 0) == 0  # PROT_NONE
    w = torch.frombuffer(buf, dtype=torch.float32, count=k * width,
                         offset=page - 4 * k * width).view(k, width)
    w.copy_(torch.randn(k, width, generator=gen))
    col = torch.tensor([2, 0, 2, 1, 2], dtype=torch.int32)  # every row ends on W's last
    crow = torch.tensor([0, 1, 3, 3, 5], dtype=torch.int32)
    x = torch.sparse_csr_tensor(crow, col, torch.randn(5, generator=gen), (4, k),
                                check_invariants=True)
    assert csr_kernel.applies(x, w)
    assert torch.equal(csr_kernel.mm(x, w), reference_product(crow, col, x.values(), w)), width
print("ok")
"""


@needs_kernel
def test_the_kernel_reads_and_writes_within_its_operands():
    """Below 64 columns a row's sums are read and stored as whole 8-lane vectors; the lanes
    past the row's end must never reach beyond ``W`` or ``out``."""
    run = subprocess.run([sys.executable, "-c", GUARDED_W], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
    x = random_csr()
    gen = torch.Generator().manual_seed(7)
    for width in (5, 7, 9, 15, 35, 100):
        w = torch.randn(x.shape[1], width, generator=gen)
        size = x.shape[0] * width
        buf = torch.full((size + 64,), 7.0)
        out = buf[:size].view(x.shape[0], width)
        csr_kernel.mm(x, w, out=out)
        assert torch.equal(out, reference_product(x.crow_indices(), x.col_indices(),
                                                  x.values(), w)), width
        assert torch.equal(buf[size:], torch.full((64,), 7.0)), width


@needs_kernel
@needs_generic_mkl
def test_the_kernel_gives_mkls_bits():
    gen = torch.Generator().manual_seed(2)
    for x in (bag_of_words(), random_csr(300, 300, seed=3)):
        for width in (5, 6, 7, 9, 16, 30, 35, 64, 100, 128, 320):
            w = torch.randn(x.shape[1], width, generator=gen)
            add = torch.randn(x.shape[0], width, generator=gen)
            bias = torch.randn(width, generator=gen).expand(x.shape[0], -1)
            out = torch.empty(x.shape[0], width)
            with csr_kernel.disabled():
                mkl = torch.mm(x, w)
                assert torch.equal(mkl, torch.sparse.mm(x, w))
                mkl_add, mkl_bias = torch.addmm(add, x, w), bias.clone().addmm_(x, w)
                # where the kernel does not apply, addmm is torch's: the same bits as in place
                assert torch.equal(csr_kernel.addmm(bias, x, w), mkl_bias)
                assert torch.equal(csr_kernel.addmm(bias, x, w, out=out), mkl_bias)
            assert torch.equal(csr_kernel.mm(x, w), mkl)
            assert torch.equal(csr_kernel.mm(x, w, out=out), mkl)
            assert torch.equal(csr_kernel.addmm(add, x, w), mkl_add)
            assert torch.equal(csr_kernel.addmm(bias, x, w), mkl_bias)
            assert torch.equal(csr_kernel.addmm(bias, x, w, out=out), mkl_bias)


def test_other_products_go_to_torch(monkeypatch):
    x = random_csr()
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(x.shape[1], 64, generator=gen)
    narrow = torch.randn(x.shape[1], csr_kernel.MIN_WIDTH - 1, generator=gen)
    tracked = w.clone().requires_grad_()
    double = torch.sparse_csr_tensor(x.crow_indices(), x.col_indices(), x.values().double(),
                                     x.shape, check_invariants=True)
    assert not csr_kernel.applies(x, narrow)
    assert not csr_kernel.applies(double, w.double())
    assert not csr_kernel.applies(x, w.t().contiguous().t())  # not row-major
    assert not csr_kernel.applies(x, tracked)  # autograd would have to record the product
    monkeypatch.setattr(csr_kernel, "MIN_WORK", x._nnz() * 64 + 1)
    assert not csr_kernel.applies(x, w)  # too small a product to pay for the call
    monkeypatch.setattr(csr_kernel, "MIN_WORK", 0)
    with torch.no_grad():
        assert csr_kernel.applies(x, tracked) == BUILT
    with csr_kernel.disabled():
        assert not csr_kernel.applies(x, w)
    torch.set_num_threads(2)
    assert not csr_kernel.applies(x, w)
    torch.set_num_threads(1)
    assert torch.equal(csr_kernel.mm(x, narrow), torch.mm(x, narrow))
    product = csr_kernel.mm(x, tracked)
    product.sum().backward()  # torch's own product, with its gradient
    assert product.grad_fn is not None and tracked.grad is not None


def test_a_kernel_that_rounds_otherwise_is_refused():
    signature = ctypes.CFUNCTYPE(None, *[ctypes.c_int64] * 3, *[ctypes.c_void_p] * 5)

    def kernel(rounding):
        def run(n, m, k, crow, col, val, w, out):
            def tensor(address, count, dtype):
                kind = ctypes.c_int32 if dtype == torch.int32 else ctypes.c_float
                return torch.frombuffer((kind * count).from_address(address), dtype=dtype)

            crow_t = tensor(crow, n + 1, torch.int32)
            nnz = int(crow_t[-1])
            col_t, val_t = tensor(col, nnz, torch.int32), tensor(val, nnz, torch.float32)
            w_t = tensor(w, k * m, torch.float32).view(k, m)
            tensor(out, n * m, torch.float32).copy_(rounding(crow_t, col_t, val_t, w_t).view(-1))
        return signature(run)

    def in_double(crow, col, val, w):  # sums in float64, rounded once (as a fused kernel may)
        return reference_product(crow, col, val.double(), w.double()).float()

    assert csr_kernel._self_check(kernel(reference_product)) == ""
    assert "differ" in csr_kernel._self_check(kernel(in_double))


@needs_kernel
@needs_generic_mkl
@pytest.mark.parametrize(("name", "cfg"), [
    ("twirls", {"steps": 4, "lam": 1.0, "alpha": 1.0, "mlp_before": 2, "hidden": 64,
                "input_dropout": 0.5, "dropout": 0.5}),  # _SparseMLP, then 3 x 3 classes
    ("mlp", {"hidden": 32, "input_dropout": 0.2}),  # _SparseLinear with a bias
    ("gcn", {"hidden": 16}),  # the graph products on the 3 seeds' 48 columns
    ("twirls", {"steps": 4, "lam": 1.0, "alpha": 1.0, "mlp_before": 2, "hidden": 16,
                "input_dropout": 0.5, "dropout": 0.5, "variant": "reference",
                "attention": {"p": 0.1, "tau": 0.2, "T": 2.0}}),  # GraphOps.gather's backward
])
def test_training_gives_the_same_bits_with_and_without_the_kernel(kernel_calls, name, cfg):
    ops, x, labels, train = graph_and_features()
    runs = []
    for use in (True, False):
        with csr_kernel.disabled() if not use else nullcontext():
            models = []
            for seed in SEEDS:
                set_seed(seed)
                models.append(build_model(name, cfg, x.shape[1], 3))
            net = stack_models(models).train()
            logits = net(ops, x, Masks(SEEDS, "fast"))
            batch_loss(logits, labels, train).sum().backward()
            runs.append([logits.detach()] + [p.grad for p in net.parameters()])
            if use:
                assert kernel_calls  # the kernel ran: forward and backward
    for ours, mkl in zip(*runs, strict=True):
        assert torch.equal(ours, mkl)


@needs_kernel
@needs_generic_mkl
def test_unbatched_products_give_the_same_bits(kernel_calls):
    """One model's feature product (csr_matmul) and a graph product (SparseMatrix), forward and
    backward."""
    ops, x, _, _ = graph_and_features()
    gen = torch.Generator().manual_seed(5)
    weight = torch.randn(x.shape[1], 64, generator=gen)
    grad = torch.randn(x.shape[0], 64, generator=gen)
    matrix = ops.gcn_norm()
    results = []
    for use in (True, False):
        with csr_kernel.disabled() if not use else nullcontext():
            w = weight.clone().requires_grad_()
            h = csr_matmul(x, w)
            y = matrix.addmm(h, h)
            y.backward(grad)
            results.append((y.detach(), w.grad))
    assert len(kernel_calls) == 4  # x w, then M h, then their backward: Mᵀ g and xᵀ g
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])


@needs_kernel
@pytest.mark.parametrize("with_loops", [False, True])
@pytest.mark.parametrize("width", [5, 7, 67])
def test_gather_backward_gives_index_selects_bits(kernel_calls, with_loops, width):
    """GraphOps.gather (edge_sq_dist's rows) sums its gradient through the kernel with
    index_select's bits (index_add: in edge order, from +0), signed zeros included."""
    ops, _, _, _ = graph_and_features()
    gen = torch.Generator().manual_seed(width)
    y = torch.randn(ops.n, width, generator=gen)
    edges = ops.row.numel() if with_loops else ops.num_edges
    grad = torch.randn(edges, width, generator=gen)
    grad[::5] = -0.0
    for index in (("row", "col") if with_loops else ("dst", "src")):
        ours, theirs = y.clone().requires_grad_(), y.clone().requires_grad_()
        ops.gather(ours, index).backward(grad)
        theirs.index_select(0, getattr(ops, index)).backward(grad)
        assert torch.equal(ours.grad.view(torch.int32), theirs.grad.view(torch.int32))
    assert len(kernel_calls) == 2


def numpys_drop_zeros(crow, col, values, order=None):
    """:func:`~twirls.models.sparse_features.drop_zeros` as NumPy computes it."""
    with csr_kernel.disabled():
        return drop_zeros(crow, col, values, order)


@needs_kernel
def test_the_librarys_drop_zeros_keeps_what_numpys_keeps():
    """The one-pass copy without stored zeros: the same indices and value bits as NumPy's
    bookkeeping, in stored order and gathered by the transposed pattern's permutation, for
    ``-0`` (dropped), ``NaN`` (kept), empty rows, a matrix of zeros, and nothing to drop."""
    x = random_csr(60, 50, seed=4)
    values = x.values().clone()
    values[::3] = 0.0
    values[1::11] = -0.0
    values[2::13] = float("nan")
    t = transpose_pattern(x)
    cases = [(x.crow_indices(), x.col_indices(), values, None),
             (t.t_crow, t.t_col, values, t.perm),
             (x.crow_indices(), x.col_indices(), torch.zeros_like(values), None),
             (t.t_crow, t.t_col, torch.zeros_like(values), t.perm)]
    for crow, col, vals, order in cases:
        ours = csr_kernel.drop_zeros(crow, col, vals, order)
        assert ours is not None and ours[2].numel() < col.numel()
        theirs = numpys_drop_zeros(crow, col, vals, order)
        for a, b in zip(ours, theirs, strict=True):
            assert a.dtype == b.dtype and torch.equal(a.view(torch.int32), b.view(torch.int32))
        assert torch.equal(drop_zeros(crow, col, vals, order)[1], theirs[1])
    full = x.values()  # nothing to drop: the inputs back, the values gathered by the order
    crow, col = x.crow_indices(), x.col_indices()
    assert drop_zeros(crow, col, full)[2] is full
    assert torch.equal(drop_zeros(t.t_crow, t.t_col, full, t.perm)[2], full[t.perm])
    assert csr_kernel.drop_zeros(crow.long(), col.long(), values) is None  # int64: NumPy's
    with csr_kernel.disabled():
        assert csr_kernel.drop_zeros(crow, col, values) is None


def test_a_runs_journal_key_names_the_kernel():
    from twirls.train.journal import machine

    assert f"csr_kernel={csr_kernel.status()}" in machine()


