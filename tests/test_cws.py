"""Table 12 (Chinese word segmentation): batching, tags, macro F1, protocols, training, stage."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score

from twirls.config.schema import ConfigError
from twirls.config.table12 import check_table12
from twirls.cws.batching import Sentences, batch_order, chain_graph, make_batch
from twirls.cws.experiment import run_table12
from twirls.cws.metrics import macro_f1
from twirls.cws.models import build_tagger, check_models
from twirls.cws.protocols import (
    PAPER,
    STAND_IN,
    choose_protocol,
    load_cws,
    pretrained_matrix,
    stand_in_split,
    validation_mask,
)
from twirls.cws.train import CWSTrainConfig, seeded_run
from twirls.data import pku
from twirls.data.registry import STATUS_FILE, DatasetDamaged, DatasetUnavailable
from twirls.stages import table12 as stage

from fixtures import ALPHABET, random_sentences, write_pku

TINY_MODELS = {
    "MLP": {"model": "mlp", "model_cfg": {"layers": 2, "hidden": 16, "dropout": 0.0}},
    "GCN": {"model": "gcn", "model_cfg": {"layers": 2, "hidden": 16, "dropout": 0.0}},
    "GCN-8": {"model": "gcn", "model_cfg": {"layers": 8, "hidden": 16, "dropout": 0.0}},
    "TWIRLS-base": {"model": "twirls", "model_cfg": {
        "steps": 8, "lam": 1.0, "alpha": 0.5, "mlp_before": 0, "mlp_after": 2, "hidden": 16}},
    "bi-LSTM": {"model": "bilstm", "model_cfg": {"hidden": 8}},
}


def group(**overrides):
    g = {"seeds": 2, "batch_size": 8, "bucket": 2, "lr": 0.01, "weight_decay": 0.0,
         "epochs": {"paper": 1, "stand-in": 1}, "embedding_dim": 8, "freeze_embedding": False,
         "stand_in_fraction": 0.8, "models": TINY_MODELS}
    return {**g, **overrides}


def write_embedding(root: Path, chars: str, dim: int = 100, header: bool = True) -> Path:
    """fastNLP's format: ``<count> <dim>`` then ``<char> <floats>`` lines."""
    rng = np.random.RandomState(0)
    path = root / pku.EMBEDDING_DIR / "cn_char_fastnlp_100d.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"{len(chars)} {dim}"] if header else []
    lines += [c + " " + " ".join(f"{v:.5f}" for v in rng.randn(dim)) for c in chars]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def pku_root(tmp_path) -> Path:
    root = tmp_path / "raw" / "pku"
    write_pku(root / pku.TRAIN_FILE, random_sentences(60, seed=1))
    write_pku(root / pku.TEST_FILE, random_sentences(50, seed=2), newline="\n")
    write_embedding(root, ALPHABET[:-3])  # three characters without a vector
    return root


# ---------------------------------------------------------------- batching
def test_chain_graph_is_block_diagonal_with_chain_edges():
    g = chain_graph([3, 1, 2])
    edges = set(zip(g.src.tolist(), g.dst.tolist(), strict=True))
    assert edges == {(0, 1), (1, 0), (1, 2), (2, 1), (4, 5), (5, 4)}
    assert g.num_nodes() == 6


def test_batch_has_no_edge_between_sentences():
    rng = np.random.RandomState(0)
    lengths = rng.randint(1, 9, size=20)
    sents = Sentences([rng.randint(0, 5, k) for k in lengths], [np.zeros(k, int) for k in lengths])
    index = [7, 3, 12, 0, 19]
    batch = make_batch(sents, index)
    sentence_of = np.repeat(np.arange(len(index)), lengths[index])
    src, dst = batch.ops.src.numpy(), batch.ops.dst.numpy()
    assert (sentence_of[src] == sentence_of[dst]).all()
    assert np.abs(src - dst).max() == 1
    assert len(src) == 2 * int((lengths[index] - 1).sum())  # every neighbour pair, both ways
    assert batch.lengths.tolist() == lengths[index].tolist()
    assert torch.equal(batch.tokens, torch.from_numpy(np.concatenate([sents.tokens[i]
                                                                      for i in index])))


