"""Mettack: the fast implementation against DeepRobust's and against a dense autograd oracle.

A 200-node stochastic-block-model graph with class-dependent 0/1 features stands in for Cora
(DeepRobust needs ~0.4 s per flip on it instead of ~20 s on Cora).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from twirls.attack import deeprobust_ref
from twirls.attack import surrogate as sur
from twirls.attack.io import AttackedGraph, load_attacked, save_attacked
from twirls.attack.metattack import Metattack, first_argmax
from twirls.attack.normalize import normalize, to_torch
from twirls.compat import import_deeprobust
from twirls.stages import attack as stage

from fixtures import block_model, write_nettack
from requires import needs_deeprobust, require

N_FLIPS = 20


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Thousands of tiny ops per flip: with other jobs on the cores (pytest -n 2), OpenMP
    threads waiting for each other make them ~10x slower than one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def graph():
    adj, x, y = block_model()
    perm = np.random.default_rng(1).permutation(adj.shape[0])
    train, unlabeled = np.sort(perm[:20]), np.sort(perm[20:])
    torch.manual_seed(15)
    log_probs = sur.train_gcn(adj, x, y, train, sur.SURROGATE)
    targets = sur.self_training_labels(log_probs, y, train)
    return adj, x, y, train, unlabeled, targets


@pytest.fixture(scope="module")
def fast_attack(graph):
    """Our attack, N_FLIPS flips from ``torch.manual_seed(3)``."""
    adj, x, y, train, unlabeled, targets = graph
    torch.manual_seed(3)
    fast = Metattack(adj, x, y, train, unlabeled, targets)
    attacked = fast.attack(N_FLIPS, progress=False)
    return fast, attacked


@pytest.fixture(scope="module")
def both(graph, fast_attack):
    """DeepRobust's and our attack, N_FLIPS flips each from the same random state."""
    require("deeprobust")
    adj, x, y, train, unlabeled, targets = graph
    torch.manual_seed(3)
    ref = deeprobust_ref.run_metattack(adj, x, y, train, unlabeled, N_FLIPS, targets)
    return ref, *fast_attack


@needs_deeprobust
def test_first_flips_identical_to_deeprobust(both):
    ref, fast, attacked = both
    assert fast.flips == ref.flips
    assert abs(attacked - ref.adj).sum() == 0


def test_attacked_graph_is_symmetric_without_singletons_and_has_exact_flip_count(graph,
                                                                                 fast_attack):
    adj = graph[0]
    fast, attacked = fast_attack
    assert abs(attacked - attacked.T).sum() == 0
    assert attacked.diagonal().sum() == 0
    assert np.asarray(attacked.sum(1)).min() >= 1
    assert stage.n_flips_between(adj, attacked) == N_FLIPS == fast.n_perturbations
    assert all(i < j for i, j in fast.flips)


@needs_deeprobust
def test_surrogate_accuracy_after_attack_matches_deeprobust(graph, both):
    adj, x, y, train, unlabeled, _ = graph
    ref, _, attacked = both
    gcn = import_deeprobust("graph.defense").GCN
    torch.manual_seed(7)
    model = gcn(nfeat=x.shape[1], nclass=int(y.max()) + 1, nhid=16, dropout=0.5,
                with_relu=False, with_bias=True, device="cpu")
    model.fit(x, ref.adj, y, train)
    theirs = sur.accuracy(model.output, y, unlabeled)
    torch.manual_seed(7)
    ours = sur.accuracy(sur.train_gcn(attacked, x, y, train, sur.SURROGATE), y, unlabeled)
    torch.manual_seed(7)
    clean = sur.accuracy(sur.train_gcn(adj, x, y, train, sur.SURROGATE), y, unlabeled)
    assert abs(ours - theirs) <= 0.01
    assert ours < clean  # the attack hurts the model it attacks


