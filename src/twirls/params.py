"""Read exactly the params a stage declares in ``dvc.yaml``, so nothing goes stale silently."""

from __future__ import annotations

import sys
from typing import Any


def load_params(stage: str) -> dict[str, Any]:
    """The params declared by ``stage`` (e.g. ``"report"``, ``"train@cora-twirls"``), nested.

    Uses ``dvc.api.params_show(stages=...)``, which returns only the declared keys: a stage
    that reads a key it did not declare gets a ``KeyError`` instead of a silent stale result.
    """
    import dvc.api
    from dvc.exceptions import DvcException

    try:
        return dvc.api.params_show(stages=[stage])
    except DvcException as exc:
        sys.exit(f"cannot read params of stage {stage!r}: {exc}. Run from the repository root.")
