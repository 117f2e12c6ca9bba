"""Which data Table 12 runs on: the paper's protocol, or the labelled stand-in.

* ``paper``: train on ``pku_training.utf8`` (minus the loader's fixed 10% validation sentences,
  :data:`twirls.data.pku.VAL_FRACTION`), test on all of ``pku_test_gold.utf8``; characters are
  embedded by fastNLP's ``cn-char-fastnlp-100d`` vectors (``data/raw/pku/cn_char_fastnlp_100d/``,
  see :data:`twirls.data.pku.EMBEDDING_DIR`). Chosen when both the training file and the
  embedding are present.
* ``stand-in``: where either is missing (the PKU training file is not in the offline mirror, and
  fastNLP's server is unreachable here), the experiment still runs on real Chinese text: the
  first ``stand_in_fraction`` of the sentences of ``pku_test_gold.utf8`` (file order) are the
  training part (minus the same fixed 10% for validation), the rest is the test part, and the
  100-d character embeddings are learned from scratch. Its cells are ``status="stand-in"`` and
  their note says exactly what differs from the paper.

A ``FETCH.json`` that says the files are damaged (or the fetch failed) raises
:class:`twirls.data.registry.DatasetDamaged`; a missing test gold raises
:class:`twirls.data.registry.DatasetUnavailable` (the stage writes ``no-data`` cells).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from twirls.cws.batching import Sentences
from twirls.data import pku
from twirls.data.registry import STATUS_FILE, DatasetDamaged, DatasetUnavailable

PAPER, STAND_IN = "paper", "stand-in"


@dataclass(frozen=True)
class Protocol:
    """``name`` (``"paper"`` | ``"stand-in"``) and, for the stand-in, what is missing."""

    name: str
    missing: tuple[str, ...] = ()
    embedding: Path | None = None


@dataclass
class CWSData:
    """Train / validation / test sentences, the vocabulary size (row 0 = unknown characters)
    and the pretrained embedding matrix (``None``: learned)."""

    protocol: Protocol
    train: Sentences
    val: Sentences
    test: Sentences
    vocab_size: int
    embedding: np.ndarray | None
    facts: dict = field(default_factory=dict)


def choose_protocol(root: Path) -> Protocol:
    """The protocol the files in ``root`` (``data/raw/pku``) allow (see the module doc)."""
    root = Path(root)
    status_path = root / STATUS_FILE
    if status_path.exists():
        status = json.loads(status_path.read_text())
        if status.get("status") not in ("ok", "missing"):
            raise DatasetDamaged(f"pku: fetch status {status.get('status')!r}: "
                                 f"{status.get('reason', '')}; run `dvc repro fetch@pku`")
    if not (root / pku.TEST_FILE).is_file():
        raise DatasetUnavailable(f"pku: {root / pku.TEST_FILE} not found; run "
                                 "`dvc repro fetch@pku`")
    embedding = pku.embedding_file(root)
    missing = []
    if not (root / pku.TRAIN_FILE).is_file():
        missing.append(str(root / pku.TRAIN_FILE))
    if embedding is None:
        missing.append(f"{root / pku.EMBEDDING_DIR}/*.txt (fastNLP cn-char-fastnlp-100d)")
    if missing:
        return Protocol(STAND_IN, tuple(missing))
    return Protocol(PAPER, embedding=embedding)


def validation_mask(num_sentences: int) -> np.ndarray:
    """The loader's fixed validation sentences: ``VAL_FRACTION`` of them by a
    ``RandomState(VAL_SEED)`` permutation (as :func:`twirls.data.pku.load`)."""
    num_val = int(round(pku.VAL_FRACTION * num_sentences))
    mask = np.zeros(num_sentences, dtype=bool)
    mask[np.random.RandomState(pku.VAL_SEED).permutation(num_sentences)[:num_val]] = True
    return mask


def stand_in_split(num_sentences: int, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """``(train_part, test_part)`` sentence indices: the first ``round(fraction * n)`` sentences
    in file order, and the rest. Fixed: no randomness."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"stand_in_fraction must be in (0, 1), got {fraction}")
    cut = int(round(fraction * num_sentences))
    if not 0 < cut < num_sentences:
        raise ValueError(f"stand-in split of {num_sentences} sentences at {fraction} leaves a "
                         "part empty")
    return np.arange(cut), np.arange(cut, num_sentences)


def _train_val(sentences: Sentences) -> tuple[Sentences, Sentences]:
    is_val = validation_mask(len(sentences))
    return sentences.subset(np.flatnonzero(~is_val)), sentences.subset(np.flatnonzero(is_val))


def pretrained_matrix(vocab: dict[str, int], path: Path, seed: int = 0) -> tuple[np.ndarray, int]:
    """``(vocab_size, d)`` rows of the embedding file for ``vocab`` (ids ``1..V``; row 0 and
    characters the file lacks: ``N(0, σ²)`` with σ the file's std, fixed seed); also the count
    of vocabulary characters found in the file."""
    chars, vectors = pku.read_char_embedding(path)
    index = {c: i for i, c in enumerate(chars)}
    rng = np.random.RandomState(seed)
    matrix = rng.normal(0.0, float(vectors.std()), (len(vocab) + 1, vectors.shape[1]))
    matrix = matrix.astype(np.float32)
    found = 0
    for c, i in vocab.items():
        if c in index:
            matrix[i] = vectors[index[c]]
            found += 1
    return matrix, found


def load_cws(root: Path, protocol: Protocol, stand_in_fraction: float) -> CWSData:
    """Read the sentences (and the embedding) of ``protocol`` from ``root``."""
    root = Path(root)
    gold = pku.read_sentences(root / pku.TEST_FILE)
    if protocol.name == PAPER:
        training = pku.read_sentences(root / pku.TRAIN_FILE)
        train_text, _, _ = pku.encode(training)
        vocab = pku.build_vocab(train_text)
        train_all = Sentences(*pku.sentence_arrays(training, vocab)[:2])
        test = Sentences(*pku.sentence_arrays(gold, vocab)[:2])
        train, val = _train_val(train_all)
        matrix, found = pretrained_matrix(vocab, protocol.embedding)
        facts = {"embedding_file": str(protocol.embedding), "embedding_hits": found}
    else:
        train_idx, test_idx = stand_in_split(len(gold), stand_in_fraction)
        train_text, _, _ = pku.encode([gold[i] for i in train_idx])
        vocab = pku.build_vocab(train_text)
        everything = Sentences(*pku.sentence_arrays(gold, vocab)[:2])
        train, val = _train_val(everything.subset(train_idx))
        test = everything.subset(test_idx)
        matrix, facts = None, {"stand_in_sentences": [int(train_idx.size), int(test_idx.size)]}
    unknown = sum(int((t == 0).sum()) for t in test.tokens)
    facts.update({"vocab_size": len(vocab) + 1,
                  "sentences": {"train": len(train), "val": len(val), "test": len(test)},
                  "characters": {"train": train.num_characters, "val": val.num_characters,
                                 "test": test.num_characters},
                  "unknown_test_characters": unknown})
    return CWSData(protocol, train, val, test, len(vocab) + 1, matrix, facts)