def test_batch_order_covers_every_sentence_once_and_buckets_by_length():
    lengths = np.random.RandomState(0).randint(1, 300, size=100)
    gen = torch.Generator().manual_seed(3)
    batches = batch_order(lengths, 8, gen, bucket=4)
    assert sorted(np.concatenate(batches).tolist()) == list(range(100))
    again = batch_order(lengths, 8, torch.Generator().manual_seed(3), bucket=4)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again, strict=True))
    spread = np.mean([np.ptp(lengths[b]) for b in batches])
    plain = batch_order(lengths, 8, torch.Generator().manual_seed(3), bucket=0)
    assert spread < np.mean([np.ptp(lengths[b]) for b in plain]) / 2
    assert [b.tolist() for b in batch_order(lengths, 40)] == [
        list(range(40)), list(range(40, 80)), list(range(80, 100))]


# ---------------------------------------------------------------- tags and metric
def test_bmes_tags_of_segmented_text():
    text, tags, lengths = pku.encode([["我们", "是", "中国人"], ["好"]])
    assert text == "我们是中国人好"
    assert "".join(pku.TAGS[t] for t in tags) == "BESBMES"
    assert lengths.tolist() == [6, 1]
    vocab = {"我": 1, "是": 2}
    tokens, tag_arrays, texts = pku.sentence_arrays([["我们", "是"]], vocab)
    assert tokens[0].tolist() == [1, 0, 2] and tag_arrays[0].tolist() == [pku.B, pku.E, pku.S]


def test_macro_f1_by_hand_and_against_sklearn():
    gold = np.array([0, 0, 1, 2, 3, 3, 3])
    pred = np.array([0, 1, 1, 2, 3, 0, 3])
    # per tag F1 = 2TP / (2TP + FP + FN): B 2/4, M 2/3, E 2/2, S 4/5
    assert macro_f1(pred, gold) == pytest.approx((1 / 2 + 2 / 3 + 1 + 4 / 5) / 4)
    rng = np.random.RandomState(0)
    for _ in range(5):
        g, p = rng.randint(0, 4, 200), rng.randint(0, 4, 200)
        assert macro_f1(torch.from_numpy(p), torch.from_numpy(g)) == pytest.approx(
            f1_score(g, p, labels=range(4), average="macro", zero_division=0))
    p = np.zeros(10, int)  # tags never gold nor predicted count as 0, as sklearn
    assert macro_f1(p, p) == pytest.approx(
        f1_score(p, p, labels=range(4), average="macro", zero_division=0))


# ---------------------------------------------------------------- protocols
def test_paper_protocol_with_training_file_and_embedding(pku_root):
    protocol = choose_protocol(pku_root)
    assert protocol.name == PAPER and protocol.embedding.name == "cn_char_fastnlp_100d.txt"
    data = load_cws(pku_root, protocol, 0.8)
    assert data.embedding.shape == (data.vocab_size, 100)
    assert len(data.train) + len(data.val) == 60 and len(data.test) == 50
    assert len(data.val) == 6  # the loader's fixed 10%


@pytest.mark.parametrize("remove", ["training", "embedding"])
def test_stand_in_without_training_file_or_embedding(pku_root, remove):
    if remove == "training":
        (pku_root / pku.TRAIN_FILE).unlink()
    else:
        (pku_root / pku.EMBEDDING_DIR / "cn_char_fastnlp_100d.txt").unlink()
    (pku_root / STATUS_FILE).write_text(json.dumps({"status": "missing", "reason": "x"}))
    protocol = choose_protocol(pku_root)
    assert protocol.name == STAND_IN and len(protocol.missing) == 1
    assert (pku.TRAIN_FILE if remove == "training" else pku.EMBEDDING_DIR) in protocol.missing[0]


def test_damaged_or_absent_files(pku_root):
    (pku_root / STATUS_FILE).write_text(json.dumps({"status": "damaged", "reason": "bad"}))
    with pytest.raises(DatasetDamaged, match="bad"):
        choose_protocol(pku_root)
    (pku_root / STATUS_FILE).unlink()
    (pku_root / pku.TEST_FILE).unlink()
    with pytest.raises(DatasetUnavailable):
        choose_protocol(pku_root)


