"""Geom-GCN: the layer against a dense re-derivation with one adjacency matrix per relation, the
relation files' loader, the model's config and its end-to-end use through ``meta_keys``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from twirls.data import geom
from twirls.data.graph import undirected_graph
from twirls.models import MODELS, GraphOps, build_model
from twirls.models.baselines.geom_gcn import (
    NUM_RELATIONS,
    SELF_LOOP,
    GeomGCN,
    GeomGCNConv,
    with_self_loops,
)
from twirls.train.loop import TrainConfig, train_run

from fixtures import MIRROR, write_geom

N = 7
#: hand-built relations [src, dst, relation] on 7 nodes: graph pairs in both directions with
#: opposite quadrants (0 <-> 3, 1 <-> 2), latent-space pairs one way only, node 6 has none
RELATIONS = torch.tensor([
    [0, 1, 0], [1, 0, 3],
    [1, 2, 1], [2, 1, 2],
    [2, 3, 3], [3, 2, 0],
    [0, 3, 2], [3, 0, 1],
    [4, 0, 4], [5, 0, 4], [4, 1, 6], [1, 4, 7], [5, 3, 5], [2, 5, 6],
    [3, 3, 2],  # a self-pair: replaced by the self-loop relation
]).t()


def dense_adjacencies(relations: torch.Tensor, n: int) -> torch.Tensor:
    """``(R, n, n)``: ``A_r[v, u] = 1`` iff ``u → v`` has relation ``r`` (self-loops as r = 8)."""
    adj = torch.zeros(NUM_RELATIONS, n, n, dtype=torch.float64)
    for u, v, r in relations.t().tolist():
        if u != v:
            adj[r, v, u] = 1.0
    adj[SELF_LOOP] = torch.eye(n, dtype=torch.float64)
    return adj


def dense_layer(adj: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, merge: str,
                head_merge: str, relu: bool) -> torch.Tensor:
    """The formula of ``GeomGCNConv`` with explicit matrices: per head ``k`` and relation ``r``,
    ``e_r = D^-1/2 A_r D^-1/2 X W_r`` with ``D`` the in-degrees of ``Σ_r A_r``."""
    out_dim = weight.shape[2] // NUM_RELATIONS
    deg = adj.sum(0).sum(1)  # in-degree: row sums of Σ_r A_r
    d = torch.diag(deg.rsqrt())
    heads = []
    for w in weight:
        e = [d @ adj[r] @ d @ x @ w[:, r * out_dim:(r + 1) * out_dim]
             for r in range(NUM_RELATIONS)]
        m = torch.cat(e, 1) if merge == "cat" else torch.stack(e).mean(0)
        heads.append(torch.relu(m) if relu else m)
    return torch.cat(heads, 1) if head_merge == "cat" else torch.stack(heads).mean(0)


def test_with_self_loops_drops_self_pairs_and_adds_one_loop_per_node():
    full = with_self_loops(RELATIONS, N)
    loops = full[:, full[0] == full[1]]
    assert loops[2].tolist() == [SELF_LOOP] * N and sorted(loops[0].tolist()) == list(range(N))
    assert full.shape[1] == RELATIONS.shape[1] - 1 + N
    with pytest.raises(ValueError, match="relation ids"):
        with_self_loops(torch.tensor([[0], [1], [8]]), N)
    with pytest.raises(ValueError, match="node ids"):
        with_self_loops(torch.tensor([[0], [N], [1]]), N)


@pytest.mark.parametrize(("merge", "head_merge", "heads", "relu"),
                         [("cat", "cat", 1, True), ("mean", "mean", 1, False),
                          ("cat", "mean", 2, True), ("mean", "cat", 3, False)])
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support:UserWarning")
def test_conv_matches_dense_rederivation(merge, head_merge, heads, relu):
    torch.manual_seed(0)
    x = torch.randn(N, 5, dtype=torch.float64)
    conv = GeomGCNConv(5, 3, heads=heads, merge=merge, head_merge=head_merge, relu=relu,
                       dropout=0.5).double().eval()
    full = with_self_loops(RELATIONS, N)
    deg = torch.bincount(full[1], minlength=N).double()
    got = conv(x, full, deg)
    want = dense_layer(dense_adjacencies(RELATIONS, N), x, conv.weight.detach(), merge,
                       head_merge, relu)
    assert got.shape == (N, conv.width)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # node 6 only has its self-loop: its relation blocks 0..7 are zero, block 8 is W_8 x_6
    if merge == "cat" and heads == 1:
        assert torch.all(got[6, :3 * SELF_LOOP] == 0)
    # a sparse CSR input gives the same
    got_sparse = conv(x.to_sparse_csr(), full, deg)
    torch.testing.assert_close(got_sparse, want, rtol=1e-12, atol=1e-12)


def test_model_matches_two_dense_layers_and_ignores_the_ops_edges():
    torch.manual_seed(1)
    x = torch.rand(N, 6, dtype=torch.float64)
    model = GeomGCN.from_config({"hidden": 4, "heads": 2, "out_heads": 2}, 6, 3, num_nodes=N,
                                geom_relations={"poincare": RELATIONS}).double().eval()
    adj = dense_adjacencies(RELATIONS, N)
    h = dense_layer(adj, x, model.conv1.weight.detach(), "cat", "cat", True)
    want = dense_layer(adj, h, model.conv2.weight.detach(), "mean", "mean", False)
    assert model.conv1.width == 2 * NUM_RELATIONS * 4 and want.shape == (N, 3)
    graph = undirected_graph(torch.tensor([0, 1]), torch.tensor([1, 2]), N)
    torch.testing.assert_close(model(GraphOps.from_graph(graph), x), want, rtol=1e-12,
                               atol=1e-12)


def test_from_config_rejects_unknown_keys_and_missing_embeddings():
    rel = {"poincare": RELATIONS}
    with pytest.raises(ValueError, match="Geom-GCN config: unknown key 'hiden'.*'hidden'"):
        GeomGCN.from_config({"hiden": 8}, 5, 3, num_nodes=N, geom_relations=rel)
    with pytest.raises(ValueError, match="embedding 'MDS' has no relations.*poincare"):
        GeomGCN.from_config({"embedding": "MDS"}, 5, 3, num_nodes=N, geom_relations=rel)
    with pytest.raises(ValueError, match="merges must be one of"):
        GeomGCN.from_config({"merge": "sum"}, 5, 3, num_nodes=N, geom_relations=rel)
    with pytest.raises(ValueError, match="dropout"):
        GeomGCN.from_config({"dropout": 1.0}, 5, 3, num_nodes=N, geom_relations=rel)
    # without relations (a config check): builds, but refuses to run
    model = build_model("geom-gcn", {"hidden": 8}, 5, 3, num_nodes=N)
    graph = undirected_graph(torch.tensor([0]), torch.tensor([1]), N)
    with pytest.raises(RuntimeError, match="geom_relations"):
        model(GraphOps.from_graph(graph), torch.rand(N, 5))
    assert MODELS["geom-gcn"] is GeomGCN and GeomGCN.meta_keys == ("geom_relations",)


RELATION_TEXT = """node1,node2\tspace\trelation_type
0,1\tgraph\t0
1,0\tgraph\t3
2,3\tlatent_space\t1
0,1\tlatent_space\t2
4,4\tlatent_space\t0
3,0\tlatent_space\t3
2,3\tgraph\t2
"""


def test_read_relations_keeps_the_last_line_of_a_pair_and_drops_self_pairs(tmp_path):
    path = tmp_path / "rel.txt"
    path.write_text(RELATION_TEXT)
    got = geom.read_relations(path, 5)
    # sorted by (dst, src); (0,1) last says latent 2 -> 6; (2,3) last says graph 2 -> 2
    assert got.t().tolist() == [[1, 0, 3], [3, 0, 7], [0, 1, 6], [2, 3, 2]]
    assert got.dtype == torch.int64
    with pytest.raises(ValueError, match="node ids"):
        geom.read_relations(path, 4)
    path.write_text(RELATION_TEXT.replace("graph\t0", "graph\t4"))
    with pytest.raises(ValueError, match="relation_type"):
        geom.read_relations(path, 5)
    path.write_text(RELATION_TEXT.replace("latent_space\t1", "space\t1"))
    with pytest.raises(ValueError, match="unknown space 'space'"):
        geom.read_relations(path, 5)


def write_relation_file(folder: Path, geom_name: str, embedding: str, n: int, seed: int) -> None:
    rng = np.random.RandomState(seed)
    lines = ["node1,node2\tspace\trelation_type"]
    for _ in range(4 * n):
        u, v = rng.randint(0, n, size=2)
        space = "graph" if rng.rand() < 0.5 else "latent_space"
        lines.append(f"{u},{v}\t{space}\t{rng.randint(0, 4)}")
    (folder / geom.relation_file(geom_name, embedding)).write_text("\n".join(lines) + "\n")


def test_loader_puts_present_relation_files_into_meta(tmp_path):
    write_geom(tmp_path, "film", num_nodes=30)
    assert "geom_relations" not in geom.load(tmp_path, "actor").meta
    write_relation_file(tmp_path, "film", "poincare", 30, seed=0)
    data = geom.load(tmp_path, "actor")
    relations = data.meta["geom_relations"]
    assert set(relations) == {"poincare"}
    want = geom.read_relations(tmp_path / "outf_nodes_space_relation_film_poincare.txt", 30)
    assert torch.equal(relations["poincare"], want)
    # end to end: build through meta_keys and train a few epochs
    meta = {k: data.meta.get(k) for k in MODELS["geom-gcn"].meta_keys}
    torch.manual_seed(0)
    model = build_model("geom-gcn", {"hidden": 4}, data.num_features, data.num_classes,
                        num_nodes=data.num_nodes, **meta)
    ops = GraphOps.from_graph(data.graph)
    x = data.features / data.features.sum(1, keepdim=True)
    result = train_run(model, ops, x.to_sparse_csr(), data.labels, data.splits["0"],
                       TrainConfig(epochs=5, lr=0.05), seed=0)
    assert len(result.history) == 5 and all(np.isfinite(r["loss"]) for r in result.history)


GEOM_DIR = MIRROR / "graphdml-uiuc-jlu__geom-gcn"


@pytest.mark.skipif(not GEOM_DIR.is_dir(), reason=f"dataset mirror not found at {MIRROR}")
def test_real_texas_relations_cover_the_graph():
    """Texas, Poincaré: the graph-space pairs are the symmetrised graph of ``out1_graph_edges``
    (self-loops aside), 8 relation ids, 9 pairs listed twice (1098 lines, 1089 pairs)."""
    n = 183
    rel = geom.read_relations(
        GEOM_DIR / "structural_neighborhood/outf_nodes_space_relation_texas_poincare.txt", n)
    assert rel.shape == (3, 1089) and set(rel[2].tolist()) == set(range(8))
    edges = np.loadtxt(GEOM_DIR / "new_data/texas/out1_graph_edges.txt", skiprows=1,
                       dtype=np.int64)
    graph = undirected_graph(torch.from_numpy(edges[:, 0]), torch.from_numpy(edges[:, 1]), n)
    graph_pairs = set(zip(graph.src.tolist(), graph.dst.tolist(), strict=True))
    listed = set(zip(rel[0].tolist(), rel[1].tolist(), strict=True))
    in_graph_space = {(u, v) for u, v, r in rel.t().tolist() if r < 4}
    assert in_graph_space <= graph_pairs <= listed

