"""Amazon co-purchase (``amazon-all``) as distributed by IGNN (Gu et al., 2020) and SSE.

The paper (Sec. 5.4) uses "the dataset provided by the IGNN repo, including the data-processing
and evaluation code": 334,863 products, 58 community labels (multi-label), no node features,
10% of the labelled nodes as test set and 5%..9% as training set, no validation set. Files in
``root/amazon-all/`` (whitespace-separated text):

* ``meta.txt``: ``<num nodes> <num classes>``;
* ``adj_list.txt``: line ``i`` is ``<degree> <neighbour> <neighbour> ...`` for node ``i``;
* ``label.txt``: line ``i`` is the 0/1 row of the 58 labels of node ``i`` (returned as a float
  ``(n, 58)`` multi-hot tensor, ready for a binary cross-entropy);
* ``test_idx.txt`` and ``train_idx-0.0<k>.txt`` (k = 5..9): one node id per line.

IGNN's ``load_raw_graph`` takes every token after the first of line ``i`` as a neighbour of
``i`` (the degree field is not used) and builds ``networkx.from_dict_of_lists``, i.e. an
undirected graph; we do the same without networkx, and drop self-loops (the model adds its own).
IGNN also passes ``test_idx`` as its validation set; we leave validation empty as the paper says
("there is no dev set") and record that in ``meta``. Splits: ``"0.05"`` .. ``"0.09"``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from twirls.data.files import raw_file
from twirls.data.graph import GraphData, Split, undirected_graph

NAME = "amazon"
FOLDER = "amazon-all"
FRACTIONS = ("0.05", "0.06", "0.07", "0.08", "0.09")


def _path(root: Path, relative: str) -> Path:
    return raw_file(
        root, relative,
        f"IGNN's Dropbox folder `amazon-all`, unpacked as {Path(root) / FOLDER}")


def read_adj_list(path: Path) -> tuple[np.ndarray, np.ndarray, int, int]:
    """``(src, dst, lines, bad_degree)`` of an ``adj_list.txt``: an edge ``(i, j)`` for every
    neighbour ``j`` listed on line ``i``, the number of lines, and the number of lines whose
    degree field disagrees with the number of neighbours listed.

    Vectorised over bytes (2.2M tokens): a token starts at a non-blank byte that follows a blank
    one; its line is the number of newlines before it; the first token of a line is the degree.
    """
    data = np.frombuffer(Path(path).read_bytes(), dtype=np.uint8)
    blank = np.isin(data, np.frombuffer(b" \t\r\n\v\f", dtype=np.uint8))
    newline = np.flatnonzero(data == ord("\n"))
    num_lines = len(newline) + int(len(data) > 0 and data[-1] != ord("\n"))
    starts = np.flatnonzero(~blank & np.concatenate([[True], blank[:-1]]))
    line_of_token = np.searchsorted(newline, starts)
    values = np.array(data.tobytes().split(), dtype=np.int64)
    first = np.concatenate([[True], line_of_token[1:] != line_of_token[:-1]])
    src, dst = line_of_token[~first], values[~first]
    listed = np.bincount(src, minlength=num_lines)
    degree_field = np.zeros(num_lines, dtype=np.int64)
    degree_field[line_of_token[first]] = values[first]
    return src, dst, num_lines, int((listed != degree_field).sum())


def read_ids(path: Path) -> torch.Tensor:
    return torch.from_numpy(np.loadtxt(path, dtype=np.int64, ndmin=1))


def load(root: Path, name: str = NAME) -> GraphData:
    """Load Amazon co-purchase from ``root/amazon-all/`` with splits ``"0.05"``..``"0.09"``."""
    if name != NAME:
        raise ValueError(f"amazon.load: unknown dataset {name!r}; expected {NAME!r}.")
    base = Path(root)
    meta_file = _path(base, f"{FOLDER}/meta.txt")
    adj_file = _path(base, f"{FOLDER}/adj_list.txt")
    label_file = _path(base, f"{FOLDER}/label.txt")
    test_file = _path(base, f"{FOLDER}/test_idx.txt")
    train_files = {p: _path(base, f"{FOLDER}/train_idx-{p}.txt") for p in FRACTIONS}

    with open(meta_file) as f:
        num_nodes, num_classes = (int(w) for w in f.readline().split())
    src, dst, num_lines, bad_degree = read_adj_list(adj_file)
    labels = pd.read_csv(label_file, sep=r"\s+", header=None, dtype=np.float32).to_numpy(copy=True)
    if num_lines != num_nodes or labels.shape != (num_nodes, num_classes):
        raise ValueError(
            f"{base / FOLDER}: meta.txt says {num_nodes} nodes x {num_classes} classes, but "
            f"adj_list.txt has {num_lines} lines and label.txt is {labels.shape[0]} x "
            f"{labels.shape[1]}; the files do not belong together."
        )
    if dst.size and (dst.min() < 0 or dst.max() >= num_nodes):
        raise ValueError(f"{adj_file}: neighbour ids outside 0..{num_nodes - 1}.")
    test = read_ids(test_file)
    empty = torch.zeros(0, dtype=torch.int64)
    splits = {p: Split(train=read_ids(f), val=empty, test=test) for p, f in train_files.items()}
    return GraphData(
        name=NAME,
        graph=undirected_graph(torch.from_numpy(src), torch.from_numpy(dst), num_nodes),
        features=None,
        labels=torch.from_numpy(labels),
        splits=splits,
        meta={
            "source": "IGNN amazon-all (SNAP com-Amazon, 58 largest communities)",
            "raw_directed_edges": int(len(src)),
            "raw_self_loops": int((src == dst).sum()),
            "degree_field_mismatches": bad_degree,
            "note": "IGNN evaluates on test_idx and also uses it as its validation set; "
                    "the paper reports the last epoch's test score, so val is empty here.",
        },
    )
