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
* ``outf_nodes_space_relation_<geomname>_<embedding>.txt`` (optional; Geom-GCN's
  ``structural_neighborhood/`` files, ``embedding`` one of :data:`EMBEDDINGS`): the structural
  neighbourhoods of Geom-GCN (Pei et al., 2020, Sec. 2.1-2.2) precomputed by its authors from a
  2-D node embedding (Isomap = ``MDS``, Poincaré, struc2vec). Header ``node1,node2\tspace\t
  relation_type``, then one line ``<u>,<v>\t<space>\t<r>`` per neighbour pair: ``space`` is
  ``graph`` (``u``, ``v`` adjacent in the graph) or ``latent_space`` (``z_u``, ``z_v`` closer than
  ρ in the embedding), ``r ∈ {0, 1, 2, 3}`` the quadrant of ``z_u`` relative to ``z_v`` (the
  geometric operator τ). See :func:`read_relations` for how they become
  ``meta["geom_relations"]``.
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
#: the node embeddings whose relation files Geom-GCN publishes (Isomap is called MDS there)
EMBEDDINGS = ("MDS", "poincare", "struc2vec")
#: ``space`` of a relation line -> offset of its relation ids: graph r -> r, latent space -> 4 + r
SPACES = {"graph": 0, "latent_space": 4}
NUM_QUADRANTS = 4
#: relation ids 0..7 of the files (the model adds the self-loop relation 8)
NUM_FILE_RELATIONS = len(SPACES) * NUM_QUADRANTS


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


def relation_file(geom: str, embedding: str) -> str:
    return f"outf_nodes_space_relation_{geom}_{embedding}.txt"


def read_relations(path: Path, num_nodes: int) -> torch.Tensor:
    """``(3, E)`` int64 rows ``[src, dst, relation]`` of a Geom-GCN relation file.

    A line ``u,v  space  r`` is the directed edge ``u → v`` (messages flow from ``u`` to ``v``,
    as DGL's graph built by Geom-GCN's ``utils_data.load_data`` from the ``networkx.DiGraph``)
    with relation id ``r`` for ``space = graph`` and ``4 + r`` for ``latent_space``. Geom-GCN
    numbers the 8 (space, r) pairs in order of first appearance; any fixed numbering gives the
    same model (each relation has its own weights). As in that loader, which stores every pair in
    a ``DiGraph`` and re-adds it on every line, a pair listed more than once keeps its *last*
    line (a handful per file: pairs that are graph and latent-space neighbours at once), and
    self-pairs are dropped (the model gives every node one self-loop relation of its own).
    Rows are sorted by ``(dst, src)``.
    """
    table = pd.read_csv(path, sep="\t", header=0, dtype=str, keep_default_na=False)
    if list(table.columns) != ["node1,node2", "space", "relation_type"]:
        raise ValueError(f"{path}: expected the header 'node1,node2<TAB>space<TAB>relation_type', "
                         f"got {list(table.columns)}.")
    if table.empty:
        return torch.zeros(3, 0, dtype=torch.int64)
    pairs = table["node1,node2"].str.split(",", expand=True)
    if pairs.shape[1] != 2:
        raise ValueError(f"{path}: the first column must be '<node1>,<node2>'.")
    src = pairs[0].to_numpy(dtype=np.int64)
    dst = pairs[1].to_numpy(dtype=np.int64)
    unknown = sorted(set(table["space"]) - set(SPACES))
    if unknown:
        raise ValueError(f"{path}: unknown space {unknown[0]!r}; expected one of {tuple(SPACES)}.")
    quadrant = table["relation_type"].to_numpy(dtype=np.int64)
    if quadrant.size and (quadrant.min() < 0 or quadrant.max() >= NUM_QUADRANTS):
        raise ValueError(f"{path}: relation_type must be in 0..{NUM_QUADRANTS - 1}.")
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= num_nodes):
        raise ValueError(f"{path}: node ids must be in 0..{num_nodes - 1}.")
    relation = table["space"].map(SPACES).to_numpy(dtype=np.int64) + quadrant
    key = dst * num_nodes + src
    # last line of every pair: unique over the reversed order keeps the first of the reversal
    _, first_reversed = np.unique(key[::-1], return_index=True)
    keep = len(key) - 1 - first_reversed  # sorted by key = (dst, src)
    keep = keep[src[keep] != dst[keep]]
    return torch.from_numpy(np.stack([src[keep], dst[keep], relation[keep]]))


def load(root: Path, name: str) -> GraphData:
    """Load ``texas``, ``wisconsin``, ``cornell`` or ``actor`` from ``root`` with splits
    ``"0"``..``"9"``; where the Geom-GCN relation files are in ``root``,
    ``meta["geom_relations"]`` maps each such embedding name (:data:`EMBEDDINGS`) to its
    ``(3, E)`` relations (:func:`read_relations`)."""
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
    relations = {emb: read_relations(root / relation_file(geom, emb), n) for emb in EMBEDDINGS
                 if (root / relation_file(geom, emb)).is_file()}
    if relations:  # Geom-GCN's structural neighbourhoods, per embedding (model `geom-gcn`)
        meta["geom_relations"] = relations
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
