"""What every defense wrapper shares: input checks, seeding, the result record.

Every defense is called as ``fit_predict(name, adj, features, labels, split, seed, device)`` with

* ``adj``: the (possibly attacked) graph as a square, symmetric 0/1 scipy sparse matrix without
  self-loops (``GraphData.meta["adj"]`` or ``twirls.data.nettack.load_prognn_meta_adj``);
* ``features``: ``(n, d)`` node features, scipy sparse, numpy or torch;
* ``labels``: ``(n,)`` class ids, numpy or torch;
* ``split``: a :class:`~twirls.data.graph.Split` (train / val / test node ids);
* ``seed``: one integer fixing every random draw of the run (see :func:`seeded`).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch

from twirls.data.graph import Split


@dataclass
class DefenseResult:
    """Outcome of one training run: accuracies on the split and facts about preprocessing."""

    test_acc: float
    val_acc: float
    seconds: float
    info: dict = field(default_factory=dict)


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed Python's, numpy's and torch's global generators, restoring them on exit.

    DeepRobust draws from the *global* generators (torch for weights and dropout, numpy for the
    ARPACK start vector of ``scipy.sparse.linalg.svds``), so a run is reproducible only if all
    three are fixed; restoring them keeps the caller's random streams untouched.
    """
    py_state, np_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


def check_inputs(
    adj, features, labels, split: Split
) -> tuple[sp.csr_matrix, sp.csr_matrix, np.ndarray]:
    """Validate the common arguments and return ``(adj, features, labels)`` as scipy CSR float32
    adjacency, scipy CSR float32 features and an int64 numpy label vector."""
    if not sp.issparse(adj):
        raise TypeError(
            f"defenses: `adj` must be a scipy sparse adjacency matrix, got {type(adj).__name__}; "
            "pass GraphData.meta['adj'] or nettack.load_prognn_meta_adj(...)."
        )
    adj = sp.csr_matrix(adj, dtype=np.float32)
    n = adj.shape[0]
    if adj.shape != (n, n):
        raise ValueError(f"defenses: `adj` must be square, got shape {adj.shape}.")
    if abs(adj - adj.T).sum() != 0:
        raise ValueError("defenses: `adj` is not symmetric; symmetrise it (A + A.T, binarised).")
    if adj.diagonal().any():
        raise ValueError("defenses: `adj` has self-loops; the models add their own, remove them "
                         "first (adj.setdiag(0); adj.eliminate_zeros()).")
    if isinstance(features, torch.Tensor):
        features = features.detach().cpu().numpy()
    features = sp.csr_matrix(features, dtype=np.float32)
    labels = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels)
    if features.shape[0] != n or labels.shape != (n,):
        raise ValueError(
            f"defenses: {n} nodes in `adj` but features {features.shape} and labels "
            f"{labels.shape}; they must describe the same nodes (labels must be 1-d class ids)."
        )
    for part, idx in zip(("train", "val", "test"), (split.train, split.val, split.test),
                         strict=True):
        if len(idx) == 0 and part != "val":
            raise ValueError(f"defenses: the split has no {part} nodes.")
        if len(idx) and (int(idx.min()) < 0 or int(idx.max()) >= n):
            raise ValueError(f"defenses: split.{part} indexes nodes outside 0..{n - 1}.")
    return adj, features, labels.astype(np.int64)
