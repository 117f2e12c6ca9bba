"""The attacked-graph file ``data/attacked/<dataset>.npz``: write atomically, read back checked.

Arrays: ``adj_data``, ``adj_indices``, ``adj_indptr``, ``adj_shape`` (the perturbed symmetric
adjacency as CSR), ``idx_train``, ``idx_val``, ``idx_test`` (the split the attack used),
``flips`` (``(k, 2)`` node pairs in the order they were flipped; empty when unknown) and
``meta`` (a JSON string: implementation, rate, seed, n_flips, seconds, accuracies, ...).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from twirls.files import replacing

KEYS = ("adj_data", "adj_indices", "adj_indptr", "adj_shape", "idx_train", "idx_val", "idx_test",
        "flips", "meta")


@dataclass
class AttackedGraph:
    """A perturbed graph with the split it was attacked for."""

    adj: sp.csr_matrix
    idx_train: np.ndarray
    idx_val: np.ndarray
    idx_test: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)
    flips: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))


def save_attacked(path: Path, graph: AttackedGraph) -> None:
    """Write ``graph`` to ``path`` through a temporary file and a rename (never half-written)."""
    path = Path(path)
    adj = sp.csr_matrix(graph.adj, dtype=np.float32)
    with replacing(path) as tmp:
        write_npz(tmp, {
        "adj_data": adj.data, "adj_indices": adj.indices, "adj_indptr": adj.indptr,
        "adj_shape": np.asarray(adj.shape, np.int64),
        "idx_train": np.asarray(graph.idx_train, np.int64),
        "idx_val": np.asarray(graph.idx_val, np.int64),
        "idx_test": np.asarray(graph.idx_test, np.int64),
        "flips": np.asarray(graph.flips, np.int64).reshape(-1, 2),
        "meta": np.array(json.dumps(graph.meta, sort_keys=True))})


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """A compressed ``.npz`` (what ``np.load`` reads) whose bytes depend only on ``arrays``:
    ``np.savez_compressed`` stamps each member with the current time, so the same graph saved
    twice would differ and DVC would rerun every stage that reads it."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(info, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.asanyarray(array), allow_pickle=False)


def load_attacked(path: Path) -> AttackedGraph:
    """Read a file written by :func:`save_attacked` and check that the graph is well formed."""
    with np.load(path, allow_pickle=False) as z:
        missing = [k for k in KEYS if k not in z]
        if missing:
            raise ValueError(f"{path}: not an attacked-graph file (missing {missing}); "
                             f"rebuild it with `python -m twirls.stages.attack`.")
        adj = sp.csr_matrix((z["adj_data"], z["adj_indices"], z["adj_indptr"]),
                            shape=tuple(z["adj_shape"]))
        graph = AttackedGraph(adj=adj, idx_train=z["idx_train"], idx_val=z["idx_val"],
                              idx_test=z["idx_test"], meta=json.loads(str(z["meta"])),
                              flips=z["flips"])
    if abs(adj - adj.T).sum() != 0 or adj.diagonal().any():
        raise ValueError(f"{path}: the adjacency is not symmetric or has self-loops.")
    return graph
