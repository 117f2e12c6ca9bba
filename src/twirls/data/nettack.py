"""Cora / Citeseer as used for the structure-attack experiments (Nettack / Mettack setting).

The paper's adversarial table follows Pro-GNN (Jin et al., 2020), whose data come from
DeepRobust's ``Dataset(root, name, setting='nettack')``. This module rebuilds exactly that
graph from the same raw file, without DeepRobust's downloader:

1. read ``<x>.npz`` (danielzuegner/gnn-meta-attack format: ``adj_*`` / ``attr_*`` CSR parts,
   ``labels``);
2. symmetrise ``A + A^T`` and binarise (entries > 1 become 1);
3. keep the largest connected component, nodes in their original order;
4. drop self-loops.

Result: Cora 2485 nodes / 5069 edges, Citeseer 2110 nodes / 3668 edges. Two splits:

* ``"seed15"``: DeepRobust's ``get_train_val_test(n, val_size=0.1, test_size=0.8,
  stratify=labels, seed=15)`` (10% / 10% / 80%, stratified), reproduced with a private
  ``RandomState(15)`` instead of reseeding numpy's global generator;
* ``"prognn"``: the published Pro-GNN split ``<x>_prognn_splits.json``.

``meta["seed15_equals_prognn"]`` records whether the two coincide (measured, not assumed).
``meta["adj"]`` (scipy CSR float32, symmetric, 0/1) and ``meta["features_sparse"]`` (CSR float32)
keep the sparse forms the Mettack code needs; ``load_prognn_meta_adj`` reads Pro-GNN's published
20% Meta-Self perturbed adjacency for the same node order.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.model_selection import train_test_split

from twirls.data.files import raw_file
from twirls.data.graph import GraphData, Split, undirected_graph

NAMES = ("nettack-cora", "nettack-citeseer")


def _base_name(name: str) -> str:
    base = name.removeprefix("nettack-")
    if base not in ("cora", "citeseer"):
        raise ValueError(f"nettack: unknown dataset {name!r}; expected one of {NAMES}.")
    return base


def read_npz(path: Path) -> tuple[sp.csr_matrix, sp.csr_matrix, np.ndarray]:
    """``(adjacency, attributes, labels)`` of a gnn-meta-attack ``.npz`` file, untouched."""
    with np.load(path, allow_pickle=True) as z:
        adj = sp.csr_matrix(
            (z["adj_data"], z["adj_indices"], z["adj_indptr"]), shape=tuple(z["adj_shape"])
        )
        if "attr_data" in z:
            attr = sp.csr_matrix(
                (z["attr_data"], z["attr_indices"], z["attr_indptr"]),
                shape=tuple(z["attr_shape"]),
            )
        else:  # DeepRobust's convention for attribute-free graphs (Polblogs)
            attr = sp.identity(adj.shape[0], format="csr")
        labels = np.asarray(z["labels"])
    return adj, sp.csr_matrix(attr, dtype=np.float32), labels


def largest_connected_component(adj: sp.spmatrix) -> np.ndarray:
    """Sorted node ids of the largest connected component (ties: lowest component id)."""
    _, component = sp.csgraph.connected_components(adj, directed=False)
    sizes = np.bincount(component)
    return np.flatnonzero(component == np.argmax(sizes))


def clean_adjacency(adj: sp.spmatrix) -> tuple[sp.csr_matrix, np.ndarray]:
    """Steps 2-4 above: returns the cleaned LCC adjacency (CSR float32) and the kept node ids."""
    sym = sp.csr_matrix(adj + adj.T)
    sym.data = np.ones_like(sym.data)
    sym.eliminate_zeros()
    keep = largest_connected_component(sym)
    lcc = sym[keep][:, keep].tolil()
    lcc.setdiag(0)
    lcc = lcc.tocsr().astype(np.float32)
    lcc.eliminate_zeros()
    return lcc, keep


def stratified_split(
    labels: np.ndarray, seed: int, val_size: float = 0.1, test_size: float = 0.8
) -> Split:
    """DeepRobust's ``get_train_val_test`` (two stratified ``train_test_split`` calls drawing from
    one random stream seeded with ``seed``), without touching numpy's global generator."""
    rng = np.random.RandomState(seed)
    idx = np.arange(len(labels))
    train_size = 1.0 - val_size - test_size
    train_and_val, test = train_test_split(
        idx, random_state=rng, train_size=train_size + val_size, test_size=test_size,
        stratify=labels,
    )
    train, val = train_test_split(
        train_and_val, random_state=rng,
        train_size=train_size / (train_size + val_size),
        test_size=val_size / (train_size + val_size),
        stratify=labels[train_and_val],
    )
    return Split(*(torch.as_tensor(i, dtype=torch.int64) for i in (train, val, test)))


def read_prognn_split(path: Path) -> Split:
    """The Pro-GNN split json (``idx_train`` / ``idx_val`` / ``idx_test``)."""
    with open(path) as f:
        idx = json.load(f)
    return Split(*(torch.as_tensor(idx[k], dtype=torch.int64)
                   for k in ("idx_train", "idx_val", "idx_test")))


def _same_split(a: Split, b: Split) -> bool:
    return all(
        len(x) == len(y) and bool(torch.equal(x, y)) for x, y in zip(
            (a.train, a.val, a.test), (b.train, b.val, b.test), strict=True)
    )


def load(root: Path, name: str) -> GraphData:
    """Load ``nettack-cora`` or ``nettack-citeseer`` from ``root`` (``<x>.npz`` and
    ``<x>_prognn_splits.json``), splits ``"seed15"`` and ``"prognn"``."""
    base = _base_name(name)
    root = Path(root)
    adj_raw, attr, labels = read_npz(raw_file(root, f"{base}.npz"))
    prognn = read_prognn_split(raw_file(root, f"{base}_prognn_splits.json"))
    adj, keep = clean_adjacency(adj_raw)
    features, labels = attr[keep], labels[keep]
    seed15 = stratified_split(labels, seed=15)
    n = adj.shape[0]
    if int(max(prognn.train.max(), prognn.val.max(), prognn.test.max())) >= n:
        raise ValueError(
            f"{root / f'{base}_prognn_splits.json'} indexes nodes beyond the {n}-node largest "
            f"connected component of {base}.npz; the files do not belong together."
        )
    coo = adj.tocoo()
    return GraphData(
        name=name,
        graph=undirected_graph(torch.from_numpy(coo.row), torch.from_numpy(coo.col), n),
        features=torch.as_tensor(features.toarray(), dtype=torch.float32),
        labels=torch.as_tensor(labels, dtype=torch.int64),
        splits={"seed15": seed15, "prognn": prognn},
        meta={
            "source": f"{base}.npz (danielzuegner/gnn-meta-attack), DeepRobust setting='nettack'",
            "raw_nodes": int(adj_raw.shape[0]),
            "lcc_nodes": keep.tolist(),
            "seed15_equals_prognn": _same_split(seed15, prognn),
            "adj": adj,
            "features_sparse": sp.csr_matrix(features, dtype=np.float32),
        },
    )


def load_prognn_meta_adj(root: Path, name: str, ptb_rate: float = 0.2) -> sp.csr_matrix:
    """Pro-GNN's published Meta-Self perturbed adjacency ``<x>_meta_adj_<rate>.npz`` (CSR float32,
    same node order as ``load(root, name)``), read with ``scipy.sparse.load_npz``."""
    base = _base_name(name)
    adj = sp.load_npz(raw_file(Path(root), f"{base}_meta_adj_{ptb_rate}.npz"))
    return sp.csr_matrix(adj, dtype=np.float32)