def _dense_meta_gradient(adj, x, y, train, unlabeled, targets, flips, w1, w2, lambda_):
    """DeepRobust's formulas in float64 with dense autograd: d(attack loss)/d(adj_changes)."""
    n = adj.shape[0]
    changes = torch.zeros(n, n, dtype=torch.float64)
    for i, j in flips:
        # float(): under numpy 2 this is a numpy.float32, which torch will not assign
        changes[i, j] = changes[j, i] = float(1.0 - 2.0 * adj[i, j])
    changes.requires_grad_(True)
    square = changes - torch.diag(torch.diag(changes))
    a = torch.clamp(square + square.T, -1, 1) + torch.tensor(adj.toarray(), dtype=torch.float64)
    mx = a + torch.eye(n, dtype=torch.float64)
    r = mx.sum(1).pow(-0.5)
    a_hat = torch.diag(r) @ mx @ torch.diag(r)
    features = torch.tensor(x.toarray(), dtype=torch.float64)
    w1, w2 = w1.double().requires_grad_(), w2.double().requires_grad_()
    v1, v2 = torch.zeros_like(w1), torch.zeros_like(w2)
    labels = torch.as_tensor(y)

    def forward(w1, w2):
        return a_hat @ ((a_hat @ (features @ w1)) @ w2)

    for _ in range(100):
        loss = F.cross_entropy(forward(w1, w2)[train], labels[train])
        g1, g2 = torch.autograd.grad(loss, (w1, w2), create_graph=True)
        v1, v2 = 0.9 * v1 + g1, 0.9 * v2 + g2
        w1, w2 = w1 - 0.1 * v1, w2 - 0.1 * v2
    out = forward(w1, w2)
    loss = (lambda_ * F.cross_entropy(out[train], labels[train])
            + (1 - lambda_) * F.cross_entropy(out[unlabeled], targets[unlabeled]))
    return torch.autograd.grad(loss, changes)[0]


@pytest.mark.parametrize("lambda_", [0.0, 0.5])
def test_meta_gradient_equals_dense_autograd_oracle(graph, lambda_):
    adj, x, y, train, unlabeled, targets = graph
    attack = Metattack(adj, x, y, train, unlabeled, targets, lambda_=lambda_)
    flips = [(0, 1), (int(adj[2].indices[0]), 2)]  # one addition-or-removal, one removal
    for i, j in flips:
        attack._toggle(i, j)
    torch.manual_seed(5)
    w1, w2 = attack._draw_weights()
    torch.manual_seed(5)
    ours = attack.meta_gradient().double()
    oracle = _dense_meta_gradient(adj, x, y, train, unlabeled, targets, flips, w1, w2, lambda_)
    assert oracle.abs().max() > 1e-3
    assert torch.allclose(ours, oracle, atol=2e-5 * float(oracle.abs().max()))
    for i, j in flips:  # already flipped pairs: zero gradient (DeepRobust's clamp bound)
        assert ours[i, j] == 0 and ours[j, i] == 0
    assert torch.equal(ours, ours.T)


@needs_deeprobust
def test_normalization_is_bitwise_deeprobusts(graph):
    adj = graph[0]
    utils = import_deeprobust("graph.utils")
    theirs = utils.normalize_adj_tensor(torch.tensor(adj.toarray()))
    ours = torch.tensor(normalize(adj).matrix.toarray())
    assert torch.equal(ours, theirs)


@needs_deeprobust
def test_surrogate_consumes_the_random_stream_like_deeprobust(graph):
    adj, x, y, train, _, _ = graph
    gcn = import_deeprobust("graph.defense").GCN
    torch.manual_seed(11)
    model = gcn(nfeat=x.shape[1], nclass=int(y.max()) + 1, nhid=16, dropout=0.5,
                with_relu=False, with_bias=True, device="cpu")
    model.fit(x, adj, y, train)
    after_theirs = torch.get_rng_state()
    torch.manual_seed(11)
    ours = sur.train_gcn(adj, x, y, train, sur.SURROGATE)
    assert torch.equal(torch.get_rng_state(), after_theirs)
    assert (ours.argmax(1) == model.output.argmax(1)).float().mean() >= 0.99


@needs_deeprobust
def test_validation_selected_gcn_matches_deeprobusts(graph):
    adj, x, y, train, unlabeled, _ = graph
    val = unlabeled[:30]
    wrong = y.copy()
    wrong[val] = (y[val] + 1) % (int(y.max()) + 1)  # validation gets worse as training goes on
    gcn = import_deeprobust("graph.defense").GCN
    torch.manual_seed(4)
    model = gcn(nfeat=x.shape[1], nclass=int(y.max()) + 1, nhid=16, device="cpu")
    model.fit(x, adj, wrong, train, idx_val=val)
    torch.manual_seed(4)
    ours = sur.train_gcn(adj, x, wrong, train, sur.EVALUATION, idx_val=val)
    assert (ours.argmax(1) == model.output.argmax(1)).float().mean() >= 0.99
    torch.manual_seed(4)
    final = sur.train_gcn(adj, x, wrong, train, sur.EVALUATION)
    assert (final.argmax(1) != ours.argmax(1)).any()  # an early epoch was selected


