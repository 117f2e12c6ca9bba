"""Synthetic raw files of Pubmed, ogbn-arxiv, Amazon and PKU, in the real formats and sizes.

    python -m twirls.rehearsal.generate OUT_DIR [--scale 1.0] [--seed 0]

writes ``OUT_DIR/<dataset>/`` exactly as ``dvc repro fetch@<dataset>`` would leave it, so the
real loaders (``twirls.data.registry.load_dataset``) and stages read it unchanged:

* ``pubmed/ind.pubmed.{x,y,tx,ty,allx,ally,graph,test.index}``: Planetoid's pickles (protocol 2
  as Python 2 wrote them, :mod:`twirls.rehearsal.py2pickle`; scipy CSR float32 TF-IDF rows,
  one-hot numpy labels, a ``defaultdict(list)`` graph);
* ``ogbn-arxiv/arxiv.zip`` (OGB's archive: ``arxiv/raw/*.csv.gz``, ``arxiv/split/time/*``,
  ``arxiv/RELEASE_v1.txt``) unpacked to ``ogbn-arxiv/ogbn_arxiv/`` by the fetch code's own
  :func:`twirls.data.fetch.extract`, as the manifest says;
* ``amazon/amazon-all.zip`` (IGNN's folder) unpacked the same way to ``amazon/amazon-all/``;
* ``pku/pku_training.utf8`` and ``pku/pku_test_gold.utf8`` (SIGHAN 2005 text, CRLF / LF), and
  ``pku/cn_char_fastnlp_100d.zip`` (fastNLP's ``cn-char-fastnlp-100d`` character vectors, one
  word2vec-format ``.txt``) unpacked to ``pku/cn_char_fastnlp_100d/`` by the fetch code, so
  stage ``table12`` runs the paper's protocol (:func:`twirls.cws.protocols.choose_protocol`);
* ``<dataset>/FETCH.json`` with ``"status": "ok"``, the manifest's files of the dataset and a
  note that the data is synthetic. The fetch never runs on this folder (the stages read only
  ``FETCH.json``), so the manifest's checksums of the real files are never applied to ours.

Sizes: :mod:`twirls.rehearsal.sizes` (the paper's Table 5), times ``scale`` (tests use ~0.01;
feature and class counts never scale). Every dataset draws from its own seeded RandomState, so
files are identical across runs. ``OUT_DIR/REHEARSAL.json`` records scale, seed and sizes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import zipfile
import zlib
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from twirls.data import pku
from twirls.data.fetch import entries_for, extract
from twirls.data.registry import STATUS_FILE
from twirls.files import replacing, write_json
from twirls.rehearsal.graphs import (
    both_directions,
    centroid_features,
    group_weights,
    scaled,
    undirected_edges,
)
from twirls.rehearsal.py2pickle import dumps_py2
from twirls.rehearsal.sizes import AMAZON, ARXIV, PKU, PUBMED
from twirls.rehearsal.textio import (
    format_floats,
    format_ints,
    gzip_bytes,
    row_seps,
    table_text,
    write_bytes,
)

MARKER = "REHEARSAL.json"
#: 2: PKU gained the cn-char-fastnlp-100d embedding (a reused --data folder of version 1 lacks it)
FORMAT_VERSION = 2
NOTE = ("synthetic rehearsal data (twirls.rehearsal.generate): real format and size, random "
        "content; never report results on it")


def _rng(name: str, seed: int) -> np.random.RandomState:
    return np.random.RandomState((zlib.crc32(name.encode()) + seed) % 2**32)


def _status(folder: Path, name: str, files: list[str]) -> None:
    status = {"dataset": name, "status": "ok", "files": sorted(files), "note": NOTE}
    (folder / STATUS_FILE).write_text(json.dumps(status, indent=1, sort_keys=True) + "\n")


def _zip(path: Path, members: dict[str, bytes]) -> int:
    """A zip of ``members`` (name -> bytes), stored uncompressed with a fixed date (the csv.gz
    members are compressed already), as deterministic bytes."""
    with replacing(path) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return path.stat().st_size


def _unpack(folder: Path, dataset: str) -> list[str]:
    """Unpack the dataset's archive with the fetch stage's own code and manifest entry."""
    files = []
    for entry in entries_for(dataset):
        if entry.extract:
            extract(entry, folder)
        files.append(entry.file)
    return files


# ----------------------------------------------------------------------------- Planetoid Pubmed
def write_pubmed(folder: Path, scale: float = 1.0, seed: int = 0) -> dict[str, Any]:
    """``ind.pubmed.*`` with Pubmed's sizes (see :mod:`twirls.rehearsal.sizes`)."""
    rng = _rng("pubmed", seed)
    folder.mkdir(parents=True, exist_ok=True)
    classes, dim = PUBMED["classes"], PUBMED["features"]
    num_train = PUBMED["train_per_class"] * classes
    num_test = scaled(PUBMED["test"], scale, 20)
    num_allx = max(scaled(PUBMED["nodes"] - PUBMED["test"], scale), num_train + PUBMED["val"] + 1)
    n = num_allx + num_test
    m = min(scaled(PUBMED["edges"], scale), n * (n - 1) // 4)
    labels = rng.choice(classes, size=n, p=[0.21, 0.39, 0.40])
    labels[:num_train] = np.repeat(np.arange(classes), PUBMED["train_per_class"])

    nnz = int(round(PUBMED["density"] * n * dim))
    k = int(1.2 * nnz) + 64
    rows = rng.randint(0, n, size=k)
    block = dim // classes
    cols = np.where(rng.rand(k) < 0.3, labels[rows] * block + rng.randint(0, block, size=k),
                    rng.randint(0, dim, size=k))
    cells = np.unique(rows.astype(np.int64) * dim + cols)
    cells = np.sort(cells[rng.permutation(len(cells))[:nnz]])
    values = rng.gamma(2.0, 0.03, size=len(cells)).astype(np.float32)
    features = sp.csr_matrix((values, (cells // dim, cells % dim)), shape=(n, dim))
    features.indices = features.indices.astype(np.int32)  # as the real (Python 2) pickles
    features.indptr = features.indptr.astype(np.int32)
    onehot = np.eye(classes, dtype=np.int32)[labels]
    test_ids = rng.permutation(np.arange(num_allx, n))

    edges = undirected_edges(rng, n, m, labels, within=0.8)
    src, dst = both_directions(edges, n)
    graph: dict[int, list[int]] = defaultdict(list)
    bounds = np.searchsorted(src, np.arange(n + 1))
    for i in range(n):
        graph[i] = dst[bounds[i]:bounds[i + 1]].tolist()
    a, b = (int(v) for v in edges[0])
    graph[a].append(b)  # a duplicate entry and a self-loop, as the real file has
    graph[a].append(a)
    objects = {
        "x": features[:num_train], "y": onehot[:num_train],
        "allx": features[:num_allx], "ally": onehot[:num_allx],
        "tx": features[test_ids], "ty": onehot[test_ids], "graph": graph,
    }
    for part, obj in objects.items():
        write_bytes(folder / f"ind.pubmed.{part}", dumps_py2(obj))
    write_bytes(folder / "ind.pubmed.test.index", table_text(test_ids))
    _status(folder, "pubmed", [e.file for e in entries_for("pubmed")])
    return {"nodes": n, "edges": m, "features": dim, "classes": classes,
            "nonzeros": int(features.nnz), "train": num_train, "val": PUBMED["val"],
            "test": num_test}


# ----------------------------------------------------------------------------- OGB ogbn-arxiv
def arxiv_years(rng: np.random.RandomState, train: int, valid: int, test: int) -> np.ndarray:
    """Publication years giving OGB's time split sizes: ``train`` papers up to 2017 (more in
    recent years), ``valid`` in 2018, ``test`` in 2019-2020; in random node order."""
    span = np.arange(1971, 2018)
    weights = 1.18 ** (span - span[0])
    years = np.concatenate([rng.choice(span, size=train, p=weights / weights.sum()),
                            np.full(valid, 2018), rng.choice([2019, 2020], size=test,
                                                             p=[0.6, 0.4])])
    return years[rng.permutation(len(years))]


def write_ogb_arxiv(folder: Path, scale: float = 1.0, seed: int = 0) -> dict[str, Any]:
    """``arxiv.zip`` in OGB's layout, unpacked to ``ogbn_arxiv/`` by the fetch code."""
    rng = _rng("ogbn-arxiv", seed)
    valid, test = scaled(ARXIV["valid"], scale), scaled(ARXIV["test"], scale)
    n = max(scaled(ARXIV["nodes"], scale), valid + test + 1)
    train = n - valid - test
    m = min(scaled(ARXIV["edges"], scale), n * (n - 1) // 4)
    year = arxiv_years(rng, train, valid, test)
    labels = rng.choice(ARXIV["classes"], size=n, p=group_weights(ARXIV["classes"]))
    labels[rng.permutation(n)[:ARXIV["classes"]]] = np.arange(ARXIV["classes"])  # all present
    features = np.round(centroid_features(rng, labels, ARXIV["features"]), 6)
    edges = undirected_edges(rng, n, m, labels, within=0.65)
    newer_first = year[edges[:, 0]] >= year[edges[:, 1]]  # a paper cites older ones
    edges = np.where(newer_first[:, None], edges, edges[:, ::-1])
    split = {"train": np.flatnonzero(year <= 2017), "valid": np.flatnonzero(year == 2018),
             "test": np.flatnonzero(year >= 2019)}
    members = {
        "raw/edge.csv.gz": table_text(edges),
        "raw/node-feat.csv.gz": table_text(features, decimals=6),
        "raw/node-label.csv.gz": table_text(labels),
        "raw/node_year.csv.gz": table_text(year),
        "raw/num-node-list.csv.gz": table_text(np.array([n])),
        "raw/num-edge-list.csv.gz": table_text(np.array([m])),
        **{f"split/time/{part}.csv.gz": table_text(ids) for part, ids in split.items()},
    }
    members = {f"arxiv/{k}": gzip_bytes(v, level=1) for k, v in members.items()}
    members["arxiv/RELEASE_v1.txt"] = b"# Release note for ogbn-arxiv\n\n### v1: initial release\n"
    folder.mkdir(parents=True, exist_ok=True)
    _zip(folder / "arxiv.zip", members)
    _status(folder, "ogbn-arxiv", _unpack(folder, "ogbn-arxiv"))
    return {"nodes": n, "edges": m, "features": ARXIV["features"], "classes": ARXIV["classes"],
            "train": len(split["train"]), "valid": len(split["valid"]),
            "test": len(split["test"])}


# ----------------------------------------------------------------------------- IGNN amazon-all
def adj_list_text(edges: np.ndarray, n: int) -> bytes:
    """IGNN's ``adj_list.txt``: line ``i`` = ``<degree> <neighbour> ...``, every undirected
    edge listed from both ends."""
    src, dst = both_directions(edges, n)
    degree = np.bincount(src, minlength=n)
    line_start = np.concatenate([[0], np.cumsum(degree + 1)[:-1]])
    tokens = np.empty(n + len(dst), dtype=np.int64)
    is_degree = np.zeros(len(tokens), dtype=bool)
    is_degree[line_start] = True
    tokens[is_degree] = degree
    tokens[~is_degree] = dst
    seps = np.full(len(tokens), ord(" "), dtype=np.uint8)
    seps[line_start + degree] = ord("\n")
    return format_ints(tokens, seps)


def label_text(labels: np.ndarray) -> bytes:
    """IGNN's ``label.txt``: one line of space-separated 0/1 per node."""
    n, c = labels.shape
    out = np.full((n, 2 * c), ord(" "), dtype=np.uint8)
    out[:, 0::2] = labels.astype(np.uint8) + ord("0")
    out[:, -1] = ord("\n")
    return out.tobytes()


def write_amazon(folder: Path, scale: float = 1.0, seed: int = 0) -> dict[str, Any]:
    """``amazon-all.zip`` (IGNN's files at its top), unpacked to ``amazon-all/``."""
    rng = _rng("amazon", seed)
    n = scaled(AMAZON["nodes"], scale, 100)
    m = min(scaled(AMAZON["edges"], scale), n * (n - 1) // 4)
    c = AMAZON["classes"]
    community = rng.choice(c, size=n, p=group_weights(c, 0.8))
    labels = np.zeros((n, c), dtype=np.uint8)
    labelled = rng.rand(n) < 0.6
    labels[np.flatnonzero(labelled), community[labelled]] = 1
    extra = labelled & (rng.rand(n) < 0.2)
    labels[np.flatnonzero(extra), rng.randint(0, c, size=int(extra.sum()))] = 1
    edges = undirected_edges(rng, n, m, community, within=0.7)
    order = rng.permutation(np.flatnonzero(labelled))
    num_test = int(round(AMAZON["test_fraction"] * n))
    members = {
        "meta.txt": f"{n} {c}\n".encode(),
        "adj_list.txt": adj_list_text(edges, n),
        "label.txt": label_text(labels),
        "test_idx.txt": table_text(order[-num_test:]),
    }
    train = {}
    for ratio in AMAZON["ratios"]:
        train[ratio] = int(float(ratio) * n)
        members[f"train_idx-{ratio}.txt"] = table_text(order[:train[ratio]])
    folder.mkdir(parents=True, exist_ok=True)
    _zip(folder / "amazon-all.zip", members)
    _status(folder, "amazon", _unpack(folder, "amazon"))
    return {"nodes": n, "edges": m, "features": 0, "classes": c, "test": num_test,
            "train": train, "labelled": int(labelled.sum())}


# ----------------------------------------------------------------------------- SIGHAN PKU
def corpus_text(rng: np.random.RandomState, sentences: int, words: int,
                newline: str) -> tuple[bytes, int]:
    """Segmented sentences in SIGHAN's layout: words followed by two spaces, one sentence per
    line; word lengths as PKU's, characters Zipf-distributed over ~4,700 CJK code points.
    Returns the UTF-8 bytes and the number of characters (graph nodes)."""
    per_sentence = 1 + rng.multinomial(words - sentences, np.full(sentences, 1 / sentences))
    counts = np.asarray(PKU["word_lengths"], dtype=np.float64)
    lengths = 1 + rng.choice(len(counts), size=words, p=counts / counts.sum())
    rank = np.arange(PKU["characters"])
    zipf = 1.0 / (rank + 10.0)
    chars = 0x4E00 + rng.permutation(PKU["characters"])[
        rng.choice(len(rank), size=int(lengths.sum()), p=zipf / zipf.sum())]
    word_of_char = np.repeat(np.arange(words), lengths)
    sentence_of_word = np.repeat(np.arange(sentences), per_sentence)
    sentence_of_char = sentence_of_word[word_of_char]
    nl = [ord(ch) for ch in newline]
    total = len(chars) + 2 * words + len(nl) * sentences
    out = np.full(total, ord(" "), dtype=np.uint32)
    out[np.arange(len(chars)) + 2 * word_of_char + len(nl) * sentence_of_char] = chars
    chars_per_sentence = np.bincount(sentence_of_char, minlength=sentences)
    line_end = np.cumsum(chars_per_sentence + 2 * per_sentence + len(nl)) - len(nl)
    for k, code in enumerate(nl):
        out[line_end + k] = code
    return out.astype("<u4").tobytes().decode("utf-32-le").encode("utf-8"), len(chars)


#: the embedding's archive (manifest row ``pku  cn_char_fastnlp_100d.zip ... zip:=<dir>``) and
#: the one ``.txt`` inside it
EMBEDDING_ZIP = f"{pku.EMBEDDING_DIR}.zip"
EMBEDDING_TXT = f"{pku.EMBEDDING_DIR}.txt"


def embedding_text(rng: np.random.RandomState, chars: np.ndarray, dim: int) -> bytes:
    """word2vec text as :func:`twirls.data.pku.read_char_embedding` reads it: a ``<count>
    <dim>`` header, then ``<char> <v1> ... <v_dim>`` per character (6 decimals, LF)."""
    vectors = rng.normal(0.0, 0.3, size=(len(chars), dim))
    rows = format_floats(vectors, row_seps(len(chars), dim, b" "), 6).decode("ascii")
    lines = [f"{chr(int(c))} {row}" for c, row in zip(chars, rows.splitlines(), strict=True)]
    return (f"{len(chars)} {dim}\n" + "\n".join(lines) + "\n").encode("utf-8")


def write_pku_embedding(folder: Path, seed: int = 0) -> dict[str, Any]:
    """``cn_char_fastnlp_100d.zip`` holding ``cn_char_fastnlp_100d.txt``: a 100-d vector for each
    of the ``PKU["characters"]`` code points :func:`corpus_text` draws from (every character of
    the generated text; the real file's vocabulary size is not recorded here), in random order.
    Never scaled, like feature counts. The old unpacked folder is removed first, so the fetch
    code's :func:`extract` unpacks the new archive."""
    rng = _rng("pku-embedding", seed)
    chars = 0x4E00 + rng.permutation(PKU["characters"])
    text = embedding_text(rng, chars, pku.EMBEDDING_DIM)
    shutil.rmtree(folder / pku.EMBEDDING_DIR, ignore_errors=True)
    _zip(folder / EMBEDDING_ZIP, {EMBEDDING_TXT: text})
    return {"embedding_characters": len(chars), "embedding_dim": pku.EMBEDDING_DIM,
            "embedding_bytes": len(text)}


def write_pku(folder: Path, scale: float = 1.0, seed: int = 0) -> dict[str, Any]:
    """``pku_training.utf8`` (CRLF) and ``pku_test_gold.utf8`` (LF) of PKU's sizes, and the
    ``cn-char-fastnlp-100d`` embedding (:func:`write_pku_embedding`)."""
    rng = _rng("pku", seed)
    sizes: dict[str, Any] = {"nodes": 0, "edges": 0, "features": 0, "classes": 4}
    for part, file, newline in (("train", pku.TRAIN_FILE, "\r\n"),
                                ("test", pku.TEST_FILE, "\n")):
        sentences = scaled(PKU[f"{part}_sentences"], scale, 2)
        words = max(scaled(PKU[f"{part}_words"], scale), sentences)
        text, chars = corpus_text(rng, sentences, words, newline)
        write_bytes(folder / file, text)
        sizes[f"{part}_sentences"], sizes[f"{part}_words"] = sentences, words
        sizes[f"{part}_characters"], sizes[f"{part}_bytes"] = chars, len(text)
        sizes["nodes"] += chars  # one node per character, a chain per sentence
        sizes["edges"] += chars - sentences
    sizes.update(write_pku_embedding(folder, seed))
    _status(folder, "pku", _unpack(folder, "pku"))
    return sizes


WRITERS: dict[str, Callable[[Path, float, int], dict[str, Any]]] = {
    "pubmed": write_pubmed,
    "ogbn-arxiv": write_ogb_arxiv,
    "amazon": write_amazon,
    "pku": write_pku,
}


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def generate(root: Path, scale: float = 1.0, seed: int = 0,
             datasets: list[str] | None = None, log: Callable[[str], None] | None = None,
             ) -> dict[str, Any]:
    """Write every dataset (or ``datasets``) under ``root``; return and record their sizes.

    If ``root/REHEARSAL.json`` already records the same scale, seed and format version for a
    dataset whose folder says ``"status": "ok"``, that dataset is kept as it is.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    marker = root / MARKER
    record = json.loads(marker.read_text()) if marker.exists() else {}
    same = (record.get("scale") == scale and record.get("seed") == seed
            and record.get("version") == FORMAT_VERSION)
    done = record.get("datasets", {}) if same else {}
    for name in datasets or list(WRITERS):
        folder = root / name
        if name in done and (folder / STATUS_FILE).exists():
            continue
        start = time.perf_counter()
        sizes = WRITERS[name](folder, scale, seed)
        sizes["seconds"] = round(time.perf_counter() - start, 2)
        sizes["bytes_on_disk"] = folder_bytes(folder)
        done[name] = sizes
        if log:
            log(f"generated {name}: {sizes}")
        record = {"version": FORMAT_VERSION, "scale": scale, "seed": seed, "note": NOTE,
                  "datasets": done}
        write_json(marker, record, sort_keys=True)
    return {k: done[k] for k in (datasets or list(WRITERS))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dataset", action="append", choices=list(WRITERS))
    args = parser.parse_args(argv)
    generate(args.out, args.scale, args.seed, args.dataset, log=print)
    return 0


if __name__ == "__main__":
    sys.exit(main())
