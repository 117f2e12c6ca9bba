"""Heterophily graphs of Geom-GCN (Pei et al., 2020): Texas, Wisconsin, Cornell and Actor.

The paper's heterophily table uses the ten fixed 60% / 20% / 20% splits of Geom-GCN. Raw files
in ``root`` (Actor is the folder / file prefix ``film`` in the Geom-GCN repository):

* ``out1_node_feature_label.txt``: header line, then ``<node id>\\t<features>\\t<label>``. For
  the WebKB graphs the features are a dense comma-separated 0/1 vector (1703 words). For Actor
  they are the comma-separated *indices* of the non-zero entries; the header says
  ``feature_amount:931`` but the indices run from 0 to 931, so, like Geom-GCN's own loader
  (932-wide vectors), we use ``max index + 1`` columns. Rows are not sorted by id (Actor);
  node ``i`` is the row whose id is ``i``.
* ``out1_graph_edges.txt``: header line, then ``<src>\\t<dst>`` (directed, with some self-loops
  and reciprocal pairs). We symmetrise and drop self-loops (the paper's :math:`A`, eq. 1);
  ``meta["raw_directed_edges"]`` keeps the raw line count.
* ``<geomname>_split_0.6_0.2_<i>.npz`` for ``i = 0..9``: ``train_mask`` / ``val_mask`` /
  ``test_mask`` over node ids, exposed as splits ``"0"`` .. ``"9"``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from twirls.data.files import raw_file
from twirls.data.graph import GraphData, Split, undirected_graph

GEOM_NAMES = {"texas": "texas", "wisconsin": "wisconsin", "cornell": "cornell", "actor": "film"}
NUM_SPLITS = 10


def read_nodes(path: Path, sparse_indices: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(features, labels)`` ordered by node id from ``out1_node_feature_label.txt``."""
    table = pd.read_csv(path, sep="\t", header=0, names=["id", "feature", "label"],
                        dtype={"id": np.int64, "feature": str, "label": np.int64},
                        keep_default_na=False)
    ids = table["id"].to_numpy()
    n = len(ids)
    if not np.array_equal(np.sort(ids), np.arange(n)):
        raise ValueError(f"{path}: node ids are not a permutation of 0..{n - 1}.")
    if sparse_indices:
        lists = [np.array(s.split(","), dtype=np.int64) if s else np.zeros(0, np.int64)
                 for s in table["feature"]]
        rows = np.repeat(ids, [len(x) for x in lists])
        cols = np.concatenate(lists)
        features = np.zeros((n, int(cols.max()) + 1), dtype=np.float32)
        features[rows, cols] = 1.0
    else:
        flat = ",".join(table["feature"]).split(",")
        features = np.asarray(flat, dtype=np.float32).reshape(n, -1)
        features = features[np.argsort(ids)]
    labels = np.empty(n, dtype=np.int64)
    labels[ids] = table["label"].to_numpy()
    return features, labels


def read_edges(path: Path) -> np.ndarray:
    """``(m, 2)`` directed edge list of ``out1_graph_edges.txt``."""
    return pd.read_csv(path, sep="\t", header=0, dtype=np.int64).to_numpy(copy=True)


def read_split(path: Path, num_nodes: int) -> Split:
    with np.load(path) as z:
        masks = [np.asarray(z[k]).astype(bool) for k in ("train_mask", "val_mask", "test_mask")]
    if any(len(m) != num_nodes for m in masks):
        raise ValueError(f"{path}: masks do not have {num_nodes} entries.")
    return Split(*(torch.from_numpy(np.flatnonzero(m)) for m in masks))


def load(root: Path, name: str) -> GraphData:
    """Load ``texas``, ``wisconsin``, ``cornell`` or ``actor`` from ``root`` with splits
    ``"0"``..``"9"``."""
    if name not in GEOM_NAMES:
        raise ValueError(f"geom.load: unknown dataset {name!r}; expected one of "
                         f"{tuple(GEOM_NAMES)}.")
    root, geom = Path(root), GEOM_NAMES[name]
    node_file = raw_file(root, "out1_node_feature_label.txt")
    edge_file = raw_file(root, "out1_graph_edges.txt")
    split_files = [raw_file(root, f"{geom}_split_0.6_0.2_{i}.npz") for i in range(NUM_SPLITS)]
    features, labels = read_nodes(node_file, sparse_indices=(geom == "film"))
    edges = read_edges(edge_file)
    n = len(labels)
    meta = {}
    if geom == "film":
        meta["features_note"] = (
            f"the file header says feature_amount:931 but its feature indices run from 0 to "
            f"{features.shape[1] - 1}, so rows have {features.shape[1]} columns (as in "
            f"Geom-GCN's own loader); the paper's 931 is the header's number")
    if edges.size and int(edges.max()) >= n:
        raise ValueError(f"{edge_file}: node id {int(edges.max())} but only {n} nodes.")
    return GraphData(
        name=name,
        graph=undirected_graph(torch.from_numpy(edges[:, 0]), torch.from_numpy(edges[:, 1]), n),
        features=torch.from_numpy(features),
        labels=torch.from_numpy(labels),
        splits={str(i): read_split(f, n) for i, f in enumerate(split_files)},
        meta={
            "source": f"Geom-GCN new_data/{geom} and splits/{geom}_split_0.6_0.2_*.npz",
            "raw_directed_edges": int(len(edges)),
            "raw_self_loops": int((edges[:, 0] == edges[:, 1]).sum()),
            # edge homophily over the file's directed entries, self-loops included (H2GCN's
            # numbers, quoted in the paper's Table 3, match this count)
            "raw_edge_homophily": float((labels[edges[:, 0]] == labels[edges[:, 1]]).mean()),
            **meta,
        },
    )