def test_stand_in_split_is_fixed_and_disjoint(pku_root):
    train, test = stand_in_split(50, 0.8)
    assert train.tolist() == list(range(40)) and test.tolist() == list(range(40, 50))
    (pku_root / pku.TRAIN_FILE).unlink()
    protocol = choose_protocol(pku_root)
    a, b = load_cws(pku_root, protocol, 0.8), load_cws(pku_root, protocol, 0.8)
    assert a.embedding is None and a.facts["stand_in_sentences"] == [40, 10]
    for part in ("train", "val", "test"):
        x, y = getattr(a, part), getattr(b, part)
        assert all(np.array_equal(s, t) for s, t in zip(x.tokens, y.tokens, strict=True))
    gold = pku.read_sentences(pku_root / pku.TEST_FILE)
    vocab = pku.build_vocab(pku.encode(gold[:40])[0])  # the training part's characters
    tokens, _, _ = pku.sentence_arrays(gold, vocab)
    is_val = validation_mask(40)
    expected = {"train": np.flatnonzero(~is_val), "val": np.flatnonzero(is_val),
                "test": np.arange(40, 50)}
    for part, index in expected.items():
        got = getattr(a, part).tokens
        assert len(got) == len(index)
        assert all(np.array_equal(g, tokens[i]) for g, i in zip(got, index, strict=True))
    assert is_val.sum() == 4 and not set(expected["train"]) & set(expected["val"])
    with pytest.raises(ValueError):
        stand_in_split(3, 0.1)


def test_embedding_reader_and_matrix(tmp_path):
    path = write_embedding(tmp_path, "ab", dim=3, header=True)
    chars, vectors = pku.read_char_embedding(path)
    assert chars == ["a", "b"] and vectors.shape == (2, 3)
    no_header = write_embedding(tmp_path / "x", "ab", dim=3, header=False)
    assert np.array_equal(pku.read_char_embedding(no_header)[1], vectors)
    matrix, found = pretrained_matrix({"b": 1, "z": 2}, path)
    assert found == 1 and np.array_equal(matrix[1], vectors[1]) and matrix.shape == (3, 3)


# ---------------------------------------------------------------- training
def lexicon_sentences(num: int, seed: int) -> Sentences:
    """Sentences over a fixed lexicon, so the tags follow from the characters."""
    lexicon = ["的", "一是", "在不了", "有和", "人", "这中大", "为上", "个"]
    rng = np.random.RandomState(seed)
    sentences = [[lexicon[i] for i in rng.randint(0, len(lexicon), rng.randint(2, 8))]
                 for _ in range(num)]
    vocab = pku.build_vocab("".join(lexicon))
    tokens, tags, _ = pku.sentence_arrays(sentences, vocab)
    return Sentences(tokens, tags), len(vocab) + 1


@pytest.mark.parametrize("label", ["TWIRLS-base", "bi-LSTM"])
def test_tiny_training_learns_and_is_deterministic(label):
    train, vocab_size = lexicon_sentences(40, 0)
    test, _ = lexicon_sentences(20, 1)
    entry = TINY_MODELS[label]
    cfg = CWSTrainConfig(epochs=15, lr=0.03, batch_size=8, bucket=2)

    def build():
        return build_tagger(entry["model"], entry["model_cfg"], vocab_size, 8)

    run = seeded_run(build, train, test, test, cfg, seed=0)
    losses = [h["loss"] for h in run.history]
    assert losses[-1] < 0.5 * losses[0]
    assert run.test > 0.8
    again = seeded_run(build, train, test, test, cfg, seed=0)
    assert again.test == run.test and [h["loss"] for h in again.history] == losses


def test_fine_tuning_leaves_the_pretrained_vectors_as_loaded():
    train, vocab_size = lexicon_sentences(10, 0)
    vectors = np.random.RandomState(0).randn(vocab_size, 8).astype(np.float32)
    loaded = vectors.copy()
    entry = TINY_MODELS["MLP"]
    cfg = CWSTrainConfig(epochs=2, lr=0.03, batch_size=8, bucket=0)

    def build():
        return build_tagger(entry["model"], entry["model_cfg"], vocab_size, 8, vectors)

    first = seeded_run(build, train, train, train, cfg, seed=0)
    assert np.array_equal(vectors, loaded)  # each run fine-tunes its own copy
    again = seeded_run(build, train, train, train, cfg, seed=0)
    assert again.history == first.history


def test_twirls_embedding_gets_gradient_through_propagation():
    train, vocab_size = lexicon_sentences(4, 0)
    model = build_tagger("twirls", TINY_MODELS["TWIRLS-base"]["model_cfg"], vocab_size, 8)
    model(make_batch(train, [0, 1, 2, 3])).sum().backward()
    assert model.embedding.weight.grad is not None
    assert model.embedding.weight.grad.abs().sum() > 0


# ---------------------------------------------------------------- config, cells, stage
def test_check_table12():
    check_table12("table12", group())
    check_models("table12.models", group()["models"])
    with pytest.raises(ConfigError, match="model"):
        check_models("table12.models", {"X": {"model": "gcm"}})
    with pytest.raises(ConfigError, match="stand_in_fraction"):
        check_table12("table12", group(stand_in_fraction=1.0))
    with pytest.raises(ConfigError, match="epochs"):
        check_table12("table12", group(epochs={"paper": 1}))
    with pytest.raises(ConfigError, match="hiden"):
        check_models("table12.models", {"X": {"model": "bilstm", "model_cfg": {"hiden": 3}}})
    with pytest.raises(ConfigError, match="modle"):
        check_table12("table12", group(models={"X": {"modle": "gcn"}}))


