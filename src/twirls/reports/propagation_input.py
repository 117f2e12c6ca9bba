"""``f(X; W)`` of the model a train stage saved: the ``f`` of eq. 1, for measuring on real data
the energies that TWIRLS' propagation descends (stage ``energy``).

The model is the *first run* of a Table 2 entry (e.g. ``table2.cora-twirls-base-k2``): seed 0 on
the entry's first split, the run whose per-epoch history ``table2@`` writes to
``plots/table2/<name>.csv`` and whose weights after the last epoch it saves to
``models/table2/<name>.pt`` (:mod:`twirls.train.checkpoint`). Here they are loaded into the
entry's model, built as :func:`twirls.train.experiment.run_inputs` builds it, and ``f`` is the
output of its ``mlp_before`` in eval mode (no dropout, no grad) on the same prepared features
(sparse CSR for bag-of-words data), on the CPU.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from twirls.data.graph import GraphData
from twirls.train.checkpoint import Checkpoint
from twirls.train.experiment import run_inputs
from twirls.train.loop import evaluate


def propagation_input(exp: dict[str, Any], data: GraphData, saved: Checkpoint
                      ) -> tuple[Tensor, dict[str, Any]]:
    """``f(X; W)`` on all nodes (float64, CPU) of the model ``saved`` from the (completed) entry
    ``exp`` on ``data``, with a summary of its run. Raises ``ValueError`` when the entry is not a
    TWIRLS with node features (``f`` would not be ``mlp_before(X)``)."""
    if exp.get("model") != "twirls":
        raise ValueError(f"model {exp.get('model')!r}: f(X; W) is taken from a TWIRLS model")
    if data.features is None or (exp.get("model_cfg") or {}).get("embedding"):
        raise ValueError(f"{data.name}: f(X; W) needs node features (not a learned embedding)")
    inputs = run_inputs(exp, data, torch.device("cpu"), progress=False)
    split = inputs.splits[0]
    model = inputs.build()
    model.load_state_dict(saved.state_dict)
    last = evaluate(model, inputs.ops, inputs.x, data.labels, data.splits[split])
    model.eval()
    with torch.no_grad():
        f = model.mlp_before(inputs.x)
    run = saved.run
    features = "sparse CSR" if inputs.x.layout == torch.sparse_csr else "dense"
    summary = {"seed": run["seed"], "split": split, "features": features,
               "epochs": run["epochs"], "best_epoch": run["best_epoch"],
               "val_at_best": run["val_at_best"], "test_at_best": run["test_at_best"],
               "val_last": last["val"], "test_last": last["test"], "f_shape": list(f.shape)}
    return f.detach().to(torch.float64), summary
