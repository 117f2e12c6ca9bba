"""DeepRobust's GCN, GCN-Jaccard and GCN-SVD as baselines of the adversarial table (Table 4).

The paper (appendix "Adversarial Attack Experiments"): "For all the baseline results in Table 4,
we run the implementation in the DeepRobust library or the GNNGuard official code." This module
runs DeepRobust 0.2.11's classes (``deeprobust.graph.defense.{GCN, GCNJaccard, GCNSVD}``) with
the hyper-parameters of the Mettack surrogate retrained with ReLU (Kipf & Welling's GCN): 2
layers, 16 hidden units, ReLU, dropout 0.5, Adam lr 0.01, weight decay 5e-4, 200 epochs, and
DeepRobust's validation-based model selection (``GCN._train_with_val``: keep the weights of the
epoch with the lowest validation loss or, checked after it, the highest validation accuracy).

GCN-Jaccard (Wu et al., IJCAI 2019). Before training, delete every edge whose endpoints' binary
feature vectors have Jaccard similarity ``|a & b| / |a | b|`` below ``threshold``. We use 0.01,
the value of DeepRobust's ``GCNJaccard.fit`` default, its example ``examples/graph/
test_gcn_jaccard.py`` and GNNGuard's bundled ``GCNJaccard`` (Pro-GNN instead tunes it over
{0.01, 0.02, 0.03, 0.04, 0.05, 0.1}). On the edges of the nettack Cora / Citeseer graphs the
smallest positive Jaccard value is 0.020 / 0.011, so 0.01 removes exactly the edges whose
endpoints share no word (Pro-GNN's Cora 20% graph: 986 of 6040 edges).

GCN-SVD (Entezari et al., WSDM 2020). Replace the adjacency by its rank-``k`` truncated SVD
``A_k = U_k S_k V_k^T`` (a *dense* matrix with negative entries) and train the GCN on it.
``k = 15`` follows DeepRobust's example ``examples/graph/test_gcn_svd.py``; DeepRobust's
``GCNSVD.fit`` default is ``k = 50``, GNNGuard's bundled copy defaults to ``k = 10`` and Pro-GNN
tunes ``k`` over {5, 10, 15, 50, 100, 200}. We report ``k = 15`` and ``k = 50``.
DeepRobust's GCN layers multiply the dense ``n x n`` matrix each time (``torch.spmm(adj, H)``);
here its training loop and layers run on the same normalised matrix held as its rank-``k``
factors plus the diagonal (:class:`LowRankAdjacency`), ``O(n k h)`` a product instead of
``O(n² h)``: one run on Table 4's attacked Cora, one core, 17 -> 1.6 s. The dense path's and
the factors' logits differ by float rounding only (tested); of the 300 runs of Table 4's six
GCN-SVD cells, 17 moved, no cell's mean by more than 0.02 points.

Finding: DeepRobust's GCN-SVD collapses to 11.47% on Pro-GNN's Cora 20% Meta-Self graph (k=15)
-----------------------------------------------------------------------------------------------
*What happens.* ``GCN.fit`` normalises the dense ``A_k`` with ``utils.normalize_adj_tensor``:
``d = rowsum(A_k + I)``, ``D^{-1/2} (A_k + I) D^{-1/2}``, replacing only ``inf`` (zero degree)
by 0. Because ``A_k`` has negative entries, a row sum can be negative: on Pro-GNN's
``cora_meta_adj_0.2.npz`` with ``k = 15`` exactly one node (id 1838, 8 neighbours, a test node)
has ``d = -0.0185`` (float64 SVD gives -0.0184, so it is not round-off; sigma_15 = 7.320 and
sigma_16 = 7.238 are well separated, so ``A_15`` is unique). ``(-0.0185) ** -0.5`` is NaN, which
fills row and column 1838 of the normalised matrix (4969 = 2 * 2485 - 1 NaN entries). A dense
product with a NaN *column* makes every output row NaN, so all logits are NaN from the first
epoch, the loss is NaN, and ``argmax`` of an all-NaN row is class 0: the accuracy is the share
of class 0 among the test nodes, 228/1988 = 11.47%, whatever the seed. Nothing else is involved
(same result for sparse and dense input, features untouched, CPU float32; the call pattern of
DeepRobust's example script gives the same NaN).
*Where it happens.* Only at this (graph, k): a float64 scan of k in {5, 10, 15, 20, 50, 100,
200} finds no other negative degree on Pro-GNN's 20% Cora and Citeseer graphs, and on the clean
graphs only Cora at k = 200 (2 nodes). The paper attacked its own copy of the graph, so it
would not have met this node. The same unguarded ``pow(-1/2)`` is in DeepRobust 0.2.11, its
current GitHub ``utils.py`` and GNNGuard's bundled copy; we found no issue thread about it.
*Fix (least invasive).* ``svd_variant="guarded"`` (default) keeps DeepRobust's SVD, GCN and
training loop and extends DeepRobust's own rule for degenerate degrees (``inf -> 0``) to
non-positive degrees: ``d_i <= 0`` gives ``d_i^{-1/2} = 0``, i.e. the offending node is isolated
in the normalised graph (it keeps only the bias); every other entry equals DeepRobust's
normalisation up to float rounding (< 1e-6, tested). ``info["nonpositive_degree_nodes"]``
reports how many nodes this touches (1 on Cora-20% at k=15, 0 elsewhere).
``svd_variant="gnnguard"`` is the variant of GNNGuard's official code (binarise ``A_k`` at 0.2,
default k = 10), which cannot produce negative degrees; ``svd_variant="deeprobust"`` reproduces
the collapse for the record.
*Determinism.* DeepRobust's sparse path calls ``scipy.sparse.linalg.svds`` without a generator;
with the installed SciPy 1.17 that draws ARPACK's start vector from OS entropy (not from numpy's
seeded global state), so two calls differ by ~1e-5.
We therefore compute the same ``U_k S_k V_k^T`` with ``svds`` seeded by the run seed
(:func:`low_rank_adjacency`); the test suite checks it against DeepRobust's ``truncatedSVD``.
The bits also depend on how many threads OpenBLAS (numpy's and SciPy's BLAS) uses, one per core
by default: on attacked Cora, one and two threads gave other ``U`` and another product. So the SVD
and the dense ``A_k`` (for the degrees) run on one BLAS thread, whatever the machine's core
count.
"""

