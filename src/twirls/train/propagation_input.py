"""``f(X; W)`` of the model a train stage trains: the ``f`` of eq. 1, for measuring on real data
the energies that TWIRLS' propagation descends (stage ``energy``).

The model is the *first run* of a train-kind entry (e.g. ``table2.cora-twirls-base-k2``): seed 0
on the entry's first split, the run whose per-epoch history ``train@`` writes to
``plots/<group>/<name>.csv``. It is trained here exactly as ``train@`` trains it, from the same
:func:`twirls.train.experiment.run_inputs` (the entry's ``model_cfg`` / ``train_cfg``, the same
prepared features, sparse CSR for bag-of-words data, hence the same dropout masks, and the same
seed), so on the CPU it is the same model, bit for bit. ``f`` is the output of its ``mlp_before``
in eval mode (no dropout, no grad) on those features, with the weights after the last epoch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from twirls.data.graph import GraphData
from twirls.train.experiment import run_inputs
from twirls.train.loop import evaluate, seed_model_run

FIRST_SEED = 0  # split 0 of experiment_runs uses the seeds 1000 * 0 + s: the first is 0


def propagation_input(exp: dict[str, Any], data: GraphData, device: torch.device
                      ) -> tuple[Tensor, dict[str, Any]]:
    """Train the first run of the (completed) entry ``exp`` on ``data`` and return its
    ``f(X; W)`` on all nodes (float64, CPU) with a summary of the run. Raises ``ValueError``
    when the entry is not a TWIRLS with node features (``f`` would not be ``mlp_before(X)``)."""
    if exp.get("model") != "twirls":
        raise ValueError(f"model {exp.get('model')!r}: f(X; W) is taken from a TWIRLS model")
    if data.features is None or (exp.get("model_cfg") or {}).get("embedding"):
        raise ValueError(f"{data.name}: f(X; W) needs node features (not a learned embedding)")
    inputs = run_inputs(exp, data, device)
    split = inputs.splits[0]
    model, run = seed_model_run(inputs.build, inputs.ops, inputs.x, data.labels,
                                data.splits[split], inputs.cfg, FIRST_SEED)
    last = evaluate(model, inputs.ops, inputs.x, data.labels, data.splits[split])
    model.eval()
    with torch.no_grad():
        f = model.mlp_before(inputs.x)
    features = "sparse CSR" if inputs.x.layout == torch.sparse_csr else "dense"
    summary = {"seed": FIRST_SEED, "split": split, "features": features,
               "epochs": len(run.history), "best_epoch": run.best_epoch,
               "val_at_best": run.val, "test_at_best": run.test, "val_last": last["val"],
               "test_last": last["test"], "seconds": round(run.seconds, 2),
               "f_shape": list(f.shape)}
    return f.detach().to("cpu", torch.float64), summary
