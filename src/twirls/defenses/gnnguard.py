"""GNNGuard (Zhang & Zitnik, NeurIPS 2020) on a 2-layer GCN, full batch, in plain torch.

GNNGuard re-weights the edges of every GNN layer ``k`` from the similarity of the layer's input
representations ``h^k`` (the node features for ``k = 1``, the hidden ReLU output for ``k = 2``):

1. *similarity*: ``s_uv = cos(h_u, h_v)`` for every edge ``(u, v)``;
2. *pruning*: edges with ``s_uv < 0.1`` are removed (for this layer and the following ones);
3. *neighbour importance*: ``a_uv = s_uv / sum_{v' kept} s_uv'`` over ``u``'s kept neighbours;
4. *self weight*: ``a_uu = 1 / (1 + N_u)``, ``N_u`` the number of kept neighbours of ``u``;
5. the official code then uses ``w = exp(a)`` on the kept entries (pruned edges stay absent) as
   the GCN's edge weights, normalised ``D^{-1/2} W D^{-1/2}`` with ``D`` the row sums of ``W``;
6. *layer-wise memory* (paper): ``w^k <- beta w^{k-1} + (1 - beta) w^k``. In the official
   ``defense/gcn.py`` the memory line is commented out (``adj_memory = adj_2  # without
   memory``), so ``beta=None`` (no memory) is the default here; a fixed or learnt ``beta`` is
   available.

The attention is computed on detached representations (the official code goes through numpy and
``sklearn.metrics.pairwise.cosine_similarity``), so no gradient flows through it. Layer 1's
weights depend only on the features and the graph and are computed once per fit.

Behaviour kept from the official code (mims-harvard/GNNGuard, ``defense/gcn.py`` with its
modified ``nn/conv/gcn_conv.py``, run by ``GNNGuard/Mettack.py``): hidden 16, dropout 0.5 after
the ReLU, Adam lr 0.01 with weight decay forced to 0, glorot weights and zero bias, similarity
threshold 0.1, layer 2 only sees the edges kept by layer 1, and the *direction* of aggregation:
PyG's ``GCNConv`` sends messages from ``edge_index[0] = u`` to ``edge_index[1] = v``, so node
``v`` receives ``w_uv / sqrt(d_u d_v) h_u`` where ``w_uv`` was normalised over ``u``'s
neighbours (the paper's formula would aggregate ``w_uv h_v`` at ``u``; ``paper_orientation=True``
selects that). Deliberate differences, all documented: the self-loop weights are always replaced
by ``1/(1+N_u)`` (the official code does so only when node 0's self-similarity is exactly 1), the
bias is one value per channel (the official ``GCNConv`` bias is a single scalar, a
``torch.tensor(out_channels)`` typo), and model selection evaluates the validation set in eval
mode (the official loop scores the training-mode, dropout-on output) with DeepRobust's rule
(lowest validation loss, then highest validation accuracy).
"""

from __future__ import annotations

import copy
import time

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn

from twirls.data.graph import Split
from twirls.defenses.common import DefenseResult, check_inputs, seeded
from twirls.train.metrics import accuracy

NAMES = ("gnnguard",)
PRUNE_THRESHOLD = 0.1
HIDDEN = 16
DROPOUT = 0.5
LR = 0.01
WEIGHT_DECAY = 0.0  # the official GCN overrides its weight_decay argument with 0
EPOCHS = 200