from __future__ import annotations

import contextlib
import io
import time
import types

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla
import torch
from threadpoolctl import threadpool_limits
from torch import Tensor

from twirls.compat import import_deeprobust
from twirls.data.graph import Split
from twirls.defenses.common import DefenseResult, check_inputs, seeded
from twirls.train.metrics import accuracy

NAMES = ("gcn", "gcn-jaccard", "gcn-svd")
SVD_VARIANTS = ("guarded", "gnnguard", "deeprobust")

#: The Mettack surrogate's architecture, retrained with ReLU (DeepRobust ``GCN`` arguments).
GCN_HYPER = dict(nhid=16, dropout=0.5, lr=0.01, weight_decay=5e-4, with_relu=True, with_bias=True)
EPOCHS = 200
JACCARD_THRESHOLD = 0.01
SVD_RANK = 15
#: GNNGuard's GCN-SVD keeps the entries of ``A_k`` that are at least this (and sets them to 1).
GNNGUARD_SVD_THRESHOLD = 0.2


def _defense():
    return import_deeprobust("graph.defense")


def _quiet():
    """DeepRobust prints progress unconditionally; keep it out of the logs."""
    return contextlib.redirect_stdout(io.StringIO())


# --------------------------------------------------------------------------- preprocessing
def jaccard_prune(adj: sp.spmatrix, features: sp.spmatrix, threshold: float = JACCARD_THRESHOLD
                  ) -> sp.csr_matrix:
    """The graph GCN-Jaccard trains on: ``GCNJaccard.drop_dissimilar_edges`` of DeepRobust
    (binary features, numba kernel), returned as CSR without explicit zeros."""
    owner = types.SimpleNamespace(threshold=threshold, binary_feature=True)
    with _quiet():
        pruned = _defense().GCNJaccard.drop_dissimilar_edges(owner, features, adj)
    pruned = sp.csr_matrix(pruned, dtype=np.float32)
    pruned.eliminate_zeros()
    return pruned


