"""Macro F1 over the four tags B/M/E/S (the paper's Table 12 metric), per character."""

from __future__ import annotations

import numpy as np
from torch import Tensor

from twirls.data.pku import TAGS


def confusion(pred: np.ndarray | Tensor, gold: np.ndarray | Tensor,
              num_classes: int = len(TAGS)) -> np.ndarray:
    """``C[g, p]`` = number of characters of gold tag ``g`` predicted as ``p``."""
    pred = np.asarray(pred.cpu() if isinstance(pred, Tensor) else pred, dtype=np.int64)
    gold = np.asarray(gold.cpu() if isinstance(gold, Tensor) else gold, dtype=np.int64)
    if pred.shape != gold.shape:
        raise ValueError(f"pred and gold differ in shape: {pred.shape} vs {gold.shape}")
    return np.bincount(gold * num_classes + pred,
                       minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def f1_per_class(matrix: np.ndarray) -> np.ndarray:
    """F1 of every class from a confusion matrix; 0 for a class never gold nor predicted
    (sklearn's ``zero_division=0``)."""
    tp = np.diag(matrix).astype(np.float64)
    fp = matrix.sum(axis=0) - tp
    fn = matrix.sum(axis=1) - tp
    denom = 2 * tp + fp + fn
    return np.divide(2 * tp, denom, out=np.zeros_like(tp), where=denom > 0)


def macro_f1(pred: np.ndarray | Tensor, gold: np.ndarray | Tensor,
             num_classes: int = len(TAGS)) -> float:
    """Unweighted mean of the per-tag F1 scores (in [0, 1]), as
    ``sklearn.metrics.f1_score(gold, pred, labels=range(4), average="macro")``."""
    return float(f1_per_class(confusion(pred, gold, num_classes)).mean())