def edge_cosine(h: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """``cos(h_src, h_dst)`` per edge; a zero row has similarity 0 with everything (as sklearn)."""
    unit = h / h.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return (unit[src] * unit[dst]).sum(1)


def guard_weights(
    h: torch.Tensor,
    src: torch.Tensor,
    dst: torch.Tensor,
    alive: torch.Tensor | None = None,
    threshold: float = PRUNE_THRESHOLD,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GNNGuard's edge weights for one layer (steps 1-5 of the module docstring).

    Args:
        h: ``(n, d)`` representations the layer receives.
        src, dst: the directed edges ``u -> v`` (both directions of every undirected edge,
            no self-loops).
        alive: ``(E,)`` bool, edges still present (pruned by an earlier layer otherwise).
        threshold: similarity below which an edge is pruned.

    Returns:
        ``weights`` of shape ``(E + n,)``: ``exp(a_uv)`` for each kept edge ``(u, v)`` (0 if
        pruned), followed by the self weights ``exp(1 / (1 + N_u))`` of nodes ``0..n-1``; and the
        updated ``alive`` mask.
    """
    n = h.shape[0]
    with torch.no_grad():
        sim = edge_cosine(h.detach(), src, dst)
        keep = sim >= threshold
        if alive is not None:
            keep &= alive
        sim = torch.where(keep, sim, torch.zeros_like(sim))
        row_sum = torch.zeros(n, dtype=sim.dtype, device=sim.device).index_add_(0, src, sim)
        kept_neighbours = torch.zeros(n, dtype=sim.dtype, device=sim.device).index_add_(
            0, src, keep.to(sim.dtype))
        importance = sim / row_sum[src].clamp_min(1e-12)
        edge_w = torch.where(keep, importance.exp(), torch.zeros_like(importance))
        self_w = (1.0 / (1.0 + kept_neighbours)).exp()
    return torch.cat([edge_w, self_w]), keep


class GuardedGCNConv(nn.Module):
    r"""GCN layer on GNNGuard's edge weights.

    .. math::
        \mathbf{X}' = \mathbf{N}^\top \mathbf{X} \mathbf{\Theta} + \mathbf{b}, \qquad
        \mathbf{N} = \mathbf{D}^{-1/2} \mathbf{W} \mathbf{D}^{-1/2}, \qquad
        D_{uu} = \textstyle\sum_v W_{uv},

    i.e. node ``v`` receives ``N_uv x_u`` over the entries ``(u, v)`` of ``W`` (the official
    code's PyG ``GCNConv``); ``paper_orientation=True`` uses ``N X Theta`` instead. ``W`` comes
    as one weight per entry of a fixed list ``(rows, cols)`` that already holds the self-loops
    (:func:`guard_weights` output), so no self-loop is added here.

    Args:
        in_dim: size of each input row (may be a sparse COO feature matrix).
        out_dim: size of each output row.
        paper_orientation: aggregate ``N X`` (rows) instead of ``N^T X`` (columns).

    Shapes: ``x (n, in_dim)``, ``rows, cols, weight (E + n,)`` -> ``(n, out_dim)``.
    """

    def __init__(self, in_dim: int, out_dim: int, paper_orientation: bool = False) -> None:
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim)
        self.paper_orientation = paper_orientation
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor,
                weight: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        h = torch.sparse.mm(x, self.linear.weight.T) if x.is_sparse else x @ self.linear.weight.T
        degree = torch.zeros(n, dtype=weight.dtype, device=weight.device).index_add_(
            0, rows, weight)
        inv_sqrt = degree.clamp_min(1e-12).pow(-0.5)
        norm = inv_sqrt[rows] * weight * inv_sqrt[cols]
        source, target = (cols, rows) if self.paper_orientation else (rows, cols)
        out = torch.zeros_like(h).index_add_(0, target, norm[:, None] * h[source])
        return out + self.linear.bias


class GNNGuardGCN(nn.Module):
    """Two :class:`GuardedGCNConv` layers (hidden 16, ReLU, dropout) with GNNGuard weights.

    Args:
        in_dim, n_classes: feature and class counts.
        hidden, dropout: GCN backbone sizes (16 and 0.5 as in the official code).
        threshold: GNNGuard's pruning threshold on cosine similarity (0.1).
        beta: layer-wise memory coefficient; ``None`` disables the memory (official code).
        learn_beta: make ``beta`` a trainable scalar (clamped to ``[0, 1]``) initialised at
            ``beta``.
        paper_orientation: aggregate at ``u`` with ``u``'s normalised weights (paper formula)
            instead of the official code's PyG orientation.
    """

    def __init__(self, in_dim: int, n_classes: int, hidden: int = HIDDEN,
                 dropout: float = DROPOUT, threshold: float = PRUNE_THRESHOLD,
                 beta: float | None = None, learn_beta: bool = False,
                 paper_orientation: bool = False) -> None:
        super().__init__()
        if beta is None and learn_beta:
            raise ValueError("gnnguard: learn_beta=True needs an initial beta in [0, 1].")
        if beta is not None and not 0.0 <= beta <= 1.0:
            raise ValueError(f"gnnguard: beta={beta} must lie in [0, 1].")
        self.conv1 = GuardedGCNConv(in_dim, hidden, paper_orientation)
        self.conv2 = GuardedGCNConv(hidden, n_classes, paper_orientation)
        self.dropout = dropout
        self.threshold = threshold
        if beta is None:
            self.beta = None
        elif learn_beta:
            self.beta = nn.Parameter(torch.tensor(float(beta)))
        else:
            self.register_buffer("beta", torch.tensor(float(beta)))

    def forward(self, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
                layer1: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """Log-probabilities. ``x`` may be a sparse COO tensor (bag-of-words features: much
        faster); ``layer1`` = ``guard_weights(x_dense, src, dst)`` can be passed in because it
        depends only on the features and the graph."""
        n = x.shape[0]
        loops = torch.arange(n, device=x.device)
        rows, cols = torch.cat([src, loops]), torch.cat([dst, loops])
        if layer1 is None:
            layer1 = guard_weights(x.to_dense() if x.is_sparse else x, src, dst,
                                   threshold=self.threshold)
        w1, alive1 = layer1
        h = F.relu(self.conv1(x, rows, cols, w1))
        w2, _ = guard_weights(h, src, dst, alive1, self.threshold)
        if self.beta is not None:
            beta = self.beta.clamp(0.0, 1.0)
            w2 = beta * w1 + (1.0 - beta) * w2
        h = F.dropout(h, self.dropout, training=self.training)
        return F.log_softmax(self.conv2(h, rows, cols, w2), dim=1)


def edge_lists(adj: sp.spmatrix, device: torch.device | str = "cpu"
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(src, dst)`` of every stored entry of a symmetric adjacency (both directions)."""
    coo = sp.coo_matrix(adj)
    return (torch.as_tensor(coo.row, dtype=torch.int64, device=device),
            torch.as_tensor(coo.col, dtype=torch.int64, device=device))


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
    lr: float = LR,
    weight_decay: float = WEIGHT_DECAY,
    **model_options,
) -> DefenseResult:
    """Train :class:`GNNGuardGCN` on ``adj`` with validation-based selection; test accuracy and
    pruning facts (edges kept by layer 1) in the result. ``model_options`` go to the model."""
    if name not in NAMES:
        raise ValueError(f"gnnguard: unknown model {name!r}; expected one of {NAMES}.")
    adj, features, labels = check_inputs(adj, features, labels, split)
    device = torch.device(device)
    dense = torch.as_tensor(features.toarray(), dtype=torch.float32, device=device)
    coo = features.tocoo()
    x = torch.sparse_coo_tensor(np.vstack([coo.row, coo.col]), coo.data, coo.shape,
                                dtype=torch.float32, device=device,
                                check_invariants=False).coalesce()
    y = torch.as_tensor(labels, device=device)
    src, dst = edge_lists(adj, device)
    start = time.perf_counter()
    with seeded(seed):
        model = GNNGuardGCN(x.shape[1], int(labels.max()) + 1, **model_options).to(device)
        layer1 = guard_weights(dense, src, dst, threshold=model.threshold)
        optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
        best, best_loss, best_acc = copy.deepcopy(model.state_dict()), float("inf"), -1.0
        for _ in range(epochs):
            model.train()
            optimizer.zero_grad()
            loss = F.nll_loss(model(x, src, dst, layer1)[split.train], y[split.train])
            loss.backward()
            optimizer.step()
            if len(split.val) == 0:
                best = model.state_dict()
                continue
            model.eval()
            with torch.no_grad():
                out = model(x, src, dst, layer1)
            val_loss = F.nll_loss(out[split.val], y[split.val]).item()
            val_acc = accuracy(out[split.val], y[split.val])
            if val_loss < best_loss or val_acc > best_acc:
                best = copy.deepcopy(model.state_dict())
                best_loss, best_acc = min(best_loss, val_loss), max(best_acc, val_acc)
        model.load_state_dict(best)
        model.eval()
        with torch.no_grad():
            out = model(x, src, dst, layer1)
    return DefenseResult(
        test_acc=accuracy(out[split.test], y[split.test]),
        val_acc=accuracy(out[split.val], y[split.val]),
        seconds=time.perf_counter() - start,
        info={"edges_in": int(adj.nnz // 2),
              "edges_kept_layer1": int(layer1[1].sum().item() // 2),
              "threshold": model.threshold},
    )


def fit_predict(name: str, adj: sp.spmatrix, features, labels, split: Split, seed: int,
                device: str | torch.device = "cpu", **options) -> float:
    """Test accuracy of GNNGuard trained on ``adj`` (see :func:`fit_evaluate`)."""
    return fit_evaluate(name, adj, features, labels, split, seed, device, **options).test_acc
