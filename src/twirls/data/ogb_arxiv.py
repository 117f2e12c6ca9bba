"""ogbn-arxiv (Hu et al., 2020) read straight from OGB's on-disk csv.gz layout.

The paper (Sec. 5.1) uses OGB's standard "time" split: papers up to 2017 train, 2018 validation,
2019 onwards test. Files, as unpacked from OGB's ``arxiv.zip`` into ``root/ogbn_arxiv/``
(every csv is gzip-compressed, comma-separated, without header):

* ``raw/edge.csv.gz``: one directed citation ``src,dst`` per line (1,166,243 lines);
* ``raw/node-feat.csv.gz``: 128 floats per node (averaged word2vec of title and abstract);
* ``raw/node-label.csv.gz``: one class id (0..39) per node;
* ``raw/node_year.csv.gz``: one publication year per node;
* ``raw/num-node-list.csv.gz`` / ``raw/num-edge-list.csv.gz``: one line each, the counts;
* ``split/time/{train,valid,test}.csv.gz``: one node id per line.
* ``RELEASE_v1.txt``: OGB's version marker (not read here; OGB's own loader insists on it).

Citations are directed; like the paper's :math:`A` (eq. 1) and OGB leaderboard practice
(``to_bidirected``), we keep each citation as an undirected edge. ``meta["raw_directed_edges"]``
records the raw count and ``meta["year"]`` the years.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from twirls.data.files import raw_file
from twirls.data.graph import GraphData, Split, undirected_graph

NAME = "ogbn-arxiv"
FOLDER = "ogbn_arxiv"
RAW_FILES = ("edge", "node-feat", "node-label", "node_year", "num-node-list", "num-edge-list")
SPLIT_FILES = ("train", "valid", "test")


def _path(root: Path, relative: str) -> Path:
    return raw_file(
        root, relative,
        f"unpack OGB's arxiv.zip so that its folder is {Path(root) / FOLDER}")


def read_csv_gz(path: Path, dtype) -> np.ndarray:
    """A header-less csv.gz as a 2-D array (C parser; 1.2M edge lines in about a second)."""
    return pd.read_csv(path, compression="gzip", header=None, dtype=dtype).to_numpy(copy=True)


def load(root: Path, name: str = NAME) -> GraphData:
    """Load ``ogbn-arxiv`` from ``root/ogbn_arxiv/`` with split ``"time"``."""
    if name != NAME:
        raise ValueError(f"ogb_arxiv.load: unknown dataset {name!r}; expected {NAME!r}.")
    base = Path(root)
    files = {f: _path(base, f"{FOLDER}/raw/{f}.csv.gz") for f in RAW_FILES}
    split_paths = {s: _path(base, f"{FOLDER}/split/time/{s}.csv.gz") for s in SPLIT_FILES}

    num_nodes = int(read_csv_gz(files["num-node-list"], np.int64)[0, 0])
    num_edges = int(read_csv_gz(files["num-edge-list"], np.int64)[0, 0])
    edges = read_csv_gz(files["edge"], np.int64)
    features = read_csv_gz(files["node-feat"], np.float32)
    labels = read_csv_gz(files["node-label"], np.int64)[:, 0]
    year = read_csv_gz(files["node_year"], np.int64)[:, 0]
    checks = {
        "edge.csv.gz lines": (len(edges), num_edges),
        "node-feat.csv.gz lines": (len(features), num_nodes),
        "node-label.csv.gz lines": (len(labels), num_nodes),
        "node_year.csv.gz lines": (len(year), num_nodes),
    }
    for what, (got, want) in checks.items():
        if got != want:
            raise ValueError(f"{base / FOLDER}: {what} = {got}, but num-*-list says {want}; "
                             f"the files are truncated or mixed up (re-unpack arxiv.zip).")
    if edges.size and (edges.min() < 0 or edges.max() >= num_nodes):
        raise ValueError(f"{files['edge']}: node ids outside 0..{num_nodes - 1}.")
    split = Split(*(torch.from_numpy(read_csv_gz(split_paths[s], np.int64)[:, 0])
                    for s in SPLIT_FILES))
    edges_t = torch.from_numpy(edges)
    return GraphData(
        name=NAME,
        graph=undirected_graph(edges_t[:, 0], edges_t[:, 1], num_nodes),
        features=torch.from_numpy(features),
        labels=torch.from_numpy(labels),
        splits={"time": split},
        meta={
            "source": "OGB ogbn-arxiv (arxiv.zip), raw csv.gz files",
            "raw_directed_edges": num_edges,
            "year": torch.from_numpy(year),
        },
    )
