"""Cora, Citeseer and Pubmed from the Planetoid pickles (Yang et al., 2016), public split.

The paper (Sec. 5.1, appendix "Dataset and Experimental Setting Details") uses "the
semi-supervised setting from Yang et al." : 20 labelled nodes per class for training, 500 for
validation and 1000 for testing. The raw files of dataset ``<name>`` are the eight pickles
``ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}`` in ``root``:

* ``x``/``tx``/``allx``: scipy CSR feature rows of the labelled training nodes / the test nodes /
  every non-test node (``x`` is a prefix of ``allx``);
* ``y``/``ty``/``ally``: the matching one-hot label rows (numpy arrays);
* ``graph``: ``{node: [neighbours]}`` (a ``defaultdict`` of lists);
* ``test.index``: the graph ids of the ``tx`` rows, one per line, in ``tx`` order.

The pickles were written by Python 2, hence ``encoding="latin1"``. Node ``i < len(allx)`` is row
``i`` of ``allx``; test node ``test.index[k]`` is row ``k`` of ``tx``. Citeseer has 15 ids in the
test range that are absent from ``test.index`` (Kipf & Welling's loader calls them "isolated",
but they do have edges); as in that loader (and PyG / DGL) they get zero feature rows and label
0, and belong to no split (``meta["unlabelled_nodes"]``).
Features are returned raw (binary bag of words / TF-IDF); normalisation belongs to the model.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from twirls.data.files import raw_file
from twirls.data.graph import GraphData, Split, undirected_graph

NAMES = ("cora", "citeseer", "pubmed")
_PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")


def _unpickle(path: Path):
    with open(path, "rb") as f:
        return pickle.load(f, encoding="latin1")


def graph_edges(graph: dict) -> tuple[np.ndarray, np.ndarray]:
    """Flatten a ``{node: [neighbours]}`` dict into ``(src, dst)`` arrays, without a Python loop
    over edges (Pubmed: 88k entries)."""
    keys = np.fromiter(graph.keys(), dtype=np.int64, count=len(graph))
    lengths = np.fromiter((len(v) for v in graph.values()), dtype=np.int64, count=len(graph))
    if lengths.sum() == 0:
        return keys[:0], keys[:0]
    dst = np.concatenate([np.asarray(v, dtype=np.int64).reshape(-1) for v in graph.values()])
    return np.repeat(keys, lengths), dst


def read_raw(root: Path, name: str) -> dict:
    """The eight raw objects of ``ind.<name>.*`` (numpy / scipy, untouched)."""
    out = {}
    for part in _PARTS:
        path = raw_file(root, f"ind.{name}.{part}")
        if part == "test.index":
            out[part] = np.loadtxt(path, dtype=np.int64, ndmin=1)
        else:
            out[part] = _unpickle(path)
    return out


def load(root: Path, name: str) -> GraphData:
    """Load ``cora``, ``citeseer`` or ``pubmed`` from ``root/ind.<name>.*``, split ``"public"``."""
    if name not in NAMES:
        raise ValueError(f"planetoid.load: unknown dataset {name!r}; expected one of {NAMES}.")
    raw = read_raw(Path(root), name)
    allx, ally, tx, ty = raw["allx"], np.asarray(raw["ally"]), raw["tx"], np.asarray(raw["ty"])
    test_index = raw["test.index"]
    n_train_labelled = int(np.asarray(raw["y"]).shape[0])

    src, dst = graph_edges(raw["graph"])
    num_rows = allx.shape[0]
    if int(test_index.min()) < num_rows:
        raise ValueError(
            f"ind.{name}.test.index in {root}: test id {int(test_index.min())} is smaller than the "
            f"{num_rows} rows of ind.{name}.allx; the files do not belong together."
        )
    num_nodes = max(
        num_rows,
        len(raw["graph"]),
        int(test_index.max()) + 1,
        int(max(src.max(initial=-1), dst.max(initial=-1))) + 1,
    )

    # Node r < len(allx) is row r of allx; node test.index[k] is row k of tx. Ids in neither
    # (Citeseer's 15 featureless nodes) point at an extra zero row.
    num_features, num_classes = allx.shape[1], ally.shape[1]
    stacked = sp.vstack(
        [sp.csr_matrix(allx), sp.csr_matrix(tx), sp.csr_matrix((1, num_features))]
    ).tocsr()
    source_row = np.full(num_nodes, stacked.shape[0] - 1)
    source_row[:num_rows] = np.arange(num_rows)
    source_row[test_index] = num_rows + np.arange(len(test_index))
    features = stacked[source_row]
    onehot = np.zeros((num_nodes, num_classes), dtype=np.float32)
    onehot[: allx.shape[0]] = ally
    onehot[test_index] = ty
    labels = onehot.argmax(axis=1)
    unlabelled = np.flatnonzero(onehot.sum(axis=1) == 0)

    test = np.sort(test_index)
    split = Split(
        train=torch.arange(n_train_labelled),
        val=torch.arange(n_train_labelled, n_train_labelled + 500),
        test=torch.as_tensor(test, dtype=torch.int64),
    )
    graph = undirected_graph(torch.from_numpy(src), torch.from_numpy(dst), num_nodes)
    return GraphData(
        name=name,
        graph=graph,
        features=torch.as_tensor(features.toarray(), dtype=torch.float32),
        labels=torch.as_tensor(labels, dtype=torch.int64),
        splits={"public": split},
        meta={
            "source": f"Planetoid ind.{name}.* (kimiyoung/planetoid)",
            "raw_directed_edges": int(len(src)),
            "raw_self_loops": int((src == dst).sum()),
            "unlabelled_nodes": unlabelled.tolist(),
            "zero_feature_rows": int((source_row == stacked.shape[0] - 1).sum()),
        },
    )
