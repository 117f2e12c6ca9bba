"""Dataset loaders: real mirror files where the mirror has them, generated fixtures otherwise.

The mirror is found through ``TWIRLS_DATA_MIRROR`` (default ``<repo>/../shared/datasets``); tests
that need it skip with the reason if it is absent. Numbers asserted for real files were measured
on the mirror and agree with the literature where one exists (Planetoid public split sizes,
Nettack LCC sizes, OGB counts).
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from twirls.data import amazon, chains, geom, nettack, ogb_arxiv, pku, planetoid
from twirls.data.graph import GraphData
from twirls.data.registry import STATUS_FILE, load_dataset

from fixtures import (
    MIRROR,
    PLANETOID,
    edge_set,
    random_sentences,
    write_amazon,
    write_geom,
    write_ogb_arxiv,
    write_pku,
    write_planetoid,
)
from requires import needs, needs_deeprobust, needs_ogb

GEOM = "graphdml-uiuc-jlu__geom-gcn"


@pytest.fixture(scope="module")
def mirror() -> Path:
    if not MIRROR.is_dir():
        pytest.skip(f"dataset mirror not found at {MIRROR} (set TWIRLS_DATA_MIRROR)")
    return MIRROR


def link(folder: Path, *sources: Path) -> Path:
    """Symlink ``sources`` into ``folder`` under their basenames (the fetch stage's layout)."""
    folder.mkdir(parents=True, exist_ok=True)
    for s in sources:
        (folder / s.name).symlink_to(s)
    return folder


def graph_edge_set(data: GraphData) -> set[tuple[int, int]]:
    src, dst = data.graph.edges()
    return edge_set(src.numpy(), dst.numpy())


def check_graph_contract(data: GraphData) -> None:
    """The ``GraphData`` promises: symmetric, no self-loops, no duplicates, splits in range."""
    src, dst = (t.numpy() for t in data.graph.edges())
    assert not np.any(src == dst)
    pairs = set(zip(src.tolist(), dst.tolist(), strict=True))
    assert len(pairs) == len(src)
    assert pairs == {(b, a) for a, b in pairs}
    n = data.num_nodes
    assert len(data.labels) == n
    if data.features is not None:
        assert data.features.shape[0] == n and data.features.dtype == torch.float32
    for split in data.splits.values():
        parts = [p.numpy() for p in (split.train, split.val, split.test)]
        for p in parts:
            assert p.dtype == np.int64 and (len(p) == 0 or (p.min() >= 0 and p.max() < n))
            assert len(np.unique(p)) == len(p)
        assert len(np.intersect1d(parts[0], parts[2])) == 0
        assert len(np.intersect1d(parts[1], parts[2])) == 0
        assert len(np.intersect1d(parts[0], parts[1])) == 0


def deeprobust_dataset_class():
    """DeepRobust's ``Dataset`` (imported quietly: it warns that PyG is absent)."""
    from twirls.compat import import_deeprobust

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return import_deeprobust("graph.data").Dataset


def adjacency_edge_set(adj) -> set[tuple[int, int]]:
    coo = sp.coo_matrix(adj)
    return edge_set(coo.row[coo.data != 0], coo.col[coo.data != 0])


# ------------------------------------------------------------------------------ Planetoid
@pytest.mark.parametrize(
    "name, nodes, edges, feats, classes, train, isolated",
    [("cora", 2708, 5278, 1433, 7, 140, 0), ("citeseer", 3327, 4552, 3703, 6, 120, 15)],
)
def test_planetoid_real_files(mirror, tmp_path, name, nodes, edges, feats, classes, train,
                              isolated):
    files = sorted((mirror / PLANETOID).glob(f"ind.{name}.*"))
    data = planetoid.load(link(tmp_path, *files), name)
    check_graph_contract(data)
    assert (data.num_nodes, data.num_undirected_edges) == (nodes, edges)
    assert (data.num_features, data.num_classes) == (feats, classes)
    split = data.splits["public"]
    assert split.sizes() == (train, 500, 1000)
    assert torch.equal(split.train, torch.arange(train))
    assert torch.equal(split.val, torch.arange(train, train + 500))
    assert torch.bincount(data.labels[split.train]).tolist() == [20] * classes
    test_index = np.loadtxt(tmp_path / f"ind.{name}.test.index", dtype=np.int64)
    assert np.array_equal(split.test.numpy(), np.sort(test_index))
    x = data.features.numpy()
    assert ((x == 0) | (x == 1)).all()
    unlabelled = np.array(data.meta["unlabelled_nodes"], dtype=np.int64)
    assert len(unlabelled) == isolated
    if isolated:  # Citeseer: ids of the test range missing from test.index get zero rows
        assert not np.isin(unlabelled, test_index).any()
        assert data.features[unlabelled].abs().sum() == 0
        assert (data.labels[unlabelled] == 0).all()


@needs_deeprobust
def test_cora_matches_deeprobust_planetoid_reader(mirror, tmp_path):
    """Oracle: DeepRobust's Kipf-style Planetoid reader (it only reads files named
    ``ind.pubmed.*``, so Cora's files are linked under that name)."""
    folder = tmp_path / "as_pubmed"
    folder.mkdir()
    for f in (mirror / PLANETOID).glob("ind.cora.*"):
        (folder / f.name.replace("cora", "pubmed")).symlink_to(f)
    dataset = deeprobust_dataset_class()
    reader = dataset.__new__(dataset)  # skip __init__: its random "gcn" split uses np.int
    reader.root = str(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref_adj, ref_features, ref_labels = reader.load_pubmed()
    data = planetoid.load(folder, "pubmed")
    assert np.array_equal(sp.csr_matrix(ref_features).toarray(), data.features.numpy())
    assert np.array_equal(ref_labels, data.labels.numpy())
    assert adjacency_edge_set(ref_adj) == graph_edge_set(data)


def test_pubmed_without_allx_names_the_missing_file(mirror, tmp_path):
    files = sorted((mirror / PLANETOID).glob("ind.pubmed.*"))  # the mirror lacks allx
    assert not (mirror / PLANETOID / "ind.pubmed.allx").exists()
    with pytest.raises(FileNotFoundError, match=r"ind\.pubmed\.allx") as err:
        planetoid.load(link(tmp_path, *files), "pubmed")
    assert str(tmp_path) in str(err.value)


@pytest.mark.parametrize("missing", [0, 5])
def test_planetoid_fixture_recovers_ground_truth(tmp_path, missing):
    truth = write_planetoid(tmp_path, "pubmed", num_missing_test=missing, seed=missing)
    data = planetoid.load(tmp_path, "pubmed")
    check_graph_contract(data)
    assert data.num_nodes == truth["num_nodes"]
    assert np.array_equal(data.features.numpy(), truth["features"])
    labelled = np.setdiff1d(np.arange(truth["num_nodes"]), truth["missing"])
    assert np.array_equal(data.labels.numpy()[labelled], truth["labels"][labelled])
    assert graph_edge_set(data) == truth["edges"]  # duplicate and self-loop entries dropped
    split = data.splits["public"]
    for got, want in zip((split.train, split.val, split.test),
                         (truth["train"], truth["val"], truth["test"]), strict=True):
        assert np.array_equal(got.numpy(), want)
    assert data.meta["unlabelled_nodes"] == truth["missing"].tolist()


def test_planetoid_rejects_unknown_name(tmp_path):
    with pytest.raises(ValueError, match="expected one of"):
        planetoid.load(tmp_path, "cora_ml")


# ------------------------------------------------------------------------------ Nettack
@pytest.fixture(scope="module")
def nettack_root(mirror, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("nettack")
    for x in ("cora", "citeseer"):
        link(folder,
             mirror / f"danielzuegner__gnn-meta-attack/data/{x}.npz",
             mirror / f"ChandlerBang__Pro-GNN/splits/{x}_prognn_splits.json",
             mirror / f"ChandlerBang__Pro-GNN/meta/{x}_meta_adj_0.2.npz")
    return folder


@pytest.mark.parametrize("base, nodes, edges", [("cora", 2485, 5069), ("citeseer", 2110, 3668)])
@needs_deeprobust
def test_nettack_equals_deeprobust(nettack_root, base, nodes, edges):
    Dataset = deeprobust_dataset_class()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = Dataset(root=str(nettack_root), name=base, setting="nettack", seed=15)
        ref_prognn = Dataset(root=str(nettack_root), name=base, setting="prognn")
    state = np.random.get_state()[1].copy()
    data = nettack.load(nettack_root, f"nettack-{base}")
    assert np.array_equal(np.random.get_state()[1], state), "global numpy RNG was touched"
    check_graph_contract(data)
    assert (data.num_nodes, data.num_undirected_edges) == (nodes, edges)
    adj = data.meta["adj"]
    assert sp.isspmatrix_csr(adj) and adj.dtype == np.float32
    assert abs(adj - ref.adj).sum() == 0
    assert abs(data.meta["features_sparse"] - ref.features).sum() == 0
    assert np.array_equal(data.features.numpy(), ref.features.toarray())
    assert np.array_equal(data.labels.numpy(), ref.labels)
    assert adjacency_edge_set(adj) == graph_edge_set(data)
    for name, r in (("seed15", ref), ("prognn", ref_prognn)):
        s = data.splits[name]
        assert np.array_equal(s.train.numpy(), r.idx_train)
        assert np.array_equal(s.val.numpy(), r.idx_val)
        assert np.array_equal(s.test.numpy(), r.idx_test)
    same = all(np.array_equal(a, b) for a, b in zip(
        (ref.idx_train, ref.idx_val, ref.idx_test),
        (ref_prognn.idx_train, ref_prognn.idx_val, ref_prognn.idx_test), strict=True))
    assert data.meta["seed15_equals_prognn"] is same


@pytest.mark.parametrize("base", ["cora", "citeseer"])
def test_prognn_meta_adj_is_a_20_percent_perturbation_of_the_lcc(nettack_root, base):
    data = nettack.load(nettack_root, f"nettack-{base}")
    meta_adj = nettack.load_prognn_meta_adj(nettack_root, f"nettack-{base}")
    assert sp.isspmatrix_csr(meta_adj) and meta_adj.shape == data.meta["adj"].shape
    assert abs(meta_adj - meta_adj.T).sum() == 0 and meta_adj.diagonal().sum() == 0
    flipped = len(adjacency_edge_set(meta_adj) ^ adjacency_edge_set(data.meta["adj"]))
    # Mettack flips int(rate * edges) edges of *this* node order; another order would
    # differ in thousands of edges.
    assert flipped == int(0.2 * data.num_undirected_edges)


def test_nettack_missing_split_file_is_named(mirror, tmp_path):
    link(tmp_path, mirror / "danielzuegner__gnn-meta-attack/data/cora.npz")
    with pytest.raises(FileNotFoundError, match="cora_prognn_splits.json"):
        nettack.load(tmp_path, "nettack-cora")


# ------------------------------------------------------------------------------ Geom-GCN
@pytest.mark.parametrize(
    "name, nodes, raw_edges, edges, feats",
    [("texas", 183, 325, 279, 1703), ("wisconsin", 251, 515, 450, 1703),
     ("cornell", 183, 298, 277, 1703), ("actor", 7600, 33391, 26659, 932)],
)
def test_geom_real_files(mirror, tmp_path, name, nodes, raw_edges, edges, feats):
    g = geom.GEOM_NAMES[name]
    folder = link(tmp_path, *(mirror / f"{GEOM}/new_data/{g}").glob("out1_*.txt"),
                  *(mirror / f"{GEOM}/splits").glob(f"{g}_split_0.6_0.2_*.npz"))
    data = geom.load(folder, name)
    check_graph_contract(data)
    assert (data.num_nodes, data.num_undirected_edges, data.num_features) == (nodes, edges, feats)
    assert data.num_classes == 5 and data.meta["raw_directed_edges"] == raw_edges
    assert sorted(data.splits) == [str(i) for i in range(10)]
    for split in data.splits.values():  # every node in one part; test is 20% of them
        assert sum(split.sizes()) == nodes
        assert abs(len(split.test) - 0.2 * nodes) <= 1

    # Independent line-by-line parse: node ``id`` gets its own row, whatever the file order.
    lines = (folder / "out1_node_feature_label.txt").read_text().splitlines()[1:]
    for line in lines:
        node, feature, label = line.split("\t")
        row = data.features[int(node)].numpy()
        if name == "actor":
            assert set(np.flatnonzero(row).tolist()) == {int(i) for i in feature.split(",")}
        else:
            assert np.array_equal(row, np.array(feature.split(","), dtype=np.float32))
        assert data.labels[int(node)] == int(label)
    raw = np.loadtxt(folder / "out1_graph_edges.txt", skiprows=1, dtype=np.int64)
    assert graph_edge_set(data) == edge_set(raw[:, 0], raw[:, 1])
    mask = np.load(folder / f"{g}_split_0.6_0.2_3.npz")["train_mask"]
    assert np.array_equal(data.splits["3"].train.numpy(), np.flatnonzero(mask))


@pytest.mark.parametrize("name", ["wisconsin", "actor"])
def test_geom_fixture_with_shuffled_rows_recovers_ground_truth(tmp_path, name):
    truth = write_geom(tmp_path, geom.GEOM_NAMES[name], seed=len(name))
    data = geom.load(tmp_path, name)
    check_graph_contract(data)
    assert np.array_equal(data.features.numpy(), truth["features"])
    assert np.array_equal(data.labels.numpy(), truth["labels"])
    assert graph_edge_set(data) == truth["edges"]
    for i, want in enumerate(truth["splits"]):
        got = data.splits[str(i)]
        for part, key in zip((got.train, got.val, got.test),
                             ("train_mask", "val_mask", "test_mask"), strict=True):
            assert np.array_equal(part.numpy(), want[key])


def test_geom_missing_split_is_named(mirror, tmp_path):
    folder = link(tmp_path, *(mirror / f"{GEOM}/new_data/texas").glob("out1_*.txt"))
    with pytest.raises(FileNotFoundError, match=r"texas_split_0\.6_0\.2_0\.npz"):
        geom.load(folder, "texas")


# ------------------------------------------------------------------------------ ogbn-arxiv
def test_arxiv_fixture_recovers_ground_truth(tmp_path):
    truth = write_ogb_arxiv(tmp_path)
    data = ogb_arxiv.load(tmp_path, "ogbn-arxiv")
    check_graph_contract(data)
    assert data.num_nodes == truth["num_nodes"]
    assert data.meta["raw_directed_edges"] == len(truth["edges"])
    assert graph_edge_set(data) == edge_set(truth["edges"][:, 0], truth["edges"][:, 1])
    assert data.num_undirected_edges < len(truth["edges"])  # reciprocal citations merge
    assert torch.allclose(data.features, torch.from_numpy(truth["features"]))
    assert np.array_equal(data.labels.numpy(), truth["labels"])
    assert np.array_equal(data.meta["year"].numpy(), truth["year"])
    split = data.splits["time"]
    for got, key in zip((split.train, split.val, split.test), ("train", "valid", "test"),
                        strict=True):
        assert np.array_equal(got.numpy(), truth["split"][key])


@needs_ogb
@needs("dgl", "OGB's DglNodePropPredDataset, the oracle here, builds a DGL graph")
def test_arxiv_matches_ogb_own_reader(tmp_path):
    """Oracle: OGB's ``DglNodePropPredDataset`` processing the same fixture files offline."""
    from ogb.nodeproppred import DglNodePropPredDataset

    write_ogb_arxiv(tmp_path, seed=1)
    ours = ogb_arxiv.load(tmp_path, "ogbn-arxiv")
    copy = tmp_path / "ogb_copy"
    shutil.copytree(tmp_path / "ogbn_arxiv", copy / "ogbn_arxiv")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = DglNodePropPredDataset(name="ogbn-arxiv", root=str(copy))
    graph, labels = ref[0]
    src, dst = graph.edges()
    assert graph.num_edges() == ours.meta["raw_directed_edges"]
    assert edge_set(src.numpy(), dst.numpy()) == graph_edge_set(ours)
    assert torch.allclose(graph.ndata["feat"], ours.features)
    assert torch.equal(labels[:, 0].long(), ours.labels)
    idx = ref.get_idx_split()
    time = ours.splits["time"]
    for got, key in zip((time.train, time.val, time.test), ("train", "valid", "test"),
                        strict=True):
        assert torch.equal(got, idx[key])


def test_arxiv_partial_mirror_names_the_missing_edge_file(mirror, tmp_path):
    link(tmp_path / "ogbn_arxiv" / "raw",
         *(mirror / "mims-harvard__GNNGuard/Datasets/ogbn_arxiv/raw").glob("*.csv.gz"))
    with pytest.raises(FileNotFoundError, match=r"edge\.csv\.gz"):
        ogb_arxiv.load(tmp_path, "ogbn-arxiv")


def test_arxiv_inconsistent_counts_are_reported(tmp_path):
    write_ogb_arxiv(tmp_path)
    import gzip

    with gzip.open(tmp_path / "ogbn_arxiv/raw/num-edge-list.csv.gz", "wt") as f:
        f.write("7\n")
    with pytest.raises(ValueError, match="edge.csv.gz lines"):
        ogb_arxiv.load(tmp_path, "ogbn-arxiv")


# ------------------------------------------------------------------------------ Amazon
def test_amazon_fixture_recovers_ground_truth(tmp_path):
    truth = write_amazon(tmp_path)
    data = amazon.load(tmp_path, "amazon")
    check_graph_contract(data)
    assert data.features is None and data.num_features == 0
    assert data.labels.shape == (truth["num_nodes"], 58) and data.num_classes == 58
    assert np.array_equal(data.labels.numpy(), truth["labels"])
    assert graph_edge_set(data) == truth["edges"]  # one-sided lists symmetrised, loop dropped
    assert sorted(data.splits) == ["0.05", "0.06", "0.07", "0.08", "0.09"]
    for frac, split in data.splits.items():
        assert np.array_equal(split.train.numpy(), truth["train"][frac])
        assert np.array_equal(split.test.numpy(), truth["test"])
        assert len(split.val) == 0


def test_amazon_graph_matches_ignn_networkx_construction(tmp_path):
    """Oracle: IGNN's ``load_raw_graph`` (tokens after the degree, ``from_dict_of_lists``)."""
    import networkx as nx

    write_amazon(tmp_path, seed=3)
    graph = {}
    for i, line in enumerate((tmp_path / "amazon-all/adj_list.txt").read_text().splitlines()):
        graph[i] = [int(t) for t in line.split()[1:]]
    ref = nx.adjacency_matrix(nx.from_dict_of_lists(graph), nodelist=range(len(graph)))
    assert adjacency_edge_set(ref) == graph_edge_set(amazon.load(tmp_path, "amazon"))


def test_amazon_adj_list_tokenisation(tmp_path):
    """Irregular whitespace, a CRLF line, an empty line, a wrong degree field, no final newline:
    every token after the first of line ``i`` is a neighbour of ``i``, as in IGNN."""
    path = tmp_path / "adj_list.txt"
    path.write_bytes(b"2 1  2\n1\t0\r\n\n5 4 10\n0")
    src, dst, lines, bad = amazon.read_adj_list(path)
    assert (src.tolist(), dst.tolist()) == ([0, 0, 1, 3, 3], [1, 2, 0, 4, 10])
    assert lines == 5 and bad == 1


def test_amazon_inconsistent_meta_is_reported(tmp_path):
    write_amazon(tmp_path)
    (tmp_path / "amazon-all/meta.txt").write_text("401 58\n")
    with pytest.raises(ValueError, match="meta.txt says 401 nodes"):
        amazon.load(tmp_path, "amazon")


# ------------------------------------------------------------------------------ PKU
def words_from_tags(chars: str, tags: np.ndarray) -> list[str]:
    """Invert B/M/E/S tagging (independent of the loader's vectorised tagger)."""
    words, current = [], ""
    for c, t in zip(chars, tags.tolist(), strict=True):
        current += c
        if pku.TAGS[t] in ("E", "S"):
            words.append(current)
            current = ""
    assert current == ""
    return words


def sentences_of(data: GraphData) -> list[tuple[str, np.ndarray]]:
    vocab, ptr = data.meta["vocab"], data.meta["sentence_ptr"].tolist()
    tokens, tags = data.tokens.numpy(), data.labels.numpy()
    return [("".join(vocab[t] for t in tokens[a:b]), tags[a:b])
            for a, b in zip(ptr[:-1], ptr[1:], strict=True)]


@pytest.fixture
def pku_root(tmp_path) -> Path:
    write_pku(tmp_path / pku.TRAIN_FILE, random_sentences(300, seed=1), newline="\r\n")
    test = random_sentences(40, seed=2, alphabet=ALPHABET_WITH_UNSEEN)
    write_pku(tmp_path / pku.TEST_FILE, test, newline="\n")
    return tmp_path


ALPHABET_WITH_UNSEEN = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成鑫龘"


def test_pku_fixture_tags_and_chains(pku_root):
    data = pku.load(pku_root, "pku")
    check_graph_contract(data)
    train = random_sentences(300, seed=1)
    test = random_sentences(40, seed=2, alphabet=ALPHABET_WITH_UNSEEN)
    assert data.features is None and data.num_classes == 4
    ptr = data.meta["sentence_ptr"].numpy()
    assert len(ptr) == 341 and ptr[-1] == data.num_nodes
    # A chain per sentence: n - (#sentences) edges, all between consecutive characters.
    assert data.num_undirected_edges == data.num_nodes - 340
    sentence_of = np.repeat(np.arange(340), np.diff(ptr))
    for a, b in graph_edge_set(data):
        assert b == a + 1 and sentence_of[a] == sentence_of[b]
    # Tags invert to the original segmentation (training chars are all in the vocabulary).
    for (chars, tags), words in zip(sentences_of(data)[:300], train, strict=True):
        assert words_from_tags(chars, tags) == words
    for (_, tags), words in zip(sentences_of(data)[300:], test, strict=True):
        assert [len(w) for w in words_from_tags("x" * len(tags), tags)] == [len(w) for w in words]
    # Unseen test characters map to 0; training characters never do.
    test_chars = "".join(w for s in test for w in s)
    test_tokens = data.tokens[ptr[300]:].numpy()
    assert np.array_equal(test_tokens == 0, np.array([c in "鑫龘" for c in test_chars]))
    assert (data.tokens[: ptr[300]] > 0).all()
    assert data.meta["vocab_size"] == len(set("".join(w for s in train for w in s))) + 1


def test_pku_split_is_deterministic_ten_percent_of_sentences(pku_root):
    a, b = pku.load(pku_root, "pku"), pku.load(pku_root, "pku")
    sa, sb = a.splits["standard"], b.splits["standard"]
    assert all(torch.equal(x, y) for x, y in zip((sa.train, sa.val, sa.test),
                                                 (sb.train, sb.val, sb.test), strict=True))
    assert a.meta["num_sentences"] == {"train": 270, "val": 30, "test": 40}
    ptr = a.meta["sentence_ptr"].numpy()
    val_nodes = np.concatenate([np.arange(ptr[s], ptr[s + 1]) for s in a.meta["val_sentences"]])
    assert np.array_equal(np.sort(val_nodes), sa.val.numpy())
    assert np.array_equal(np.union1d(sa.train, sa.val), np.arange(ptr[300]))
    assert np.array_equal(sa.test.numpy(), np.arange(ptr[300], ptr[-1]))


def test_pku_line_endings_do_not_matter(tmp_path):
    sentences = random_sentences(50, seed=5)
    for nl, sub in (("\r\n", "crlf"), ("\n", "lf")):
        write_pku(tmp_path / sub / pku.TRAIN_FILE, sentences, newline=nl)
        write_pku(tmp_path / sub / pku.TEST_FILE, sentences[:5], newline=nl)
    a, b = pku.load(tmp_path / "crlf", "pku"), pku.load(tmp_path / "lf", "pku")
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.labels, b.labels)
    assert a.meta["vocab"] == b.meta["vocab"]


def test_pku_real_test_gold(mirror, tmp_path):
    gold = mirror / "yuikns__icwb2-data/gold/pku_test_gold.utf8"
    link(tmp_path, gold)
    write_pku(tmp_path / pku.TRAIN_FILE, random_sentences(100, seed=0))
    data = pku.load(tmp_path, "pku")
    split = data.splits["standard"]
    # SIGHAN 2005 PKU test: 1944 non-blank sentences, 104,372 words, 172,733 characters.
    assert data.meta["num_sentences"]["test"] == 1944
    assert len(split.test) == 172733
    ptr = data.meta["sentence_ptr"].numpy()
    tags = data.labels.numpy()
    gold_lines = [line.split() for line in gold.read_text(encoding="utf-8").splitlines()]
    gold_lines = [w for w in gold_lines if w]
    first_test = 100
    assert sum(len(w) for w in gold_lines) == int(np.isin(tags[split.test], [pku.E, pku.S]).sum())
    for k in (0, 1, 500, 1943):
        a, b = ptr[first_test + k], ptr[first_test + k + 1]
        lengths = [len(w) for w in words_from_tags("x" * (b - a), tags[a:b])]
        assert lengths == [len(w) for w in gold_lines[k]]


# ------------------------------------------------------------------------------ Chains
def ignn_chains_reference() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """IGNN's generator as its README describes it (features, labels, shuffled ids)."""
    r = np.random.RandomState(42)
    c, n, length, f = 2, 20, 10, 100
    x = r.uniform(-0.0, 0.0, size=(c, n, length, f))
    x[:, :, 0, :c] += np.eye(c).reshape(c, 1, c)
    y = np.eye(c).reshape(c, 1, 1, c).repeat(n, axis=1).repeat(length, axis=2).reshape(-1, c)
    order = np.arange(c * n * length)
    r.shuffle(order)
    return x.reshape(-1, f), y.argmax(1), order


def test_chains_match_ignn_generator():
    data = chains.load(None, "chains")
    check_graph_contract(data)
    x, y, order = ignn_chains_reference()
    assert np.array_equal(data.features.numpy(), x.astype(np.float32))
    assert np.array_equal(data.labels.numpy(), y)
    split = data.splits["ignn"]
    assert split.sizes() == (20, 100, 200)
    assert np.array_equal(torch.cat([split.train, split.val, split.test]).numpy(), order[:320])


@pytest.mark.parametrize("k, length", [(20, 10), (3, 25)])
def test_chains_structure(k, length):
    data = chains.generate(num_chains_per_class=k, length=length, feature_dim=16,
                           num_train=5, num_val=5, num_test=10)
    n = 2 * k * length
    assert data.num_nodes == n and data.num_undirected_edges == 2 * k * (length - 1)
    check_graph_contract(data)
    # Components are the chains: paths of ``length`` consecutive ids.
    assert graph_edge_set(data) == {(i, i + 1) for i in range(n - 1) if (i + 1) % length}
    heads = data.meta["heads"].numpy()
    is_head = np.zeros(n, dtype=bool)
    is_head[heads] = True
    chain = np.arange(n) // length
    assert (data.labels.numpy() == data.labels.numpy()[heads][chain]).all()
    # The label is recoverable from the head alone: one-hot in column = label ...
    assert np.array_equal(data.features[heads][:, :2].argmax(1), data.labels[heads])
    assert data.features[heads].sum(1).eq(1).all()
    # ... and from nothing else: every non-head feature row is zero, in both classes.
    assert data.features[~is_head].abs().sum() == 0
    assert set(data.labels[~is_head].tolist()) == {0, 1}


def test_chains_named_length_and_determinism():
    a, b = chains.load(Path("unused"), "chains-20"), chains.load(None, "chains-20")
    assert a.num_nodes == 800 and a.meta["length"] == 20
    assert torch.equal(a.splits["ignn"].train, b.splits["ignn"].train)
    assert not torch.equal(a.splits["ignn"].train, chains.load(None, "chains").splits["ignn"].train)
    with pytest.raises(ValueError, match="chains-<L>"):
        chains.load(None, "chains-x")
    with pytest.raises(ValueError, match="split nodes"):
        chains.generate(num_chains_per_class=1, length=5)


def test_dataset_options_reach_generated_loaders_only(tmp_path):
    """A sweep's ``data_grid`` goes through ``load_dataset(..., options)``."""
    for name in ("chains", "cora"):
        (tmp_path / name).mkdir()
        (tmp_path / name / STATUS_FILE).write_text('{"status": "ok"}')
    data = load_dataset("chains", tmp_path, {"length": 7, "num_chains_per_class": 30})
    assert data.meta["length"] == 7 and data.num_nodes == 2 * 30 * 7
    same = chains.generate(length=7, num_chains_per_class=30)
    assert torch.equal(data.splits["ignn"].test, same.splits["ignn"].test)
    with pytest.raises(ValueError, match="no option 'lenght'; accepted: num_chains_per_class"):
        load_dataset("chains", tmp_path, {"lenght": 7})
    with pytest.raises(ValueError, match="'cora' has no option 'length'; accepted: none"):
        load_dataset("cora", tmp_path, {"length": 7})


# ------------------------------------------------------------------------------ Errors
@pytest.mark.parametrize(
    "module, name, expected",
    [(planetoid, "cora", "ind.cora.x"), (nettack, "nettack-citeseer", "citeseer.npz"),
     (geom, "actor", "out1_node_feature_label.txt"), (ogb_arxiv, "ogbn-arxiv", "edge.csv.gz"),
     (amazon, "amazon", "meta.txt"), (pku, "pku", "pku_training.utf8")],
)
def test_missing_files_raise_clear_errors(tmp_path, module, name, expected):
    with pytest.raises(FileNotFoundError) as err:
        module.load(tmp_path, name)
    assert expected in str(err.value) and str(tmp_path) in str(err.value)
