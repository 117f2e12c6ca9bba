"""DeepRobust's own ``Metattack`` (Meta-Self), the reference our fast implementation must match.

Runs ``deeprobust.graph.global_attack.Metattack`` as DeepRobust's example
``examples/graph/test_mettack.py`` (and GNNGuard's non-targeted setting) does: a linearised GCN
surrogate trained on ``idx_train``, ``lambda_=0``, ``ll_constraint=False``, defaults otherwise
(``train_iters=100, lr=0.1, momentum=0.9``), sparse features. It is slow (dense ``N × N``
autograd through 100 unrolled training steps: 18-29 s per flip on Cora on 2 cores), so it is used
on small graphs and for a few flips in the benchmark.

Two entry points:

* :func:`run_example` — the whole example from a seed (``torch.manual_seed`` /
  ``np.random.seed``, DeepRobust's GCN surrogate, then the attack);
* :func:`run_metattack` — only the attack, for given self-training labels, so that both
  implementations can be compared on identical inputs and an identical random stream.

Both record the flips in order and the time of each (DeepRobust itself only returns the final
graph), and silence DeepRobust's three prints per flip.
"""

from __future__ import annotations

import contextlib
import io
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp
import torch

from twirls.attack.surrogate import SURROGATE, self_training_labels
from twirls.compat import import_deeprobust


@dataclass
class ReferenceResult:
    """The perturbed graph, the flips ``(i, j)`` in order and seconds per flip."""

    adj: sp.csr_matrix
    flips: list[tuple[int, int]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


def _recording_metattack():
    """A ``Metattack`` subclass that logs each flip (the argmax of its score) and its time."""
    base = import_deeprobust("graph.global_attack").Metattack

    class RecordingMetattack(base):
        def get_adj_score(self, *args, **kwargs):
            score = super().get_adj_score(*args, **kwargs)
            # With attack_features=False DeepRobust flips exactly this argmax.
            i, j = divmod(int(torch.argmax(score)), score.shape[1])
            self.flips.append((i, j))
            now = time.perf_counter()
            self.seconds.append(now - self.t_last)
            self.t_last = now
            return score

    return RecordingMetattack


def run_metattack(
    adj: sp.spmatrix,
    features: sp.spmatrix,
    labels: np.ndarray,
    idx_train: np.ndarray,
    idx_unlabeled: np.ndarray,
    n_perturbations: int,
    labels_self_training: torch.Tensor,
    *,
    hidden: int = 16,
    lambda_: float = 0.0,
    train_iters: int = 100,
    lr: float = 0.1,
    momentum: float = 0.9,
    progress: bool = False,
) -> ReferenceResult:
    """DeepRobust's attack with the self-training labels given (global torch RNG, as is)."""
    nclass = int(np.max(labels)) + 1
    log_probs = torch.full((adj.shape[0], nclass), -1e9)  # argmax == labels_self_training
    log_probs[torch.arange(adj.shape[0]), torch.as_tensor(labels_self_training)] = 0.0
    surrogate = SimpleNamespace(output=log_probs, hidden_sizes=[hidden], nfeat=features.shape[1],
                                nclass=nclass, with_relu=False)
    return _attack(surrogate, adj, features, labels, idx_train, idx_unlabeled, n_perturbations,
                   lambda_=lambda_, train_iters=train_iters, lr=lr, momentum=momentum,
                   progress=progress)


def run_example(
    adj: sp.spmatrix,
    features: sp.spmatrix,
    labels: np.ndarray,
    idx_train: np.ndarray,
    idx_unlabeled: np.ndarray,
    n_perturbations: int,
    *,
    seed: int = 15,
    progress: bool = False,
) -> tuple[ReferenceResult, torch.Tensor]:
    """DeepRobust's ``test_mettack.py`` from ``seed``; also returns the self-training labels."""
    gcn_cls = import_deeprobust("graph.defense").GCN
    np.random.seed(seed)
    torch.manual_seed(seed)
    surrogate = gcn_cls(nfeat=features.shape[1], nclass=int(np.max(labels)) + 1,
                        nhid=SURROGATE.hidden, dropout=SURROGATE.dropout, with_relu=False,
                        with_bias=SURROGATE.with_bias, weight_decay=5e-4, device="cpu")
    surrogate.fit(features, adj, labels, idx_train, train_iters=SURROGATE.epochs)
    targets = self_training_labels(surrogate.output.detach(), labels, idx_train)
    result = _attack(surrogate, adj, features, labels, idx_train, idx_unlabeled,
                     n_perturbations, progress=progress)
    return result, targets


def _attack(surrogate, adj, features, labels, idx_train, idx_unlabeled, n_perturbations, *,
            lambda_=0.0, train_iters=100, lr=0.1, momentum=0.9, progress=False):
    if not sp.issparse(features):
        features = sp.csr_matrix(features)
    model = _recording_metattack()(
        surrogate, nnodes=adj.shape[0], feature_shape=features.shape, attack_structure=True,
        attack_features=False, device="cpu", lambda_=lambda_, train_iters=train_iters, lr=lr,
        momentum=momentum)
    model.flips, model.seconds, model.t_last = [], [], time.perf_counter()
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), _maybe_quiet(progress):
        model.attack(features, sp.csr_matrix(adj), np.asarray(labels), np.asarray(idx_train),
                     np.asarray(idx_unlabeled), n_perturbations, ll_constraint=False)
    modified = sp.csr_matrix(model.modified_adj.cpu().numpy(), dtype=np.float32)
    modified.eliminate_zeros()
    return ReferenceResult(adj=modified, flips=model.flips, seconds=model.seconds)


@contextlib.contextmanager
def _maybe_quiet(progress: bool):
    """DeepRobust's tqdm bar writes to stderr; hide it unless ``progress``."""
    if progress:
        yield
    else:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
