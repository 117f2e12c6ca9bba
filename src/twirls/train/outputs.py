"""Stage outputs: metrics JSON for ``dvc metrics`` and per-epoch CSV for ``dvc plots``, each
written to a temporary file and renamed, so an interrupted stage never leaves half a file."""

from __future__ import annotations

import csv
import math
import platform
from pathlib import Path
from typing import Any

import numpy as np
import torch

from twirls import files


def write_json_without_nan(path: Path, obj: dict[str, Any]) -> None:
    """Metrics JSON for ``dvc metrics`` (NaN entries, e.g. no train score, are left out)."""
    obj = {k: v for k, v in obj.items() if not (isinstance(v, float) and math.isnan(v))}
    files.write_json(path, obj, sort_keys=True)


def stack() -> dict[str, str]:
    """The software a run used: Python, torch and NumPy versions (``stack`` in every metrics
    file, so ``dvc metrics show`` says where each number was computed)."""
    return {"python": platform.python_version(), "torch": torch.__version__,
            "numpy": np.__version__}


def write_metrics(path: Path, obj: dict[str, Any]) -> None:
    """A stage's metrics file: ``obj`` and the :func:`stack` of this run."""
    write_json_without_nan(path, {**obj, "stack": stack()})


def write_history(path: Path, history: list[dict[str, float]]) -> None:
    with files.replacing(path) as tmp, open(tmp, "w", newline="") as fh:
        fields = list(history[0]) if history else ["epoch"]
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(history)
