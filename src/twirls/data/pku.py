"""PKU Chinese word segmentation (SIGHAN 2005 bakeoff, Emerson 2005) as a graph of chains.

The paper's CWS experiment (appendix "Chinese Word Segmentation") "views each Chinese character
as a node, connecting an edge between neighbouring characters", and classifies every character
as the Beginning, Middle or End of a word, or a Single-character word (B/M/E/S).

Raw files in ``root`` (UTF-8, one sentence per line, words separated by spaces, CRLF or LF):
``pku_training.utf8`` and ``pku_test_gold.utf8``. Blank lines are skipped.

Nodes are the characters of the training sentences (file order) followed by those of the test
sentences; each sentence is a path graph (no edges between sentences). ``tokens[i]`` is the id
of character ``i`` in a vocabulary of the characters of ``pku_training.utf8`` in order of first
appearance, ids ``1..V``; ``0`` is reserved for characters not in it (``meta["vocab"][0]`` is
``"<unk>"``, so ``meta["vocab_size"] = V + 1`` rows of an embedding table). Features are None.

Split ``"standard"``: test = the gold sentences; validation = a deterministic 10% of the training
sentences (``RandomState(0)`` permutation, ``VAL_FRACTION``); train = the rest. Splits list node
(character) ids. ``meta["sentence_ptr"]`` holds the first node of each sentence (plus the end),
so sentence ``s`` is nodes ``ptr[s]:ptr[s+1]``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from twirls.data.files import raw_file
from twirls.data.graph import GraphData, Split, undirected_graph

NAME = "pku"
TRAIN_FILE = "pku_training.utf8"
TEST_FILE = "pku_test_gold.utf8"
TAGS = ("B", "M", "E", "S")
B, M, E, S = range(4)
VAL_FRACTION = 0.1
VAL_SEED = 0
UNKNOWN = "<unk>"


def _path(root: Path, filename: str) -> Path:
    return raw_file(
        root, filename,
        f"SIGHAN 2005 icwb2-data: training/{TRAIN_FILE}, gold/{TEST_FILE}")


def read_sentences(path: Path) -> list[list[str]]:
    """Non-empty lines of a segmented corpus, each split into its words."""
    with open(path, encoding="utf-8-sig") as f:  # universal newlines: CRLF and LF alike
        sentences = [line.split() for line in f]
    return [words for words in sentences if words]


def bmes(word_lengths: np.ndarray) -> np.ndarray:
    """B/M/E/S tag ids of the characters of consecutive words with the given lengths."""
    lengths = np.asarray(word_lengths, dtype=np.int64)
    tags = np.full(int(lengths.sum()), M, dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    tags[starts] = B
    tags[starts + lengths - 1] = E
    tags[starts[lengths == 1]] = S
    return tags


def encode(sentences: list[list[str]]) -> tuple[str, np.ndarray, np.ndarray]:
    """``(characters, tags, sentence_lengths)`` of a list of segmented sentences."""
    words = [w for sentence in sentences for w in sentence]
    word_lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    words_per_sentence = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
    word_ptr = np.concatenate([[0], np.cumsum(words_per_sentence)])
    char_ptr = np.concatenate([[0], np.cumsum(word_lengths)])
    sentence_lengths = np.diff(char_ptr[word_ptr])
    return "".join(words), bmes(word_lengths), sentence_lengths


def chain_edges(sentence_lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges ``(i, i + 1)`` between neighbouring characters of the same sentence."""
    total = int(sentence_lengths.sum())
    last = np.cumsum(sentence_lengths) - 1
    src = np.setdiff1d(np.arange(total - 1), last, assume_unique=True)
    return src, src + 1


def build_vocab(characters: str) -> dict[str, int]:
    """Characters in order of first appearance, numbered from 1 (0 = unknown)."""
    return {c: i + 1 for i, c in enumerate(dict.fromkeys(characters))}


