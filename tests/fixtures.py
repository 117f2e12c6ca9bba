"""Generators of small raw files in the exact on-disk formats the loaders read.

Each ``write_*`` function draws a random ground truth (node features, labels, edges, splits),
writes it in the source's format under ``root`` (the folder a loader receives), and returns the
truth, so a test can check that the loader recovers it. Everything is seeded.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
from collections import defaultdict
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components

from twirls.data.graph import GraphData, Split, undirected_graph

REPO = Path(__file__).resolve().parents[1]
#: the offline mirror of raw files (CI: ../shared/datasets beside the clone)
MIRROR = Path(os.environ.get("TWIRLS_DATA_MIRROR", REPO.parent / "shared" / "datasets"))
PLANETOID = "kimiyoung__planetoid/data"


def random_edges(rng: np.random.RandomState, n: int, m: int) -> np.ndarray:
    """``(m', 2)`` distinct undirected pairs ``i < j`` (``m' <= m``)."""
    pairs = rng.randint(0, n, size=(m, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    pairs = np.sort(pairs, axis=1)
    return np.unique(pairs, axis=0)


def edge_set(src, dst) -> set[tuple[int, int]]:
    """Undirected, self-loop-free edge set ``{(min, max)}`` of an edge list."""
    src, dst = np.asarray(src), np.asarray(dst)
    keep = src != dst
    lo, hi = np.minimum(src, dst)[keep], np.maximum(src, dst)[keep]
    return set(zip(lo.tolist(), hi.tolist(), strict=True))


# --------------------------------------------------------------------------- Planetoid pickles
def write_planetoid(
    root: Path,
    name: str = "pubmed",
    num_classes: int = 3,
    num_features: int = 40,
    num_unlabelled: int = 600,
    num_test: int = 1000,
    num_missing_test: int = 0,
    seed: int = 0,
) -> dict:
    """``ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}`` as Planetoid writes them.

    Nodes ``0 .. A-1`` are the ``allx`` rows (the first ``20 * num_classes`` are the labelled
    training nodes ``x``/``y``); nodes ``A .. A + num_test + num_missing_test - 1`` are test
    candidates, of which ``num_missing_test`` (like Citeseer's 15 featureless nodes, which Kipf's
    code calls "isolated" although they have edges) are left out of ``tx``/``test.index``.
    ``tx`` rows are written in a shuffled order, as in the real files.
    Features are scipy CSR float32, labels one-hot numpy arrays, the graph a
    ``defaultdict(list)`` listing each edge from both ends (plus one duplicate and one
    self-loop), the test index one id per line.
    """
    rng = np.random.RandomState(seed)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    num_train = 20 * num_classes
    num_allx = num_train + num_unlabelled
    n = num_allx + num_test + num_missing_test
    features = (rng.rand(n, num_features) < 0.1).astype(np.float32)
    labels = rng.randint(0, num_classes, size=n)
    labels[:num_train] = np.repeat(np.arange(num_classes), 20)
    onehot = np.eye(num_classes, dtype=np.int32)[labels]
    candidates = np.arange(num_allx, n)
    missing = np.sort(rng.choice(candidates, size=num_missing_test, replace=False))
    test_ids = rng.permutation(np.setdiff1d(candidates, missing))
    features[missing] = 0.0

    edges = random_edges(rng, n, 3 * n)
    graph: dict[int, list[int]] = defaultdict(list)
    for i in range(n):
        graph[i]  # every node is a key, as in the real files
    for a, b in edges.tolist():
        graph[a].append(b)
        graph[b].append(a)
    a, b = edges[0].tolist()
    graph[a].append(b)  # a duplicate entry
    graph[a].append(a)  # a self-loop

    objects = {
        "x": sp.csr_matrix(features[:num_train]),
        "y": onehot[:num_train],
        "allx": sp.csr_matrix(features[:num_allx]),
        "ally": onehot[:num_allx],
        "tx": sp.csr_matrix(features[test_ids]),
        "ty": onehot[test_ids],
        "graph": graph,
    }
    for part, obj in objects.items():
        with open(root / f"ind.{name}.{part}", "wb") as f:
            pickle.dump(obj, f, protocol=2)
    (root / f"ind.{name}.test.index").write_text("".join(f"{i}\n" for i in test_ids))
    return {
        "num_nodes": n,
        "features": features,
        "labels": labels,
        "edges": edge_set(edges[:, 0], edges[:, 1]),
        "train": np.arange(num_train),
        "val": np.arange(num_train, num_train + 500),
        "test": np.sort(test_ids),
        "missing": missing,
    }


# --------------------------------------------------------------------------- Geom-GCN
def write_geom(root: Path, geom_name: str = "texas", num_nodes: int = 60, num_features: int = 12,
               seed: int = 0) -> dict:
    """``out1_node_feature_label.txt`` (rows in shuffled id order; dense 0/1 vectors, or index
    lists for ``film``), ``out1_graph_edges.txt`` (directed, with a self-loop) and the ten
    ``<geom_name>_split_0.6_0.2_<i>.npz`` mask files."""
    rng = np.random.RandomState(seed)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    features = (rng.rand(num_nodes, num_features) < 0.3).astype(np.float32)
    features[:, -1] = 1.0  # every row non-empty, and the width is max index + 1
    labels = rng.randint(0, 5, size=num_nodes)
    header = "node_id\tfeature\tlabel\n"
    rows = []
    for i in rng.permutation(num_nodes):
        if geom_name == "film":
            feature = ",".join(map(str, rng.permutation(np.flatnonzero(features[i]))))
        else:
            feature = ",".join(str(int(v)) for v in features[i])
        rows.append(f"{i}\t{feature}\t{labels[i]}\n")
    (root / "out1_node_feature_label.txt").write_text(header + "".join(rows))
    edges = rng.randint(0, num_nodes, size=(2 * num_nodes, 2))
    edges[0] = (3, 3)
    (root / "out1_graph_edges.txt").write_text(
        "node_id\tnode_id\n" + "".join(f"{a}\t{b}\n" for a, b in edges.tolist()))
    splits = []
    for i in range(10):
        part = rng.permutation(num_nodes) % 5  # 0,1,2 train; 3 val; 4 test
        masks = {"train_mask": (part < 3).astype(np.uint8),
                 "val_mask": (part == 3).astype(np.uint8),
                 "test_mask": (part == 4).astype(np.uint8)}
        np.savez(root / f"{geom_name}_split_0.6_0.2_{i}.npz", **masks)
        splits.append({k: np.flatnonzero(v) for k, v in masks.items()})
    return {"features": features, "labels": labels, "edges": edge_set(edges[:, 0], edges[:, 1]),
            "splits": splits}


# --------------------------------------------------------------------------- OGB ogbn-arxiv
def _write_csv_gz(path: Path, rows: np.ndarray, fmt: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = np.asarray(rows)
    if rows.ndim == 1:
        rows = rows[:, None]
    text = "".join(",".join(fmt % v for v in row) + "\n" for row in rows.tolist())
    with gzip.open(path, "wt") as f:
        f.write(text)


def write_ogb_arxiv(root: Path, num_nodes: int = 300, num_edges: int = 900, seed: int = 0) -> dict:
    """``root/ogbn_arxiv/`` in OGB's layout (``raw/*.csv.gz``, ``split/time/*.csv.gz``,
    ``RELEASE_v1.txt``) with directed citations, including some reciprocal pairs."""
    rng = np.random.RandomState(seed)
    base = Path(root) / "ogbn_arxiv"
    edges = rng.randint(0, num_nodes, size=(num_edges, 2))
    edges = edges[edges[:, 0] != edges[:, 1]]
    edges = np.unique(edges, axis=0)
    edges = np.unique(np.concatenate([edges, edges[:10, ::-1]]), axis=0)  # reciprocal pairs
    edges = edges[rng.permutation(len(edges))]
    features = rng.randn(num_nodes, 128).astype(np.float32)
    labels = rng.randint(0, 40, size=num_nodes)
    year = rng.randint(2010, 2021, size=num_nodes)
    _write_csv_gz(base / "raw/edge.csv.gz", edges, "%d")
    _write_csv_gz(base / "raw/node-feat.csv.gz", features, "%.9g")
    _write_csv_gz(base / "raw/node-label.csv.gz", labels, "%d")
    _write_csv_gz(base / "raw/node_year.csv.gz", year, "%d")
    _write_csv_gz(base / "raw/num-node-list.csv.gz", np.array([num_nodes]), "%d")
    _write_csv_gz(base / "raw/num-edge-list.csv.gz", np.array([len(edges)]), "%d")
    split = {
        "train": np.flatnonzero(year <= 2017),
        "valid": np.flatnonzero(year == 2018),
        "test": np.flatnonzero(year >= 2019),
    }
    for part, ids in split.items():
        _write_csv_gz(base / f"split/time/{part}.csv.gz", ids, "%d")
    (base / "RELEASE_v1.txt").write_text("# Release note for ogbn-arxiv\n\n### v1: initial\n")
    return {"num_nodes": num_nodes, "edges": edges, "features": features, "labels": labels,
            "year": year, "split": split}


# --------------------------------------------------------------------------- IGNN amazon-all
def write_amazon(
    root: Path,
    num_nodes: int = 400,
    num_classes: int = 58,
    num_edges: int = 1200,
    seed: int = 0,
) -> dict:
    """``root/amazon-all/{meta,adj_list,label,test_idx,train_idx-0.0X}.txt`` as IGNN ships them.

    Each undirected edge is listed from one end only for some pairs and from both ends for
    others (the loader must symmetrise either way); one line has a self-loop. Test = last 10%
    of a shuffle of the labelled nodes, train fractions = prefixes of the same shuffle.
    """
    rng = np.random.RandomState(seed)
    base = Path(root) / "amazon-all"
    base.mkdir(parents=True, exist_ok=True)
    edges = random_edges(rng, num_nodes, num_edges)
    neighbours: list[list[int]] = [[] for _ in range(num_nodes)]
    for k, (a, b) in enumerate(edges.tolist()):
        neighbours[a].append(b)
        if k % 2 == 0:
            neighbours[b].append(a)
    neighbours[0].append(0)
    lines = [" ".join(map(str, [len(nb), *nb])) for nb in neighbours]
    (base / "adj_list.txt").write_text("\n".join(lines) + "\n")
    labels = (rng.rand(num_nodes, num_classes) < 0.05).astype(np.int64)
    labels[rng.rand(num_nodes) < 0.2] = 0  # unlabelled nodes
    (base / "label.txt").write_text("".join(" ".join(map(str, row)) + "\n"
                                            for row in labels.tolist()))
    (base / "meta.txt").write_text(f"{num_nodes} {num_classes}\n")
    labelled = rng.permutation(np.flatnonzero(labels.sum(axis=1) > 0))
    test = labelled[-len(labelled) // 10:]
    (base / "test_idx.txt").write_text("".join(f"{i}\n" for i in test))
    train = {}
    for frac in ("0.05", "0.06", "0.07", "0.08", "0.09"):
        train[frac] = labelled[: int(float(frac) * num_nodes)]
        (base / f"train_idx-{frac}.txt").write_text("".join(f"{i}\n" for i in train[frac]))
    return {"num_nodes": num_nodes, "labels": labels, "edges": edge_set(edges[:, 0], edges[:, 1]),
            "test": test, "train": train, "neighbours": neighbours}


# --------------------------------------------------------------------------- SIGHAN PKU
ALPHABET = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动"


def random_sentences(
    num_sentences: int, seed: int = 0, alphabet: str = ALPHABET, max_words: int = 12
) -> list[list[str]]:
    """Segmented sentences: lists of 1..4-character words over ``alphabet``."""
    rng = np.random.RandomState(seed)
    sentences = []
    for _ in range(num_sentences):
        num_words = rng.randint(1, max_words + 1)
        lengths = rng.choice([1, 2, 3, 4], size=num_words, p=[0.35, 0.45, 0.12, 0.08])
        sentences.append(["".join(rng.choice(list(alphabet), size=k)) for k in lengths])
    return sentences


def write_pku(path: Path, sentences: list[list[str]], newline: str = "\r\n") -> None:
    """One sentence per line, words separated by two spaces (SIGHAN style), blank lines between
    some sentences, ``newline`` line ends."""
    lines = []
    for k, words in enumerate(sentences):
        lines.append("  ".join(words) + "  ")
        if k % 7 == 3:
            lines.append("")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(newline.join(lines) + newline)


def write_nettack(raw: Path, adj: sp.spmatrix, x: sp.spmatrix, y: np.ndarray) -> Path:
    """A nettack raw folder for ``nettack-cora``: ``cora.npz`` in gnn-meta-attack's format,
    Pro-GNN's split JSON and a Pro-GNN ``cora_meta_adj_0.2.npz`` one flip away from ``adj``."""
    raw.mkdir(parents=True)
    a, f = sp.csr_matrix(adj), sp.csr_matrix(x)
    np.savez(raw / "cora.npz", adj_data=a.data, adj_indices=a.indices, adj_indptr=a.indptr,
             adj_shape=a.shape, attr_data=f.data, attr_indices=f.indices, attr_indptr=f.indptr,
             attr_shape=f.shape, labels=y)
    perm = np.random.default_rng(2).permutation(adj.shape[0]).tolist()
    (raw / "cora_prognn_splits.json").write_text(json.dumps(
        {"idx_train": perm[:20], "idx_val": perm[20:40], "idx_test": perm[40:]}))
    meta_adj = adj.tolil()
    meta_adj[0, 1] = meta_adj[1, 0] = 1 - meta_adj[0, 1]
    sp.save_npz(raw / "cora_meta_adj_0.2.npz", meta_adj.tocsr())
    return raw


