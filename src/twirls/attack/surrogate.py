"""Two-layer GCN as DeepRobust trains it: Mettack's surrogate and the "surrogate (GCN)" evaluation.

``logits = Â · dropout(σ(Â X W1 + b1)) · W2 + b2`` with ``Â`` from :mod:`normalize` (the paper's
eq. (7) propagation, two hops). ``σ`` is the identity for Mettack's *linearised* surrogate
(``with_relu=False``) and ReLU for the GCN evaluated on the attacked graphs (the paper's
"surrogate (GCN)" row of its Table 4, DeepRobust example ``test_mettack.py``'s ``test()``).

The training recipe mirrors ``deeprobust.graph.defense.GCN.fit`` without validation:
full-batch Adam, ``epochs`` steps, the final weights (no model selection). To consume the
torch random stream exactly as DeepRobust does (so that a seeded fast attack draws the same
inner-training weights as a seeded DeepRobust attack), the weights are initialised twice
(DeepRobust's constructor and ``fit(initialize=True)``), in the order ``W1, b1, W2, b2`` with
``U(-1/sqrt(out), 1/sqrt(out))``, and dropout draws its masks from the global generator.
DeepRobust also drops weight decay for the linearised model (``with_relu=False``); we keep
that quirk (:func:`gcn_config`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn

from twirls.attack.normalize import normalize, to_torch
from twirls.train import metrics


@dataclass(frozen=True)
class GCNConfig:
    """Hyper-parameters of DeepRobust's ``GCN`` + ``fit``."""

    hidden: int = 16
    with_relu: bool = True
    with_bias: bool = True
    dropout: float = 0.5
    lr: float = 0.01
    weight_decay: float = 5e-4
    epochs: int = 200


def gcn_config(*, with_relu: bool, **kwargs) -> GCNConfig:
    """A :class:`GCNConfig` with DeepRobust's rule "no weight decay when ``with_relu=False``"."""
    config = GCNConfig(with_relu=with_relu, **kwargs)
    if not with_relu:
        config = replace(config, weight_decay=0.0)
    return config


#: Mettack's surrogate in DeepRobust's example ``examples/graph/test_mettack.py``.
SURROGATE = gcn_config(with_relu=False, with_bias=True, dropout=0.5)
#: The GCN that example's ``test()`` trains on the clean and the attacked graph.
EVALUATION = gcn_config(with_relu=True, with_bias=True, dropout=0.5)


class GCN(nn.Module):
    """Two-layer GCN with DeepRobust's parameter layout and initialisation."""

    def __init__(self, nfeat: int, nclass: int, config: GCNConfig) -> None:
        super().__init__()
        self.config = config
        h = config.hidden
        self.w1 = nn.Parameter(torch.empty(nfeat, h))
        self.b1 = nn.Parameter(torch.empty(h)) if config.with_bias else None
        self.w2 = nn.Parameter(torch.empty(h, nclass))
        self.b2 = nn.Parameter(torch.empty(nclass)) if config.with_bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for w, b in ((self.w1, self.b1), (self.w2, self.b2)):
            bound = 1.0 / math.sqrt(w.shape[1])
            w.data.uniform_(-bound, bound)
            if b is not None:
                b.data.uniform_(-bound, bound)

    def forward(self, x: torch.Tensor, adj_norm: torch.Tensor) -> torch.Tensor:
        """Log-probabilities ``(n, C)``; ``x`` and ``adj_norm`` may be sparse."""
        h = adj_norm @ (x @ self.w1)
        if self.b1 is not None:
            h = h + self.b1
        if self.config.with_relu:
            h = F.relu(h)
        h = F.dropout(h, self.config.dropout, training=self.training)
        out = adj_norm @ (h @ self.w2)
        if self.b2 is not None:
            out = out + self.b2
        return F.log_softmax(out, dim=1)


def train_gcn(
    adj: sp.spmatrix,
    features: sp.spmatrix | np.ndarray,
    labels: np.ndarray | torch.Tensor,
    idx_train: np.ndarray | torch.Tensor,
    config: GCNConfig,
    idx_val: np.ndarray | torch.Tensor | None = None,
) -> torch.Tensor:
    """Train a :class:`GCN` on ``adj`` and return its eval-mode log-probabilities (detached).

    Without ``idx_val``: the final weights (DeepRobust ``fit`` without validation, the Mettack
    example's ``test()``). With ``idx_val``: DeepRobust's ``_train_with_val`` selection (which
    GNNGuard's evaluation uses): after each step, keep the eval output if the validation loss
    is the lowest so far or the validation accuracy the highest so far.
    Uses the global torch generator (seed it first) exactly like DeepRobust's ``GCN.fit``.
    """
    x = to_torch(sp.csr_matrix(features, dtype=np.float32))
    a = to_torch(normalize(adj).matrix)
    y = torch.as_tensor(np.asarray(labels), dtype=torch.int64)
    train = torch.as_tensor(np.asarray(idx_train), dtype=torch.int64)
    val = None if idx_val is None else torch.as_tensor(np.asarray(idx_val), dtype=torch.int64)
    model = GCN(x.shape[1], int(y.max()) + 1, config)
    model.reset_parameters()  # DeepRobust's fit(initialize=True) draws the weights again
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr,
                                 weight_decay=config.weight_decay)
    best, best_loss, best_acc = None, 100.0, 0.0
    for _ in range(config.epochs):
        model.train()
        optimizer.zero_grad()
        loss = F.nll_loss(model(x, a)[train], y[train])
        loss.backward()
        optimizer.step()
        if val is not None:
            model.eval()
            with torch.no_grad():
                out = model(x, a)
            loss_val = float(F.nll_loss(out[val], y[val]))
            acc_val = metrics.accuracy(out[val], y[val])
            if loss_val < best_loss:
                best_loss, best = loss_val, out
            if acc_val > best_acc:
                best_acc, best = acc_val, out
    if best is not None:
        return best
    model.eval()
    with torch.no_grad():
        return model(x, a)


def accuracy(log_probs: torch.Tensor, labels: np.ndarray | torch.Tensor,
             idx: np.ndarray | torch.Tensor) -> float:
    """Accuracy (:func:`twirls.train.metrics.accuracy`) on the nodes ``idx``."""
    y = torch.as_tensor(np.asarray(labels), dtype=torch.int64)
    i = torch.as_tensor(np.asarray(idx), dtype=torch.int64)
    return metrics.accuracy(log_probs[i], y[i])


def self_training_labels(log_probs: torch.Tensor, labels: np.ndarray | torch.Tensor,
                         idx_train: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Meta-Self targets: the surrogate's predictions, with the true labels on ``idx_train``."""
    y = torch.as_tensor(np.asarray(labels), dtype=torch.int64)
    train = torch.as_tensor(np.asarray(idx_train), dtype=torch.int64)
    out = log_probs.argmax(1)
    out[train] = y[train]
    return out
