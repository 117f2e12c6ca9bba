"""Classification metrics on logits: accuracy, and IGNN's multi-label micro/macro F1."""

from __future__ import annotations

import torch
from torch import Tensor


def accuracy(logits: Tensor, labels: Tensor) -> float:
    """Fraction of rows whose arg-max equals the label, exactly ``correct / total`` (the float64
    nearest to the fraction, so 715 of 1000 is 0.715); ``nan`` for no rows (an empty selection
    has no accuracy, and a ``nan`` never wins a model selection). The one accuracy of the
    project: training, the defenses and the attack's surrogate all use it."""
    return float(accuracy_tensor(logits, labels))


def accuracy_tensor(logits: Tensor, labels: Tensor) -> Tensor:
    """:func:`accuracy` as a 0-d float64 tensor on the logits' device (no host read)."""
    correct = (logits.argmax(-1) == labels).sum(dtype=torch.float64)
    return correct / labels.numel()  # 0 / 0 is nan


def multilabel_f1(logits: Tensor, labels: Tensor) -> tuple[float, float]:
    """``(micro_F1, macro_F1)`` for 0/1 label rows, predicting for each node its ``k`` top-scored
    classes where ``k`` is its number of true labels (IGNN's ``Evaluation``, used by the paper's
    Amazon experiment). Classes with no true and no predicted label score 0 in the macro mean, as
    in scikit-learn's default."""
    micro, macro = multilabel_f1_tensor(logits, labels).tolist()
    return micro, macro


def multilabel_f1_tensor(logits: Tensor, labels: Tensor) -> Tensor:
    """:func:`multilabel_f1` as a float64 tensor ``[micro, macro]`` on the logits' device."""
    if labels.numel() == 0:
        return torch.full((2,), float("nan"), dtype=torch.float64, device=logits.device)
    truth = labels > 0.5
    k = truth.sum(-1, keepdim=True)
    rank = logits.argsort(-1, descending=True).argsort(-1)
    pred = rank < k
    tp = (pred & truth).sum(0).double()
    fp = (pred & ~truth).sum(0).double()
    fn = (~pred & truth).sum(0).double()
    micro_den = 2 * tp.sum() + fp.sum() + fn.sum()
    micro = torch.where(micro_den > 0, 2 * tp.sum() / micro_den.clamp(min=1),
                        torch.zeros_like(micro_den))
    den = 2 * tp + fp + fn
    per_class = torch.where(den > 0, 2 * tp / den.clamp(min=1), torch.zeros_like(den))
    return torch.stack([micro, per_class.mean()])