@needs_deeprobust
def test_seeded_pipeline_reproduces_deeprobusts_example(graph):
    adj, x, y, train, unlabeled, _ = graph
    ref, their_targets = deeprobust_ref.run_example(adj, x, y, train, unlabeled, 5, seed=15)
    np.random.seed(15)
    torch.manual_seed(15)
    targets = sur.self_training_labels(sur.train_gcn(adj, x, y, train, sur.SURROGATE), y, train)
    assert torch.equal(targets, their_targets)
    attack = Metattack(adj, x, y, train, unlabeled, targets)
    attack.attack(5, progress=False)
    assert attack.flips == ref.flips


def test_checkpoint_resume_gives_the_uninterrupted_attack(graph, tmp_path):
    adj, x, y, train, unlabeled, targets = graph
    torch.manual_seed(0)
    whole = Metattack(adj, x, y, train, unlabeled, targets)
    whole.attack(6, progress=False)
    ckpt = tmp_path / "ckpt.npz"
    torch.manual_seed(0)
    Metattack(adj, x, y, train, unlabeled, targets).attack(3, progress=False, checkpoint=ckpt)
    torch.manual_seed(123)  # whatever the state now, the checkpoint restores it
    resumed = Metattack(adj, x, y, train, unlabeled, targets)
    resumed.attack(6, progress=False, checkpoint=ckpt, checkpoint_every=2)
    assert resumed.flips == whole.flips
    assert not list(tmp_path.glob("*.part*"))
    other = Metattack(adj, x, y, train, unlabeled, targets, train_iters=50)
    with pytest.raises(ValueError, match="different attack"):
        other.load_checkpoint(ckpt)


def test_memory_buffer_is_reused(graph):
    adj, x, y, train, unlabeled, targets = graph
    attack = Metattack(adj, x, y, train, unlabeled, targets)
    buffer = attack._scores.data_ptr()
    attack.attack(3, progress=False)
    assert attack.scores().data_ptr() == buffer


def test_first_argmax_is_torch_argmax_with_ties():
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        m = torch.randint(0, 4, (13, 9), generator=gen).float()  # many ties
        i, j = first_argmax(m)
        assert i * 9 + j == int(torch.argmax(m))


def test_torch_engine_makes_the_default_engines_flips(graph):
    """The device path (every product in torch, as on a GPU) run on the CPU: the same flips as
    the default scipy engine from the same random state, consuming the same random stream."""
    adj, x, y, train, unlabeled, targets = graph
    torch.manual_seed(3)
    state = torch.get_rng_state()
    default = Metattack(adj, x, y, train, unlabeled, targets)
    default.attack(N_FLIPS, progress=False)
    after = torch.get_rng_state()
    torch.set_rng_state(state)
    on_device = Metattack(adj, x, y, train, unlabeled, targets, device="cpu", engine="torch")
    attacked = on_device.attack(N_FLIPS, progress=False)
    assert (default.engine, on_device.engine) == ("scipy", "torch")
    assert on_device.flips == default.flips
    assert torch.equal(torch.get_rng_state(), after)
    assert abs(attacked - default.modified_adj()).sum() == 0


@pytest.mark.parametrize("lambda_", [0.0, 0.5])
def test_torch_engine_meta_gradient_equals_the_default(graph, lambda_):
    adj, x, y, train, unlabeled, targets = graph
    grads = []
    for engine in ("scipy", "torch"):
        attack = Metattack(adj, x, y, train, unlabeled, targets, lambda_=lambda_, engine=engine)
        for i, j in [(0, 1), (int(adj[2].indices[0]), 2)]:
            attack._toggle(i, j)
        torch.manual_seed(5)
        grads.append(attack.meta_gradient().clone())
    default, torch_engine = grads
    scale = float(default.abs().max())
    assert scale > 1e-3
    assert torch.allclose(torch_engine, default, rtol=0, atol=1e-5 * scale)
    assert torch.equal(torch_engine, torch_engine.T)


def test_torch_engine_reuses_its_buffer_and_resumes_from_a_checkpoint(graph, tmp_path):
    adj, x, y, train, unlabeled, targets = graph
    torch.manual_seed(0)
    whole = Metattack(adj, x, y, train, unlabeled, targets, engine="torch")
    buffer = whole._scores.data_ptr()
    whole.attack(4, progress=False)
    assert whole._scores.data_ptr() == buffer
    ckpt = tmp_path / "ckpt.npz"
    torch.manual_seed(0)
    Metattack(adj, x, y, train, unlabeled, targets, engine="torch").attack(
        2, progress=False, checkpoint=ckpt)
    resumed = Metattack(adj, x, y, train, unlabeled, targets, engine="torch")
    resumed.attack(4, progress=False, checkpoint=ckpt)
    assert resumed.flips == whole.flips