def test_stand_in_cells(pku_root):
    (pku_root / pku.TRAIN_FILE).unlink()
    cells, metrics, rows = run_table12(group(models={"TWIRLS-base": TINY_MODELS["TWIRLS-base"]}),
                                       pku_root, progress=False)
    (cell,) = cells
    assert [r["seed"] for r in rows] == [0, 1] and {r["protocol"] for r in rows} == {STAND_IN}
    assert [r["value"] for r in rows] == cell.extra["test_per_run"]
    assert (cell.table, cell.dataset, cell.model, cell.metric) == (
        "table12", "pku", "TWIRLS-base", "macro_f1")
    assert cell.status == "stand-in" and cell.runs == 2 and 0 <= cell.mean <= 100
    assert "STAND-IN" in cell.note and "test gold" in cell.note and "learned" in cell.note
    assert metrics["protocol"] == STAND_IN


def test_runs_in_worker_processes_equal_one_process(pku_root):
    models = {k: TINY_MODELS[k] for k in ("MLP", "TWIRLS-base", "bi-LSTM")}
    alone = run_table12(group(models=models), pku_root, progress=False)
    pooled = run_table12(group(models=models), pku_root, progress=False, jobs=2)
    assert [c.model for c in pooled[0]] == list(models)
    assert [c.extra for c in pooled[0]] == [c.extra for c in alone[0]]

    def scores(rows):
        return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]

    assert scores(pooled[2]) == scores(alone[2]) and len(alone[2]) == 6


def test_stage_writes_cells_under_each_protocol(pku_root, tmp_path, monkeypatch):
    params = {"device": "cpu", "jobs": 2,
              "table12": group(seeds=1, models={"MLP": TINY_MODELS["MLP"]})}
    monkeypatch.setattr(stage, "open_stage", lambda name: params)
    raw, out = pku_root.parent, tmp_path / "out"
    assert stage.main(["--raw", str(raw), "--out", str(out)]) == 0
    first = (out / "results" / "table12.json").read_bytes()
    (cell,) = json.loads(first)
    assert cell["status"] == "" and cell["extra"]["protocol"] == PAPER
    metrics = json.loads((out / "metrics" / "table12.json").read_text())
    assert metrics["status"] == "ok" and len(metrics["models"]["MLP"]["seconds_per_run"]) == 1
    assert stage.main(["--raw", str(raw), "--out", str(out)]) == 0  # timings go to metrics:
    assert (out / "results" / "table12.json").read_bytes() == first  # the cells keep their bytes
    (pku_root / pku.TRAIN_FILE).unlink()
    assert stage.main(["--raw", str(raw), "--out", str(out)]) == 0
    (cell,) = json.loads((out / "results" / "table12.json").read_text())
    assert cell["status"] == "stand-in"
    (pku_root / pku.TEST_FILE).unlink()
    assert stage.main(["--raw", str(raw), "--out", str(out)]) == 0
    (cell,) = json.loads((out / "results" / "table12.json").read_text())
    assert cell["status"] == "no-data" and cell["mean"] is None


def test_bilstm_equals_torch_bidirectional_lstm_on_packed_sentences():
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

    from twirls.cws.models import BiLSTMConfig, BiLSTMTagger

    torch.manual_seed(0)
    tagger = BiLSTMTagger(5, 4, BiLSTMConfig(hidden=3))
    ref = torch.nn.LSTM(5, 3, batch_first=True, bidirectional=True)
    with torch.no_grad():
        for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            getattr(ref, name).copy_(getattr(tagger.forward_lstm, name))
            getattr(ref, name + "_reverse").copy_(getattr(tagger.backward_lstm, name))
    lengths = torch.tensor([4, 1, 6])
    x = torch.randn(int(lengths.sum()), 5)
    padded = pad_sequence(list(torch.split(x, lengths.tolist())), batch_first=True)
    out, _ = ref(pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=False))
    out, _ = pad_packed_sequence(out, batch_first=True)
    valid = torch.arange(6)[None, :] < lengths[:, None]
    expected = tagger.linear(out[valid])
    assert torch.allclose(tagger(x, lengths), expected, atol=1e-6)
