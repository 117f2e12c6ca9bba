"""Defenses of the adversarial table (Table 4): DeepRobust's GCN, GCN-Jaccard and GCN-SVD, and
our GNNGuard. ``fit_predict(name, adj, features, labels, split, seed, device)`` trains the model
``name`` on the (attacked) adjacency ``adj`` and returns its test accuracy."""

from __future__ import annotations

import torch

from twirls.data.graph import Split
from twirls.defenses import deeprobust_models, gnnguard
from twirls.defenses.common import DefenseResult

NAMES = deeprobust_models.NAMES + gnnguard.NAMES


def fit_evaluate(name: str, adj, features, labels, split: Split, seed: int,
                 device: str | torch.device = "cpu", **options) -> DefenseResult:
    """Train defense ``name`` (one of :data:`NAMES`) and return accuracies and preprocessing
    facts; ``options`` are the model's keyword options (e.g. ``k`` for ``gcn-svd``)."""
    if name in gnnguard.NAMES:
        return gnnguard.fit_evaluate(name, adj, features, labels, split, seed, device, **options)
    if name in deeprobust_models.NAMES:
        return deeprobust_models.fit_evaluate(name, adj, features, labels, split, seed, device,
                                              **options)
    raise ValueError(f"defenses: unknown defense {name!r}; expected one of {NAMES}.")


def fit_predict(name: str, adj, features, labels, split: Split, seed: int,
                device: str | torch.device = "cpu", **options) -> float:
    """Test accuracy of defense ``name`` trained on ``adj`` with ``seed``."""
    return fit_evaluate(name, adj, features, labels, split, seed, device, **options).test_acc


__all__ = ["NAMES", "DefenseResult", "fit_evaluate", "fit_predict"]