def block_model(n: int = 200, classes: int = 4, d: int = 60, seed: int = 0):
    """Connected symmetric SBM graph (many degree-1 nodes), 0/1 features, labels."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    p = np.where(y[:, None] == y[None, :], 0.05, 0.006)
    upper = np.triu(rng.random((n, n)) < p, 1)
    a = (upper | upper.T).astype(np.float32)
    _, component = connected_components(a, directed=False)
    main = np.flatnonzero(component == np.argmax(np.bincount(component)))
    for c in set(component.tolist()) - {component[main[0]]}:  # connect: one edge per component
        i, j = np.flatnonzero(component == c)[0], rng.choice(main)
        a[i, j] = a[j, i] = 1.0
    prototypes = rng.random((classes, d)) < 0.15
    x = (rng.random((n, d)) < 0.05) | (prototypes[y] & (rng.random((n, d)) < 0.5))
    return sp.csr_matrix(a), sp.csr_matrix(x.astype(np.float32)), y


def toy_data(n: int = 150, classes: int = 3, seed: int = 0) -> GraphData:
    """A homophilous random graph with sparse 0/1 bag-of-words features (the sparse path)."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=gen)
    src, dst = torch.randint(0, n, (2, 4 * n), generator=gen)
    keep = (labels[src] == labels[dst]) | (torch.rand(4 * n, generator=gen) < 0.2)
    features = (torch.rand(n, 60, generator=gen) < 0.05).float()
    features[torch.arange(n), labels] = 1.0
    perm = torch.randperm(n, generator=gen)
    split = Split(perm[:30], perm[30:60], perm[60:])
    return GraphData("toy", undirected_graph(src[keep], dst[keep], n), features, labels,
                     {"a": split, "b": Split(perm[60:90], perm[90:120], perm[120:])})