def load(root: Path, name: str = NAME) -> GraphData:
    """Load PKU from ``root/pku_training.utf8`` and ``root/pku_test_gold.utf8``, split
    ``"standard"``."""
    if name != NAME:
        raise ValueError(f"pku.load: unknown dataset {name!r}; expected {NAME!r}.")
    root = Path(root)
    train_sentences = read_sentences(_path(root, TRAIN_FILE))
    test_sentences = read_sentences(_path(root, TEST_FILE))
    train_chars, train_tags, train_lengths = encode(train_sentences)
    test_chars, test_tags, test_lengths = encode(test_sentences)
    vocab = build_vocab(train_chars)
    tokens = np.fromiter((vocab.get(c, 0) for c in train_chars + test_chars), dtype=np.int64,
                         count=len(train_chars) + len(test_chars))

    lengths = np.concatenate([train_lengths, test_lengths])
    ptr = np.concatenate([[0], np.cumsum(lengths)])
    num_train_sentences = len(train_lengths)
    num_val = int(round(VAL_FRACTION * num_train_sentences))
    is_val = np.zeros(num_train_sentences, dtype=bool)
    is_val[np.random.RandomState(VAL_SEED).permutation(num_train_sentences)[:num_val]] = True
    sentence_of_node = np.repeat(np.arange(len(lengths)), lengths)
    train_nodes = np.arange(len(train_chars))
    node_is_val = is_val[sentence_of_node[: len(train_chars)]]
    split = Split(
        train=torch.from_numpy(train_nodes[~node_is_val]),
        val=torch.from_numpy(train_nodes[node_is_val]),
        test=torch.arange(len(train_chars), len(train_chars) + len(test_chars)),
    )
    src, dst = chain_edges(lengths)
    return GraphData(
        name=NAME,
        graph=undirected_graph(torch.from_numpy(src), torch.from_numpy(dst), int(ptr[-1])),
        features=None,
        labels=torch.from_numpy(np.concatenate([train_tags, test_tags])),
        splits={"standard": split},
        tokens=torch.from_numpy(tokens),
        meta={
            "source": "SIGHAN 2005 PKU (icwb2-data), training + test gold",
            "tags": TAGS,
            "vocab": [UNKNOWN, *vocab],
            "vocab_size": len(vocab) + 1,
            "num_sentences": {"train": int(num_train_sentences - num_val), "val": num_val,
                              "test": len(test_lengths)},
            "sentence_ptr": torch.from_numpy(ptr),
            "val_sentences": np.flatnonzero(is_val).tolist(),
            "unknown_test_characters": int((tokens[len(train_chars):] == 0).sum()),
        },
    )


# ---------------------------------------------------------------- Table 12 (CWS) helpers
#: fastNLP's ``cn-char-fastnlp-100d`` static character embedding (the paper's Table 12), as the
#: fetch unpacks it: ``data/raw/pku/cn_char_fastnlp_100d/`` holding one ``*.txt`` file in
#: word2vec text format (optional ``<count> <dim>`` header line, then ``<char> <v1> ... <v100>``).
#: A copy obtained by hand goes there too (fastNLP itself caches it in
#: ``~/.fastNLP/embedding/cn_char_fastnlp_100d/``: copy that folder).
EMBEDDING_DIR = "cn_char_fastnlp_100d"
EMBEDDING_DIM = 100


def embedding_file(root: Path) -> Path | None:
    """The embedding text file under ``root/EMBEDDING_DIR`` (searched recursively), or None if
    there is none. More than one ``*.txt`` there is a ``ValueError`` (ambiguous)."""
    folder = Path(root) / EMBEDDING_DIR
    if not folder.is_dir():
        return None
    found = sorted(p for p in folder.rglob("*.txt") if p.is_file())
    if len(found) > 1:
        raise ValueError(f"{folder} holds {len(found)} .txt files ({', '.join(map(str, found))}); "
                         "expected exactly one (the cn-char-fastnlp-100d vectors)")
    return found[0] if found else None


def read_char_embedding(path: Path) -> tuple[list[str], np.ndarray]:
    """``(characters, vectors (V, d) float32)`` of a word2vec-format text file (fastNLP's
    static embeddings): an optional ``<count> <dim>`` header, then one ``<token> <floats>``
    line per token. A line whose width differs from the first one's is a ``ValueError``."""
    tokens: list[str] = []
    rows: list[np.ndarray] = []
    with open(path, encoding="utf-8") as f:
        for k, line in enumerate(f):
            parts = line.rstrip("\n").rstrip().split(" ")
            if k == 0 and len(parts) == 2 and all(p.isdigit() for p in parts):
                continue  # header "<count> <dim>"
            if len(parts) < 2:
                continue
            vector = np.asarray(parts[1:], dtype=np.float32)
            if rows and vector.shape != rows[0].shape:
                raise ValueError(f"{path}, line {k + 1}: {vector.size} numbers, expected "
                                 f"{rows[0].size}")
            tokens.append(parts[0])
            rows.append(vector)
    if not rows:
        raise ValueError(f"{path} holds no vectors")
    return tokens, np.stack(rows)


def sentence_arrays(sentences: list[list[str]], vocab: dict[str, int]
                    ) -> tuple[list[np.ndarray], list[np.ndarray], list[str]]:
    """Per sentence: token ids (``vocab``, 0 = unknown), B/M/E/S tag ids and the text."""
    tokens, tags, texts = [], [], []
    for words in sentences:
        text, sentence_tags, _ = encode([words])
        tokens.append(np.fromiter((vocab.get(c, 0) for c in text), dtype=np.int64,
                                  count=len(text)))
        tags.append(sentence_tags)
        texts.append(text)
    return tokens, tags, texts
