"""Mettack (Zügner & Günnemann, ICLR 2019), Meta-Self variant: a fast exact re-implementation.

This is the attack that produces the paper's "attacked Cora / Citeseer" graphs (section
"Adversarial Attack Results"; DeepRobust's ``Metattack`` with ``lambda_=0``,
``ll_constraint=False``). Each greedy step

1. trains a linearised two-layer GCN ``logits = Â² X W1 W2`` (``Â`` of eq. (7)) from fresh random
   weights for ``train_iters`` steps of SGD with momentum on the training labels,
2. differentiates the self-training loss on the unlabelled nodes *through the whole unrolled
   training* with respect to every entry of the adjacency matrix (the meta-gradient),
3. scores every node pair by ``meta_grad * (1 - 2 A)``, shifts the scores to be >= 0, zeroes the
   diagonal and the flips that would leave a node without neighbours, and flips the argmax pair.

It follows DeepRobust 0.2.11 operation by operation where that decides the outcome: the same
random stream for the inner weights (``U(±1/sqrt(fan_out))`` drawn from the global torch
generator once at construction and once per flip), float32, ``Â`` with self-loops and
``d^{-1/2}`` computed as ``rowsum.pow(-1/2)``, the zero gradient on already flipped pairs (they
sit at DeepRobust's ``clamp(-1, 1)`` bound) and on the diagonal, the singleton filter, the
``- min`` shift and the first-index argmax. Only the order of floating-point sums differs, so the
flips are the same unless two candidates tie to float32 precision (see the tests and
``twirls.bench.mettack``).

What makes it fast (about 0.2-0.4 s per flip on Cora instead of 18-35 s) is algebra, not
approximation, valid because the surrogate is linear:

* The training loss only sees ``F = (Â² X)[train]`` (``n_train × d``), and every gradient step
  adds ``F^T (·)`` to ``W1``, so ``W1_t = W1_0 + F^T Γ_t`` and the unrolled training runs on the
  ``n_train × n_train`` Gram matrix ``K = F F^T`` (autograd through 100 steps on tiny tensors).
* The meta-gradient w.r.t. the dense ``Â`` is never formed as a sum of 100 dense products:
  with ``Q = Â B``, ``B = Â X`` and ``E = ∂L/∂Q`` it is ``E B^T + Â E X^T``, where ``E`` is
  ``(1-λ) R W^T`` (rank C) on unlabelled rows and ``∂L/∂F`` on training rows. That is a rank-2C
  product plus two sparse-times-dense products: two dense ``N × N`` buffers per flip.
* The chain rule through ``Â = D^{-1/2}(A+I)D^{-1/2}`` only needs that matrix on the edges
  (degree terms) and a broadcast scaling; the ``(1 - 2A)`` sign, the flipped pairs and the
  singleton filter touch only edge positions.

Two engines compute the same algebra. ``engine="scipy"`` (the default on the CPU) does the sparse
products with scipy and the dense ``n × n`` work with torch on the CPU. ``engine="torch"`` (the
default on any other device, e.g. ``device="cuda"``) does all of it with torch on ``device``: the
features as a dense ``(n, d)`` tensor, ``Â`` as a sparse CSR tensor (computed on the CPU as
above, then copied, so its entries are the same bits), the unrolled inner training, the score
buffer and the argmax. The inner weights are still drawn on the CPU generator and then copied,
so both engines consume the same random stream. Only the order of floating-point sums differs
between the engines, so they make the same flips unless two candidates tie to float32 precision
(tested on the CPU with ``engine="torch"``, and on a GPU by ``tests/test_gpu.py``).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from tqdm import tqdm

from twirls.attack.normalize import (
    DeviceAdjacency,
    NormalizedAdjacency,
    normalize_edges,
    to_torch,
)
from twirls.files import replacing


class Metattack:
    """Greedy Meta-Self structure attack on a symmetric 0/1 graph.

    Args:
        adj: ``(n, n)`` symmetric 0/1 adjacency without self-loops (scipy sparse).
        features: ``(n, d)`` node features (scipy sparse or dense; 0/1 bag of words here).
        labels: ``(n,)`` true class ids (used on ``idx_train``).
        idx_train: nodes whose true labels train the inner model.
        idx_unlabeled: nodes of the self-training attack loss (validation + test).
        labels_self_training: ``(n,)`` targets of that loss, from the surrogate
            (:func:`twirls.attack.surrogate.self_training_labels`).
        hidden: hidden width of the linearised GCN (DeepRobust: the surrogate's ``nhid``).
        train_iters, lr, momentum: inner training (DeepRobust defaults 100, 0.1, 0.9).
        lambda_: weight of the labelled loss in the attack loss (0 = Meta-Self).
        generator: CPU torch generator for the inner weights; ``None`` = the global one, as in
            DeepRobust (seed it with ``torch.manual_seed`` before constructing). The weights
            are drawn on the CPU whatever ``device`` is.
        device: where the dense ``n × n`` work runs (``"cpu"``, ``"cuda"``, ``"cuda:1"``...).
        engine: ``"scipy"`` (CPU only), ``"torch"`` (any device) or ``"auto"`` (scipy on the
            CPU, torch elsewhere); see the module doc.

    Construction draws one set of inner weights, as DeepRobust's constructor does.
    """

    ENGINES = ("auto", "scipy", "torch")

    def __init__(
        self,
        adj: sp.spmatrix,
        features: sp.spmatrix | np.ndarray,
        labels: np.ndarray | torch.Tensor,
        idx_train: np.ndarray | torch.Tensor,
        idx_unlabeled: np.ndarray | torch.Tensor,
        labels_self_training: np.ndarray | torch.Tensor,
        *,
        hidden: int = 16,
        train_iters: int = 100,
        lr: float = 0.1,
        momentum: float = 0.9,
        lambda_: float = 0.0,
        generator: torch.Generator | None = None,
        device: str | torch.device = "cpu",
        engine: str = "auto",
    ) -> None:
        n = adj.shape[0]
        _check_graph(adj, features, n)
        if not 0.0 <= lambda_ <= 1.0:
            raise ValueError(f"Metattack: lambda_={lambda_} must be in [0, 1] (0 = Meta-Self).")
        self.device = torch.device(device)
        if engine not in self.ENGINES:
            raise ValueError(f"Metattack: engine must be one of {self.ENGINES}, got {engine!r}.")
        if engine == "auto":
            engine = "scipy" if self.device.type == "cpu" else "torch"
        if engine == "scipy" and self.device.type != "cpu":
            raise ValueError(f"Metattack: engine='scipy' runs on the CPU only, not on "
                             f"{self.device}; use engine='torch' (or 'auto').")
        self.engine = engine
        self.n = n
        self.x = sp.csr_matrix(features, dtype=np.float32)
        self.labels = _as_index(labels, "labels", None)
        self.y_self = _as_index(labels_self_training, "labels_self_training", None)
        self.idx_train = _as_index(idx_train, "idx_train", n)
        self.idx_unlabeled = _as_index(idx_unlabeled, "idx_unlabeled", n)
        for name, v in (("labels", self.labels), ("labels_self_training", self.y_self)):
            if len(v) != n:
                raise ValueError(f"Metattack: {name} has {len(v)} entries for {n} nodes.")
        self.nclass = int(max(self.labels.max(), self.y_self.max())) + 1
        self.hidden, self.train_iters = hidden, train_iters
        self.lr, self.momentum, self.lambda_ = lr, momentum, lambda_
        self.generator = generator

        upper = sp.triu(adj, k=1).tocoo()
        self._original = np.sort(upper.row.astype(np.int64) * n + upper.col.astype(np.int64))
        self._keys = self._original.copy()  # current edges i < j as sorted keys i * n + j
        self.flips: list[tuple[int, int]] = []
        # reused every flip: memory does not grow
        self._scores = torch.empty(n, n, device=self.device)
        if engine == "torch":  # inputs on the device, once
            dev = self.device
            self._x_dev = torch.from_numpy(self.x.toarray()).to(dev)
            self._train_dev = torch.from_numpy(self.idx_train).to(dev)
            self._unl_dev = torch.from_numpy(self.idx_unlabeled).to(dev)
            self._y_unl_dev = torch.from_numpy(self.y_self[self.idx_unlabeled]).to(dev)
            self._y_train_dev = torch.from_numpy(self.labels[self.idx_train]).to(dev)
        self._draw_weights()  # DeepRobust's constructor draws one set of weights

    # ----------------------------------------------------------------------------- state
    @property
    def n_perturbations(self) -> int:
        """Number of node pairs that differ from the clean graph."""
        return len(np.setxor1d(self._keys, self._original, assume_unique=True))

    def modified_adj(self) -> sp.csr_matrix:
        """The current (perturbed) adjacency, symmetric CSR float32."""
        row, col = np.divmod(self._keys, self.n)
        upper = sp.csr_matrix((np.ones(len(row), np.float32), (row, col)), shape=(self.n,) * 2)
        return (upper + upper.T).tocsr()

    def fingerprint(self) -> str:
        """Hash of everything that determines the attack (inputs and hyper-parameters)."""
        h = hashlib.sha256()
        for a in (self._original, self.x.indptr, self.x.indices, self.x.data, self.labels,
                  self.y_self, self.idx_train, self.idx_unlabeled):
            h.update(np.ascontiguousarray(a).tobytes())
        h.update(repr((self.hidden, self.train_iters, self.lr, self.momentum,
                       self.lambda_)).encode())
        return h.hexdigest()

    def _rng_state(self) -> torch.Tensor:
        return (torch.get_rng_state() if self.generator is None
                else self.generator.get_state())

    def _set_rng_state(self, state: torch.Tensor) -> None:
        if self.generator is None:
            torch.set_rng_state(state)
        else:
            self.generator.set_state(state)

    def save_checkpoint(self, path: Path) -> None:
        """Write flips done so far and the random state (temp file + rename: never half)."""
        with replacing(Path(path), keep_suffix=True) as tmp:  # np.savez wants the .npz
            np.savez(tmp, flips=np.asarray(self.flips, dtype=np.int64).reshape(-1, 2),
                     rng_state=self._rng_state().numpy(), fingerprint=np.array(self.fingerprint()))

    def load_checkpoint(self, path: Path) -> int:
        """Replay the flips of a checkpoint written by :meth:`save_checkpoint`; returns their
        number. Refuses a checkpoint of another graph or other hyper-parameters."""
        if self.flips:
            raise RuntimeError("Metattack.load_checkpoint: call it before any flip.")
        with np.load(path) as z:
            if str(z["fingerprint"]) != self.fingerprint():
                raise ValueError(
                    f"Checkpoint {path} belongs to a different attack (other data, split, "
                    f"surrogate labels or hyper-parameters); delete it to start afresh.")
            flips, state = z["flips"], torch.from_numpy(z["rng_state"].copy())
        for i, j in flips.tolist():
            self._toggle(i, j)
            self.flips.append((i, j))
        self._set_rng_state(state)
        return len(flips)

    # ----------------------------------------------------------------------------- attack
    def attack(self, n_perturbations: int, *, progress: bool = True,
               checkpoint: Path | None = None, checkpoint_every: int = 25) -> sp.csr_matrix:
        """Flip greedily until ``n_perturbations`` greedy steps are done; return the graph.

        With ``checkpoint``, resumes from that file if it exists and rewrites it every
        ``checkpoint_every`` flips, so an interrupted run loses at most that many flips.
        """
        if checkpoint is not None and Path(checkpoint).exists() and not self.flips:
            self.load_checkpoint(checkpoint)
        bar = tqdm(total=n_perturbations, initial=len(self.flips), desc="Mettack (fast)",
                   unit="flip", disable=not progress, dynamic_ncols=True)
        with bar:
            while len(self.flips) < n_perturbations:
                self.step()
                bar.update(1)
                if checkpoint is not None and (len(self.flips) % checkpoint_every == 0
                                               or len(self.flips) == n_perturbations):
                    self.save_checkpoint(checkpoint)
        return self.modified_adj()

    def step(self) -> tuple[int, int]:
        """One greedy flip; returns the flipped pair ``(i, j)`` (``i < j``)."""
        scores = self.scores()
        i, j = first_argmax(scores)
        self._toggle(i, j)
        self.flips.append((i, j))
        return i, j

    def scores(self) -> torch.Tensor:
        """DeepRobust's ``adj_meta_score`` of the current graph (a view of a reused buffer).

        ``(meta_grad * (1 - 2A) - min)``, zero on the diagonal, times the singleton mask.
        """
        norm = self._normalized()
        if self.engine == "torch":
            dev = norm.to(self.device)
            grad = self._meta_gradient_torch(norm, dev)  # in self._scores
            row, col, d = dev.row, dev.col, dev.d  # edges, both ways
        else:
            grad = self.meta_gradient(norm)  # in self._scores
            row, col = torch.from_numpy(norm.row), torch.from_numpy(norm.col)  # edges, both ways
            d = norm.d
        grad[row, col] = -grad[row, col]  # * (1 - 2A)
        grad.sub_(grad.min())
        grad.fill_diagonal_(0.0)
        # DeepRobust's singleton mask 1 - [deg_j = 1] A_ij - [deg_i = 1] A_ji (differs from 1
        # only on edges at degree-1 nodes; -1 when both ends have degree 1).
        leaf = d == 2.0
        mask = 1.0 - leaf[col].float() - leaf[row].float()
        hit = mask != 1.0
        grad[row[hit], col[hit]] *= mask[hit]
        return grad

    # ----------------------------------------------------------------------------- internals
    def _normalized(self) -> NormalizedAdjacency:
        row, col = np.divmod(self._keys, self.n)
        return normalize_edges(row, col, self.n)

    def _toggle(self, i: int, j: int) -> None:
        key = min(i, j) * self.n + max(i, j)
        pos = int(np.searchsorted(self._keys, key))
        if pos < len(self._keys) and self._keys[pos] == key:
            self._keys = np.delete(self._keys, pos)
        else:
            self._keys = np.insert(self._keys, pos, key)

    def _draw_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Fresh inner weights, drawn like DeepRobust's ``Metattack._initialize``."""
        w1 = torch.empty(self.x.shape[1], self.hidden)
        w1.uniform_(-1.0 / math.sqrt(self.hidden), 1.0 / math.sqrt(self.hidden),
                    generator=self.generator)
        w2 = torch.empty(self.hidden, self.nclass)
        w2.uniform_(-1.0 / math.sqrt(self.nclass), 1.0 / math.sqrt(self.nclass),
                    generator=self.generator)
        return w1, w2

    def _inner_train(self, f: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Unrolled SGD with momentum on ``logits = F W1 W2``; returns ``(W1_T, W2_T)`` as
        differentiable functions of ``f`` (which requires grad).

        ``W1_t = W1_0 + F^T Γ_t``: a step only needs ``Z = F W1 = P + K Γ`` with ``P = F W1_0``
        and ``K = F F^T``, and ``∂loss/∂W1 = F^T ∂loss/∂Z`` becomes ``Γ``'s velocity update.
        The gradient of the mean cross-entropy is written out, ``(softmax - onehot) / n``,
        so autograd differentiates the unrolled loop once (no double backward).
        """
        w1_0, w2 = (w.to(f.device) for w in self._draw_weights())  # drawn on the CPU
        y = torch.from_numpy(self.labels[self.idx_train]).to(f.device)
        target = F.one_hot(y, self.nclass).float() / len(y)
        p, k = f @ w1_0, f @ f.T
        gamma = torch.zeros_like(p)
        v_gamma, v2 = torch.zeros_like(p), torch.zeros_like(w2)
        for _ in range(self.train_iters):
            z = p + k @ gamma
            g_logits = torch.softmax(z @ w2, dim=1) / len(y) - target
            g_z, g_w2 = g_logits @ w2.T, z.T @ g_logits
            v_gamma = self.momentum * v_gamma + g_z
            v2 = self.momentum * v2 + g_w2
            gamma = gamma - self.lr * v_gamma
            w2 = w2 - self.lr * v2
        return w1_0 + f.T @ gamma, w2

    def meta_gradient(self, norm: NormalizedAdjacency | None = None) -> torch.Tensor:
        """DeepRobust's ``adj_grad``: d(attack loss)/d(adj_changes), symmetric ``(n, n)``.

        Equal to ``s_i s_j (Ĝ_ij + Ĝ_ji) + c_i + c_j`` with ``Ĝ = ∂L/∂Â`` and ``c`` the chain
        rule through the degrees, zero on the diagonal and on already flipped pairs. Written
        into (and returned as) the reused ``(n, n)`` buffer, on ``device``.
        """
        norm = self._normalized() if norm is None else norm
        if self.engine == "torch":
            return self._meta_gradient_torch(norm, norm.to(self.device))
        a = norm.matrix
        f = torch.from_numpy(np.asarray((a[self.idx_train] @ a @ self.x).todense()))
        f.requires_grad_(True)  # F = (Â² X)[train]
        w1, w2 = self._inner_train(f)
        e_train, r_pad = self._loss_gradients(a, f, w1, w2)
        z = self._scaled_adjacency_gradient(norm, e_train, r_pad, (w1 @ w2).detach().numpy())
        n = self.n
        row = torch.from_numpy(np.concatenate([norm.row, np.arange(n)]))
        col = torch.from_numpy(np.concatenate([norm.col, np.arange(n)]))
        return self._symmetric_gradient(z, row, col, norm.d)

    def _symmetric_gradient(self, z: torch.Tensor, row: torch.Tensor, col: torch.Tensor,
                            d: torch.Tensor) -> torch.Tensor:
        """From ``Z = diag(s) Ĝ diag(s)`` to the gradient w.r.t. the symmetric changes, in the
        score buffer. ``row``/``col``: every entry of ``A + I`` (on ``z``'s device)."""
        # Degree part of the chain rule: c_i = -1/(2 d_i) Σ_{l ∈ N(i) ∪ {i}} (Z_il + Z_li).
        n = self.n
        per_entry = z[row, col] + z[col, row]
        c = torch.zeros(n, device=z.device).index_add_(0, row, per_entry).mul_(-0.5 / d)
        z.add_(c[:, None])
        grad = torch.add(z, z.T, out=self._scores)
        grad.fill_diagonal_(0.0)
        changed = np.setxor1d(self._keys, self._original, assume_unique=True)
        ci, cj = (torch.from_numpy(t).to(z.device) for t in np.divmod(changed, n))
        grad[ci, cj] = 0.0  # flipped pairs sit on DeepRobust's clamp bound: zero gradient
        grad[cj, ci] = 0.0
        return grad

    # ------------------------------------------------------------------ engine "torch"
    def _meta_gradient_torch(self, norm: NormalizedAdjacency,
                             dev: DeviceAdjacency) -> torch.Tensor:
        """:meth:`meta_gradient` with every product in torch on ``self.device``."""
        a, x = dev.matrix, self._x_dev
        f = _spmm(a, _spmm(a, x))[self._train_dev]  # F = (Â² X)[train]
        f.requires_grad_(True)
        w1, w2 = self._inner_train(f)
        e_train, r_pad = self._loss_gradients_torch(dev, f, w1, w2)
        z = self._scaled_adjacency_gradient_torch(norm, dev, e_train, r_pad,
                                                  (w1 @ w2).detach())
        loops = torch.arange(self.n, device=self.device)
        return self._symmetric_gradient(z, torch.cat([dev.row, loops]),
                                        torch.cat([dev.col, loops]), dev.d)

    def _loss_gradients_torch(self, dev: DeviceAdjacency, f: torch.Tensor, w1: torch.Tensor,
                              w2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_loss_gradients` in torch on the device (``R`` as a device tensor)."""
        a, x, lam = dev.matrix, self._x_dev, self.lambda_
        unl = self._unl_dev
        outputs, grads = [], []
        r_pad = torch.zeros(self.n, self.nclass, device=self.device)
        if lam < 1.0:
            with torch.no_grad():
                w1d, w2d = w1.detach(), w2.detach()
                q_unl = _spmm(a, _spmm(a, x @ w1d))[unl]  # (Â² X W1)[unlabelled], (n_u, h)
                r = torch.softmax(q_unl @ w2d, 1)
                r[torch.arange(len(unl), device=self.device), self._y_unl_dev] -= 1.0
                r *= (1.0 - lam) / len(unl)  # ∂L/∂logits of a mean cross-entropy
                r_pad[unl] = r
                g_w2 = q_unl.T @ r
                g_w1 = x.T @ _spmm(a, _spmm(a, r_pad @ w2d.T))  # (Â² X)^T R W2^T
            outputs += [w1, w2]
            grads += [g_w1, g_w2]
        if lam > 0.0:
            outputs.append(lam * F.cross_entropy(f @ w1 @ w2, self._y_train_dev))
            grads.append(torch.ones((), device=self.device))
        (e_train,) = torch.autograd.grad(outputs, f, grad_outputs=grads)
        return e_train, r_pad

    def _scaled_adjacency_gradient_torch(self, norm: NormalizedAdjacency, dev: DeviceAdjacency,
                                         e_train: torch.Tensor, r_pad: torch.Tensor,
                                         wt: torch.Tensor) -> torch.Tensor:
        """:meth:`_scaled_adjacency_gradient` in torch on the device (same terms, same order)."""
        a, s, x, train = dev.matrix, dev.s, self._x_dev, self._train_dev
        x_wt = x @ wt
        u = torch.cat([r_pad, _spmm(a, r_pad)], 1) * s[:, None]
        v = torch.cat([_spmm(a, x_wt), x_wt], 1) * s[:, None]
        h_t = x @ e_train.T  # H^T, (n, n_train)
        # diag(s) Â S^T: its pattern is cut out on the CPU (O(edges)), its product runs here
        a_cols = to_torch(sp.diags(norm.s.numpy()) @ norm.matrix[:, self.idx_train],
                          device=self.device)
        z = _spmm(a_cols, (h_t * s[:, None]).T)  # (n, n)
        z.addmm_(u, v.T)
        t1 = (_spmm(a, h_t) * s[:, None]).T * s[train][:, None]  # diag(s) S^T H Â diag(s)
        z.index_add_(0, train, t1.contiguous())
        return z

    def _loss_gradients(self, a: sp.csr_matrix, f: torch.Tensor, w1: torch.Tensor,
                        w2: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
        """``(∂L/∂F, R)`` of the attack loss ``L = (1-λ) CE_unlabelled + λ CE_train``.

        ``R`` (``(n, C)``, zero outside ``idx_unlabeled``) is ``∂L/∂logits`` on the unlabelled
        nodes, computed by hand with sparse products; ``∂L/∂F`` goes back through the unrolled
        training (autograd) and includes the direct ``λ CE_train`` term.
        """
        train, unl, lam = self.idx_train, self.idx_unlabeled, self.lambda_
        outputs, grads = [], []
        r_pad = np.zeros((self.n, self.nclass), np.float32)
        if lam < 1.0:
            with torch.no_grad():
                w1d, w2d = w1.detach(), w2.detach()
                qw1 = a @ (a @ (self.x @ w1d.numpy()))  # Â² X W1, (n, h)
                r = torch.softmax(torch.from_numpy(qw1[unl]) @ w2d, 1)
                r[torch.arange(len(unl)), torch.from_numpy(self.y_self[unl])] -= 1.0
                r *= (1.0 - lam) / len(unl)  # ∂L/∂logits of a mean cross-entropy
                r_pad[unl] = r.numpy()
                g_w2 = torch.from_numpy(qw1[unl]).T @ r
                g_w1 = self.x.T @ (a @ (a @ (r_pad @ w2d.numpy().T)))  # (Â² X)^T R W2^T
            outputs += [w1, w2]
            grads += [torch.from_numpy(np.asarray(g_w1)), g_w2]
        if lam > 0.0:
            y = torch.from_numpy(self.labels[train])
            outputs.append(lam * F.cross_entropy(f @ w1 @ w2, y))
            grads.append(torch.ones(()))
        (e_train,) = torch.autograd.grad(outputs, f, grad_outputs=grads)
        return e_train, r_pad

    def _scaled_adjacency_gradient(self, norm: NormalizedAdjacency, e_train: torch.Tensor,
                                   r_pad: np.ndarray, wt: np.ndarray) -> torch.Tensor:
        """``Z = diag(s) Ĝ diag(s)`` (dense ``(n, n)``), ``Ĝ = ∂L/∂Â`` for ``Q = Â B, B = Â X``:

        ``Ĝ = E B^T + Â E X^T = R (B Wt)^T + (Â R)(X Wt)^T + S^T (H Â) + Â S^T H``
        with ``E = R Wt^T + S^T E_train`` (``S`` selects the training rows), ``H = E_train X^T``
        and ``Wt = W1 W2``: a rank-2C product plus two sparse-times-dense products.
        """
        a, s, train = norm.matrix, norm.s.numpy(), self.idx_train
        x_wt = self.x @ wt
        u = np.concatenate([r_pad, a @ r_pad], 1) * s[:, None]
        v = np.concatenate([a @ x_wt, x_wt], 1) * s[:, None]
        h_t = self.x @ e_train.numpy().T  # H^T, (n, n_train)
        a_cols = sp.csr_matrix(sp.diags(s) @ a[:, train])  # diag(s) Â S^T
        z = torch.from_numpy(np.ascontiguousarray(a_cols @ (h_t * s[:, None]).T))
        z.addmm_(torch.from_numpy(u), torch.from_numpy(v).T)
        t1 = ((a @ h_t) * s[:, None]).T * s[train][:, None]  # diag(s) S^T H Â diag(s)
        z.index_add_(0, torch.from_numpy(train), torch.from_numpy(np.ascontiguousarray(t1)))
        return z


def first_argmax(scores: torch.Tensor) -> tuple[int, int]:
    """Row-major first position of the maximum, as ``torch.argmax`` on the flattened matrix
    (which DeepRobust calls) but through the much faster row-wise maximum.

    The first index among ties is found explicitly (``nonzero`` lists positions in order), so
    the rule holds on every device whatever order a GPU kernel reduces in.
    """
    row_max = scores.amax(dim=1)
    best = row_max.max()
    rows = torch.nonzero(row_max == best)  # rows holding the maximum, in order
    if rows.numel() == 0:
        raise ValueError("first_argmax: the scores contain NaN")
    i = int(rows[0, 0])
    return i, int(torch.nonzero(scores[i] == best)[0, 0])


def _spmm(sparse: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
    """Sparse CSR ``(n, m)`` times dense ``(m, k)`` on their device (dense made contiguous)."""
    return sparse @ dense.contiguous()


def _as_index(values: np.ndarray | torch.Tensor, name: str, n: int | None) -> np.ndarray:
    out = np.asarray(values.cpu() if isinstance(values, torch.Tensor) else values)
    if out.ndim != 1 or not np.issubdtype(out.dtype, np.integer):
        raise ValueError(f"Metattack: {name} must be a 1-D integer array, got "
                         f"shape {out.shape} dtype {out.dtype}.")
    if n is not None and len(out) and (out.min() < 0 or out.max() >= n):
        raise ValueError(f"Metattack: {name} has node ids outside [0, {n}).")
    return out.astype(np.int64)


def _check_graph(adj: sp.spmatrix, features: sp.spmatrix | np.ndarray, n: int) -> None:
    if not sp.issparse(adj) or adj.shape != (n, n):
        raise ValueError("Metattack: adj must be a square scipy sparse matrix "
                         f"(got {type(adj).__name__} of shape {getattr(adj, 'shape', None)}).")
    if abs(adj - adj.T).sum() != 0 or adj.diagonal().any() or not np.all(
            sp.csr_matrix(adj).data == 1):
        raise ValueError("Metattack: adj must be symmetric, 0/1, without self-loops; "
                         "symmetrise and binarise it first (e.g. twirls.data.nettack).")
    if features.shape[0] != n:
        raise ValueError(f"Metattack: features has {features.shape[0]} rows for {n} nodes.")