def low_rank_factors(adj: sp.spmatrix, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(U_k S_k, V_k^T)``, the factors of the rank-``k`` truncated SVD of ``adj`` (float32,
    ``(n, k)`` and ``(k, n)``).

    Same computation as DeepRobust's ``GCNSVD.truncatedSVD`` on a sparse input (ARPACK ``svds``
    on the float32 matrix), but with the start vector drawn from ``seed`` so it is reproducible.
    """
    if not 0 < k < min(adj.shape):
        raise ValueError(f"gcn-svd: rank k={k} must be in 1..{min(adj.shape) - 1}.")
    with threadpool_limits(1, user_api="blas"):  # the same bits on any number of cores
        u, s, vt = sla.svds(sp.csr_matrix(adj, dtype=np.float32), k=k,
                            rng=np.random.default_rng(seed))
        return u * s, vt


def low_rank_adjacency(adj: sp.spmatrix, k: int, seed: int = 0) -> np.ndarray:
    """``A_k = U_k S_k V_k^T`` (dense float32): the matrix DeepRobust's ``truncatedSVD``
    returns, from :func:`low_rank_factors`."""
    return low_rank_product(*low_rank_factors(adj, k, seed))


def low_rank_product(us: np.ndarray, vt: np.ndarray) -> np.ndarray:
    """``(U_k S_k) V_k^T`` as one dense float32 matrix, on one BLAS thread (the same bits on
    any number of cores)."""
    with threadpool_limits(1, user_api="blas"):
        return us @ vt


def _with_self_loops(low_rank: np.ndarray) -> torch.Tensor:
    """``A_k + I``, dense float32."""
    return torch.as_tensor(low_rank, dtype=torch.float32) + torch.eye(low_rank.shape[0])


def _scaling(a: torch.Tensor) -> tuple[torch.Tensor, int]:
    degree = a.sum(1)
    positive = degree > 0
    r = torch.where(positive, degree.clamp_min(1e-30).pow(-0.5), torch.zeros_like(degree))
    return r, int((~positive).sum())


def guarded_scaling(low_rank: np.ndarray) -> tuple[torch.Tensor, int]:
    """``D^{-1/2}`` of ``A_k + I`` as DeepRobust's dense ``normalize_adj_tensor`` computes it
    (float32 row sums of the dense matrix), except that non-positive degrees get ``0``
    (DeepRobust zeroes only infinite ones). Returns it ``(n,)`` and the number of nodes with a
    non-positive degree."""
    return _scaling(_with_self_loops(low_rank))


def guarded_normalize(low_rank: np.ndarray) -> tuple[torch.Tensor, int]:
    """``D^{-1/2} (A_k + I) D^{-1/2}`` as a dense float32 tensor, with :func:`guarded_scaling`'s
    ``D^{-1/2}``; also the number of nodes with a non-positive degree."""
    a = _with_self_loops(low_rank)
    r, touched = _scaling(a)
    return r[:, None] * a * r[None, :], touched


class LowRankAdjacency:
    """``Â = R (A_k + I) R`` (``A_k = (U_k S_k) V_k^T``, ``R = diag(r)``,
    :func:`guarded_scaling`) held as its factors, for DeepRobust's GCN layers: their
    ``torch.spmm(adj, support)`` becomes, through torch's ``__torch_function__`` protocol,

        ``Â H = r ⊙ (U_k S_k (V_k^T (r ⊙ H))) + r ⊙ (r ⊙ H)``,

    ``O(n k h)`` instead of the dense ``O(n² h)`` (Cora's 2,485 nodes, k = 15, 16 columns: 0.1
    against 4.5 ms, one core). The same matrix as :func:`guarded_normalize`'s up to float
    rounding; gradients flow to ``H`` by autograd. Any other torch function on it is a
    ``TypeError``."""

    def __init__(self, us: Tensor, vt: Tensor, r: Tensor) -> None:
        self.us, self.vt, self.r = us, vt, r.unsqueeze(1)

    @classmethod
    def build(cls, us: np.ndarray, vt: np.ndarray, r: Tensor,
              device: torch.device) -> LowRankAdjacency:
        return cls(torch.as_tensor(us, device=device), torch.as_tensor(vt, device=device),
                   r.to(device))

    def __matmul__(self, h: Tensor) -> Tensor:
        scaled = self.r * h
        return self.r * (self.us @ (self.vt @ scaled)) + self.r * scaled

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.spmm, torch.mm) and not kwargs and len(args) == 2 \
                and isinstance(args[0], cls) and isinstance(args[1], Tensor):
            return args[0] @ args[1]
        return NotImplemented


def nonpositive_degrees(low_rank: np.ndarray) -> int:
    """How many rows of ``A_k + I`` sum to ``<= 0`` (where DeepRobust's normalisation is NaN)."""
    return int(((low_rank.sum(1) + 1.0) <= 0).sum())


# --------------------------------------------------------------------------- training
def _train(model, features, adj, labels: np.ndarray, split: Split, epochs: int, *,
           normalize: bool = True) -> None:
    """DeepRobust's ``GCN.fit`` (normalise, then ``_train_with_val``) on prepared inputs; a
    :class:`LowRankAdjacency` goes to DeepRobust's training loop as it is (:func:`_fit_as_is`)."""
    gcn = _defense().GCN
    utils = import_deeprobust("graph.utils")
    if not isinstance(adj, (torch.Tensor, LowRankAdjacency)):
        adj = utils.sparse_mx_to_torch_sparse_tensor(adj) if sp.issparse(adj) else \
            torch.as_tensor(adj, dtype=torch.float32)
    feats = utils.sparse_mx_to_torch_sparse_tensor(features)
    val = split.val.numpy() if len(split.val) else None
    with _quiet():
        if isinstance(adj, LowRankAdjacency):
            _fit_as_is(gcn, model, feats, adj, torch.as_tensor(labels), split.train.numpy(),
                       val, epochs)
        else:
            gcn.fit(model, feats, adj, torch.as_tensor(labels), split.train.numpy(), val,
                    train_iters=epochs, normalize=normalize)


def _fit_as_is(gcn, model, features: Tensor, adj: LowRankAdjacency, labels: Tensor, train,
               val, epochs: int) -> None:
    """DeepRobust's ``GCN.fit(..., normalize=False)`` step by step (initialise, move the inputs
    to the model's device, keep them, then its training loop), except that ``adj`` is kept as
    it is: ``fit`` turns anything but a plain tensor into a dense or sparse one."""
    model.device = model.gc1.weight.device
    model.initialize()
    model.adj_norm = adj
    model.features, model.labels = features.to(model.device), labels.to(model.device)
    if val is None:
        gcn._train_without_val(model, model.labels, train, epochs, False)
    else:
        gcn._train_with_val(model, model.labels, train, val, epochs, False)


def fit_evaluate(
    name: str,
    adj: sp.spmatrix,
    features,
    labels,
    split: Split,
    seed: int,
    device: str | torch.device = "cpu",
    *,
    epochs: int = EPOCHS,
    threshold: float = JACCARD_THRESHOLD,
    k: int | None = None,
    svd_variant: str = "guarded",
) -> DefenseResult:
    """Train DeepRobust's ``name`` (``gcn``, ``gcn-jaccard``, ``gcn-svd``) on ``adj`` and return
    test/validation accuracy plus preprocessing facts in ``info``. ``k`` defaults to 15
    (10 for ``svd_variant="gnnguard"``, as in GNNGuard's code)."""
    if name not in NAMES:
        raise ValueError(f"deeprobust_models: unknown model {name!r}; expected one of {NAMES}.")
    if svd_variant not in SVD_VARIANTS:
        raise ValueError(f"gcn-svd: unknown svd_variant {svd_variant!r}; "
                         f"expected one of {SVD_VARIANTS}.")
    adj, features, labels = check_inputs(adj, features, labels, split)
    device = torch.device(device)
    defense = _defense()
    cls = {"gcn": defense.GCN, "gcn-jaccard": defense.GCNJaccard, "gcn-svd": defense.GCNSVD}[name]
    start = time.perf_counter()
    info: dict = {"edges_in": int(adj.nnz // 2)}
    with seeded(seed):
        model = cls(nfeat=features.shape[1], nclass=int(labels.max()) + 1, device=device,
                    **GCN_HYPER).to(device)
        if name == "gcn":
            _train(model, features, adj, labels, split, epochs)
        elif name == "gcn-jaccard":
            pruned = jaccard_prune(adj, features, threshold)
            info.update(threshold=threshold, edges_kept=int(pruned.nnz // 2))
            _train(model, features, pruned, labels, split, epochs)
        else:
            k = k if k is not None else (10 if svd_variant == "gnnguard" else SVD_RANK)
            us, vt = low_rank_factors(adj, k, seed)
            low = low_rank_product(us, vt)  # A_k, for the degrees (and the other variants)
            info.update(k=k, svd_variant=svd_variant, nonpositive_degree_nodes=
                        nonpositive_degrees(low))
            if svd_variant == "guarded":
                r, _ = guarded_scaling(low)
                _train(model, features, LowRankAdjacency.build(us, vt, r, device), labels,
                       split, epochs)
            elif svd_variant == "deeprobust":
                _train(model, features, low, labels, split, epochs)
            else:
                kept = sp.csr_matrix((low >= GNNGUARD_SVD_THRESHOLD).astype(np.float32))
                kept.setdiag(0)  # DeepRobust's normalisation adds the self-loops
                kept.eliminate_zeros()
                info["edges_kept"] = int(kept.nnz // 2)
                _train(model, features, kept, labels, split, epochs)
        model.eval()
        with torch.no_grad():
            logits = model.predict()
    y = torch.as_tensor(labels, device=logits.device)
    info["nan_logits"] = bool(torch.isnan(logits).any())
    return DefenseResult(
        test_acc=accuracy(logits[split.test], y[split.test]),
        val_acc=accuracy(logits[split.val], y[split.val]),
        seconds=time.perf_counter() - start,
        info=info,
    )


def fit_predict(name: str, adj: sp.spmatrix, features, labels, split: Split, seed: int,
                device: str | torch.device = "cpu", **options) -> float:
    """Test accuracy of DeepRobust's ``name`` trained on ``adj`` (see :func:`fit_evaluate`)."""
    return fit_evaluate(name, adj, features, labels, split, seed, device, **options).test_acc