def test_engine_and_device_are_checked(graph):
    adj, x, y, train, unlabeled, targets = graph
    assert Metattack(adj, x, y, train, unlabeled, targets, device="cpu").engine == "scipy"
    with pytest.raises(ValueError, match="engine must be one of"):
        Metattack(adj, x, y, train, unlabeled, targets, engine="numpy")
    with pytest.raises(ValueError, match="CPU only"):
        Metattack(adj, x, y, train, unlabeled, targets, device="cuda", engine="scipy")


def test_first_argmax_takes_the_first_of_tied_maxima_and_rejects_nan():
    m = torch.zeros(4, 5)
    m[3, 0] = m[1, 4] = m[2, 3] = 1.0
    assert first_argmax(m) == (1, 4)
    m[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        first_argmax(m)


def test_normalized_adjacency_on_a_device_has_the_same_entries(graph):
    norm = normalize(graph[0])
    dev = norm.to("cpu")
    assert dev.matrix.layout == torch.sparse_csr
    assert torch.equal(dev.matrix.to_dense(), torch.from_numpy(norm.matrix.toarray()))
    assert torch.equal(dev.d, norm.d) and torch.equal(dev.s, norm.s)
    assert dev.row.tolist() == norm.row.tolist() and dev.col.tolist() == norm.col.tolist()
    unsorted = sp.csr_matrix((np.array([1.0, 2.0, 3.0], np.float32), np.array([2, 0, 1]),
                              np.array([0, 2, 3])), shape=(2, 3))
    assert not unsorted.has_sorted_indices
    assert to_torch(unsorted).col_indices().tolist() == [2, 0, 1]  # default: scipy's order
    moved = to_torch(unsorted, device="cpu")  # on a device: sorted within rows, same matrix
    assert moved.col_indices().tolist() == [0, 2, 1]
    assert torch.equal(moved.to_dense(), torch.from_numpy(unsorted.toarray()))


def test_bad_inputs_give_one_clear_error(graph):
    adj, x, y, train, unlabeled, targets = graph
    with pytest.raises(ValueError, match="symmetric"):
        Metattack(sp.triu(adj).tocsr(), x, y, train, unlabeled, targets)
    with pytest.raises(ValueError, match="idx_train"):
        Metattack(adj, x, y, np.array([0, 10_000]), unlabeled, targets)
    with pytest.raises(ValueError, match="lambda_"):
        Metattack(adj, x, y, train, unlabeled, targets, lambda_=2.0)


@needs_deeprobust
def test_compat_shim_is_needed_and_works():
    assert hasattr(import_deeprobust("graph.global_attack"), "Metattack")
    direct = subprocess.run([sys.executable, "-c", "import deeprobust.graph.global_attack"],
                            capture_output=True, text=True)
    assert direct.returncode != 0 and "NameError" in direct.stderr


@needs_deeprobust
def test_compat_placeholder_for_gensim_is_needed_and_works():
    """Without gensim (no wheel for Python 3.14), DeepRobust's defenses import only through
    import_deeprobust; the real ones are there, and DeepWalk says what it needs."""
    no_gensim = "import sys; sys.modules['gensim'] = None; "  # as if not installed
    direct = subprocess.run([sys.executable, "-c", no_gensim + "import deeprobust.graph.defense"],
                            capture_output=True, text=True)
    assert direct.returncode != 0 and "gensim" in direct.stderr
    check = no_gensim + """
from twirls.compat import import_deeprobust
defense = import_deeprobust("graph.defense")
assert defense.GCNJaccard.__module__ == "deeprobust.graph.defense.gcn_preprocess"
assert hasattr(import_deeprobust("graph.global_attack"), "Metattack")
try:
    defense.DeepWalk()
except ImportError as e:
    print(e)
"""
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", check], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert "DeepWalk from deeprobust.graph.defense.node_embedding needs gensim" in done.stdout


def test_attacked_file_round_trip_and_validation(tmp_path, graph):
    adj = graph[0]
    g = AttackedGraph(adj=adj, idx_train=np.arange(3), idx_val=np.arange(3, 5),
                      idx_test=np.arange(5, 9), meta={"rate": 0.2}, flips=np.array([[0, 1]]))
    save_attacked(tmp_path / "a.npz", g)
    back = load_attacked(tmp_path / "a.npz")
    assert abs(back.adj - adj).sum() == 0 and back.meta == {"rate": 0.2}
    assert back.flips.tolist() == [[0, 1]] and back.idx_test.tolist() == [5, 6, 7, 8]
    g.adj = sp.triu(adj).tocsr()
    save_attacked(tmp_path / "b.npz", g)
    with pytest.raises(ValueError, match="symmetric"):
        load_attacked(tmp_path / "b.npz")


def _raw_folder(tmp_path, graph):
    return write_nettack(tmp_path / "raw", *graph[:3])


@pytest.mark.parametrize("implementation", [
    "fast", pytest.param("deeprobust", marks=needs_deeprobust), "prognn"])
def test_stage_writes_a_valid_attacked_graph(tmp_path, graph, implementation):
    raw = _raw_folder(tmp_path, graph)
    out = tmp_path / "attacked" / "nettack-cora.npz"
    rate = 0.2 if implementation == "prognn" else 0.01
    assert stage.main(["--dataset", "nettack-cora", "--raw", str(raw), "--rate", str(rate),
                       "--implementation", implementation, "--out", str(out),
                       "--eval-seeds", "1", "--quiet"]) == 0
    result = load_attacked(out)
    clean = graph[0]
    expected = 1 if implementation == "prognn" else int(0.01 * (clean.nnz // 2))
    assert result.meta["n_flips"] == expected == stage.n_flips_between(clean, result.adj)
    assert result.meta["implementation"] == implementation
    assert len(result.idx_train) + len(result.idx_val) + len(result.idx_test) == clean.shape[0]
    assert 0 < result.meta["attacked"]["gcn_mean"] <= 1
    assert 0 < result.meta["attacked"]["gcn_val_mean"] <= 1
    assert len(result.flips) == (0 if implementation == "prognn" else expected)
    assert not list(out.parent.glob("*.part*")) and not list(out.parent.glob("*checkpoint*"))


def test_stage_runs_the_fast_attack_on_the_device_it_is_given(tmp_path, graph, monkeypatch,
                                                              capsys):
    """``--device auto`` with a (faked) usable GPU hands ``cuda`` to the fast Mettack, which the
    default ``--device cpu`` never does; the other implementations ignore the setting."""
    import twirls.train.device as dev

    seen = []

    class Recording(Metattack):
        def __init__(self, *args, device="cpu", **kwargs):
            seen.append(torch.device(device))
            super().__init__(*args, **kwargs)  # the attack itself on the CPU

    monkeypatch.setattr(stage, "Metattack", Recording)
    raw = _raw_folder(tmp_path, graph)
    common = ["--dataset", "nettack-cora", "--raw", str(raw), "--rate", "0.005",
              "--eval-seeds", "1", "--quiet"]
    assert stage.main([*common, "--out", str(tmp_path / "cpu.npz")]) == 0
    assert " on cpu;" in capsys.readouterr().out
    monkeypatch.setattr(dev, "cuda_status", lambda needs_dgl=False: (True, ""))
    assert stage.main([*common, "--device", "auto", "--out", str(tmp_path / "gpu.npz")]) == 0
    assert " on cuda;" in capsys.readouterr().out
    assert seen == [torch.device("cpu"), torch.device("cuda")]
    assert stage.main([*common, "--device", "cuda", "--implementation", "prognn", "--rate", "0.2",
                       "--out", str(tmp_path / "prognn.npz")]) == 0
    assert len(seen) == 2 and " on cpu;" in capsys.readouterr().out
    assert load_attacked(tmp_path / "cpu.npz").flips.tolist() == \
        load_attacked(tmp_path / "gpu.npz").flips.tolist()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_stage_asked_for_cuda_without_a_gpu_says_so_in_one_line(tmp_path, graph):
    raw = _raw_folder(tmp_path, graph)
    with pytest.raises(SystemExit) as exc:
        stage.main(["--dataset", "nettack-cora", "--raw", str(raw), "--device", "cuda",
                    "--out", str(tmp_path / "o.npz"), "--quiet"])
    message = str(exc.value.code)
    assert message.startswith("error: attack: device 'cuda' was requested but ")
    assert "\n" not in message and not (tmp_path / "o.npz").exists()


def test_stage_rejects_a_missing_raw_folder(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        stage.main(["--dataset", "nettack-cora", "--raw", str(tmp_path / "nope"),
                    "--out", str(tmp_path / "o.npz")])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "nope: no such folder" in err and "fetch" in err
    with pytest.raises(SystemExit, match="cora.npz"):
        stage.main(["--dataset", "nettack-cora", "--raw", str(tmp_path),
                    "--out", str(tmp_path / "o.npz"), "--quiet"])
