"""Per-dataset facts that every experiment on a dataset shares, stated once.

An experiment entry in ``params.yaml`` may still override any of them (e.g. ``seeds``):

* ``split``: the split an experiment trains on (a split name of the loader, or ``"all"`` for
  every split, e.g. the ten Geom-GCN splits of Table 3);
* ``feature_norm``: ``"row"`` (divide by the row sum, as DGL's loaders give the authors' code
  for bag-of-words data) or ``"none"`` (ogbn-arxiv's signed word2vec features, used raw by the
  OGB scripts; the attacked graphs' raw 0/1 features, as the authors' attacked-data loader);
* ``seeds``: runs per split (absent: the global ``train.seeds``; one per split on the
  Geom-GCN data, whose ten splits already give ten runs).
"""

from __future__ import annotations

from typing import Any

DATASET_DEFAULTS: dict[str, dict[str, Any]] = {
    "cora": {"split": "public", "feature_norm": "row"},
    "citeseer": {"split": "public", "feature_norm": "row"},
    "pubmed": {"split": "public", "feature_norm": "row"},
    "ogbn-arxiv": {"split": "time", "feature_norm": "none", "seeds": 10},  # the leaderboard's 10
    "texas": {"split": "all", "feature_norm": "row", "seeds": 1},
    "wisconsin": {"split": "all", "feature_norm": "row", "seeds": 1},
    "cornell": {"split": "all", "feature_norm": "row", "seeds": 1},
    "actor": {"split": "all", "feature_norm": "row", "seeds": 1},
    "nettack-cora": {"feature_norm": "none"},
    "nettack-citeseer": {"feature_norm": "none"},
    "amazon": {"feature_norm": "row"},
    "chains": {"split": "ignn", "feature_norm": "row"},
    "pku": {},
}


def with_dataset_defaults(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` completed with its dataset's defaults (the entry's own values win)."""
    return {**DATASET_DEFAULTS.get(entry["dataset"], {}), **entry}
