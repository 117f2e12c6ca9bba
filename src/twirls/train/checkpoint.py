"""The trained model of a train stage's first run, saved for the stages that study it.

``table2@<name>`` (run with ``--save-model``) writes ``models/table2/<name>.pt``: the weights of
its first run (seed 0 on the entry's first split, the run whose history ``plots/`` holds) after
the last epoch, next to the completed entry they were trained from and the run's scores. The
``energy`` stage loads that file instead of training the model again. Weights are kept for the
models that stage can measure (:data:`KEPT_MODELS`, TWIRLS: ~0.1-2 MB each); for the others the
file records the run without them (``status: not-kept``; Citeseer's 32-layer GCNII alone would be
12 MB of git history on every change).

The file is ``torch.save`` of plain data (strings, numbers, dicts, lists and tensors), read back
with ``weights_only=True`` (no pickled code runs). It is serialised in memory and written under
its final name's temporary sibling, then renamed: the archive's inner name does not depend on the
file name, so the same weights always give the same bytes (DVC reruns nothing downstream of an
unchanged model). Without data it says why (``status: no-data``).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from twirls.files import write_bytes

FORMAT = "twirls-checkpoint/1"
#: models whose weights a saved first run keeps: those the ``energy`` stage measures
KEPT_MODELS = ("twirls",)


def keeps_weights(entry: dict[str, Any]) -> bool:
    """Whether a saved first run of ``entry`` holds its weights (:data:`KEPT_MODELS`)."""
    return entry.get("model") in KEPT_MODELS


@dataclass(frozen=True)
class Checkpoint:
    """A saved first run: the entry it was trained from, its scores and its weights."""

    experiment: str  # "<group>.<name>"
    entry: dict[str, Any]  # the completed entry (twirls.config.entries.train_entry)
    run: dict[str, Any]  # seed, split, epochs, best_epoch, train/val/test at the best epoch
    device: str  # where it was trained
    state_dict: dict[str, Tensor]


def save_checkpoint(path: Path, experiment: str, entry: dict[str, Any], *,
                    run: dict[str, Any] | None = None, device: str = "",
                    state_dict: dict[str, Tensor] | None = None, reason: str = "") -> None:
    """Write the first run of ``experiment``: ``run`` and its ``state_dict`` when
    :func:`keeps_weights` (``status: ok``), ``run`` alone otherwise (``not-kept``); with
    ``run=None``, a file saying why there is no run (``no-data``, ``reason``)."""
    obj: dict[str, Any] = {"format": FORMAT, "experiment": experiment, "entry": entry}
    if run is None:
        obj.update(status="no-data", reason=reason)
    elif not keeps_weights(entry):
        obj.update(status="not-kept", run=run, device=device,
                   reason=f"only the weights of {', '.join(KEPT_MODELS)} models are kept "
                          "(what the energy stage measures)")
    else:
        if state_dict is None:
            raise ValueError(f"{experiment}: a checkpoint of a run needs its state_dict")
        obj.update(status="ok", run=run, device=device,
                   state_dict={k: v.cpu() for k, v in state_dict.items()})
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    write_bytes(path, buffer.getvalue())


def load_checkpoint(path: Path, experiment: str, entry: dict[str, Any]) -> Checkpoint:
    """The saved first run of ``experiment``, checked against the completed ``entry`` it must
    have been trained from. ``ValueError`` (one line, with the command that remakes the file)
    when the file is missing, unreadable, holds no run, or was trained from other params."""
    group, _, name = experiment.partition(".")
    remake = f"run `dvc repro {group}@{name}` to save it"
    if not path.is_file():
        raise ValueError(f"{path}: no saved model of {experiment}; {remake}")
    try:
        obj = torch.load(path, weights_only=True)
    except Exception as exc:  # a damaged or foreign file: pickle/zip errors of many kinds
        # one line: newer torch explains weights_only failures over several paragraphs
        first = (str(exc).strip().splitlines() or [""])[0]
        first = first if len(first) <= 120 else first[:117] + "..."
        raise ValueError(f"{path}: not a readable model file ({type(exc).__name__}: {first}); "
                         f"{remake}") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} file; {remake}")
    if obj["experiment"] != experiment or obj["entry"] != entry:
        raise ValueError(f"{path}: saved by {obj['experiment']} with other params than "
                         f"{experiment} has now; {remake}")
    if obj["status"] != "ok":
        raise ValueError(f"{path}: {experiment} saved no model ({obj['reason']})")
    return Checkpoint(experiment, obj["entry"], obj["run"], obj["device"], obj["state_dict"])
