"""Node-wise building blocks shared by the models."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from twirls.models import masks
from twirls.models.sparse_features import csr_matmul

NORMS = ("none", "batch", "layer")


def norm_layers(norm: str, width: int, count: int, owner: str) -> nn.ModuleList | None:
    """``count`` normalisation layers of ``width`` channels (``None`` for ``norm="none"``).

    ``"batch"`` is what the ogbn-arxiv leaderboard models put between their layers
    (``BatchNorm1d`` over all nodes, full batch); ``"layer"`` normalises each node's row.
    ``owner`` names the model in the error message for an unknown ``norm``.
    """
    if norm not in NORMS:
        raise ValueError(f"{owner} config: norm must be one of {NORMS}, got {norm!r}")
    make = {"batch": nn.BatchNorm1d, "layer": nn.LayerNorm}.get(norm)
    return nn.ModuleList(make(width) for _ in range(count)) if make else None


def is_sparse(x: Tensor) -> bool:
    return x.layout == torch.sparse_csr


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout(x, p, training)``, which every model calls for its dropout. A sparse CSR ``x``
    drops its stored entries (the same random map as dense dropout: zeros stay zero either way).
    While a run draws from its own stream (``masks: fast``, :func:`twirls.models.masks.active`)
    the mask comes from that stream instead of torch's generator."""
    if not training or p == 0.0:
        return x
    if not is_sparse(x):
        return _drop(x, p)
    return torch.sparse_csr_tensor(x.crow_indices(), x.col_indices(), _drop(x.values(), p),
                                   x.shape, check_invariants=False)


def _drop(x: Tensor, p: float) -> Tensor:
    stream = masks.active()
    if stream is None or p >= 1.0:
        return F.dropout(x, p, True)
    return x * stream.seed_noise(0, x.shape, p)


class FeedForward(nn.Module):
    r"""A node-wise MLP: ``num_layers`` linear layers with ``[norm →] ReLU → dropout`` between them.

    Matches the authors' ``MLP`` (FFTYYY/TWIRLS ``model/modules.py``, ``dgl.nn`` ``TWIRLSConv``):
    one layer maps ``in_dim → out_dim`` directly (``hidden`` unused); ``L ≥ 2`` layers go
    ``in_dim → hidden → … → hidden → out_dim``; nothing follows the last layer; ``num_layers = 0``
    is the identity. ``init_activate`` applies ``[norm →] ReLU → dropout`` to the input first
    (used by TWIRLS when MLPs sit on both sides of the propagation). Weights are Xavier-normal,
    biases zero, as in the reference.

    Args:
        in_dim, hidden, out_dim: widths.
        num_layers: number of linear layers ``≥ 0``.
        dropout: dropout rate after every hidden activation.
        norm: ``"none"``, ``"batch"`` (ogbn-arxiv) or ``"layer"``, applied before each ReLU.
        init_activate: activate the input too.

    Shapes: ``(n, in_dim) → (n, out_dim)``.
    """

    def __init__(self, in_dim: int, hidden: int, out_dim: int, num_layers: int, *,
                 dropout: float = 0.0, norm: str = "none", init_activate: bool = False) -> None:
        super().__init__()
        if num_layers < 0:
            raise ValueError(f"FeedForward: num_layers must be >= 0, got {num_layers}")
        widths = [in_dim] + [hidden] * (num_layers - 1) + [out_dim] if num_layers else []
        self.lins = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:], strict=True))
        num_norms = max(num_layers - 1, 0) + int(init_activate)
        self.norms = norm_layers(norm, hidden, num_norms, "FeedForward")
        self.dropout = dropout
        self.init_activate = init_activate
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in self.lins:
            nn.init.xavier_normal_(lin.weight)
            nn.init.zeros_(lin.bias)
        for norm in self.norms or []:
            norm.reset_parameters()

    def _activate(self, x: Tensor, i: int) -> Tensor:
        if self.norms is not None:
            x = self.norms[i](x)
        return dropout(F.relu(x), self.dropout, self.training)

    def forward(self, x: Tensor) -> Tensor:
        """``x`` may be a sparse CSR matrix (bag-of-words features): the first layer then costs
        ``O(nnz)`` instead of ``O(n · in_dim)``."""
        i = 0
        if self.init_activate:
            x, i = self._activate(x.to_dense() if is_sparse(x) else x, 0), 1
        for k, lin in enumerate(self.lins):
            x = csr_matmul(x, lin.weight.t()) + lin.bias if is_sparse(x) else lin(x)
            if k < len(self.lins) - 1:
                x, i = self._activate(x, i), i + 1
        return x
