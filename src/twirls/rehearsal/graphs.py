"""Random ground truth for the rehearsal files: labelled groups, graphs with an exact edge count.

Labels need only *some* signal (the rehearsal measures cost, not accuracy): edges fall inside a
node's group with probability ``within``, and features are a group centroid plus noise.
"""

from __future__ import annotations

import numpy as np


def group_weights(groups: int, skew: float = 1.0) -> np.ndarray:
    """Class proportions ``∝ 1 / (k + 3) ** skew`` (imbalanced like real label sets)."""
    w = 1.0 / (np.arange(groups) + 3.0) ** skew
    return w / w.sum()


def scaled(value: int, scale: float, minimum: int = 1) -> int:
    """``round(value * scale)``, at least ``minimum``."""
    return max(minimum, int(round(value * scale)))


def undirected_edges(rng: np.random.RandomState, n: int, m: int, groups: np.ndarray,
                     within: float = 0.7) -> np.ndarray:
    """Exactly ``m`` distinct undirected pairs ``(lo, hi)``, ``lo < hi``, as an ``(m, 2)``
    array in random order; an edge joins two nodes of the same group with probability
    ``within`` (else both ends are uniform).

    Raises ``ValueError`` if ``m`` exceeds the ``n (n - 1) / 2`` possible pairs.
    """
    if m > n * (n - 1) // 2:
        raise ValueError(f"cannot draw {m} distinct edges on {n} nodes")
    order = np.argsort(groups, kind="stable")
    counts = np.bincount(groups, minlength=int(groups.max()) + 1)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    keys = np.zeros(0, dtype=np.int64)
    while len(keys) < m:
        k = int(1.15 * (m - len(keys))) + 64
        u = rng.randint(0, n, size=k)
        g = groups[u]
        same = order[starts[g] + (rng.rand(k) * counts[g]).astype(np.int64)]
        v = np.where(rng.rand(k) < within, same, rng.randint(0, n, size=k))
        keep = u != v
        lo, hi = np.minimum(u, v)[keep], np.maximum(u, v)[keep]
        keys = np.union1d(keys, lo.astype(np.int64) * n + hi)
    keys = keys[rng.permutation(len(keys))[:m]]
    return np.stack([keys // n, keys % n], axis=1)


def both_directions(edges: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` listing every undirected edge from both ends, sorted by ``src``."""
    src = np.concatenate([edges[:, 0], edges[:, 1]])
    dst = np.concatenate([edges[:, 1], edges[:, 0]])
    order = np.lexsort((dst, src))
    return src[order], dst[order]


def centroid_features(rng: np.random.RandomState, labels: np.ndarray, dim: int,
                      spread: float = 0.1, signal: float = 0.5) -> np.ndarray:
    """Dense float32 features: ``signal x`` the label's centroid plus ``N(0, spread)`` noise."""
    classes = int(labels.max()) + 1
    centroids = rng.randn(classes, dim) * spread
    x = signal * centroids[labels] + rng.randn(len(labels), dim) * spread
    return x.astype(np.float32)
