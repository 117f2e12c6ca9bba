"""Work-arounds for third-party libraries, kept in one place.

DeepRobust 0.2.11: ``deeprobust/graph/global_attack/__init__.py`` calls ``warnings.warn`` when
``torch_geometric``/``torch_sparse`` are missing, without importing ``warnings`` first, so
``from deeprobust.graph.global_attack import Metattack`` dies with ``NameError``. We do not need
the PyG-based attacks, so we make the name resolvable through ``builtins`` before importing.
"""

from __future__ import annotations

import builtins
import importlib
import warnings
from types import ModuleType


def import_deeprobust(module: str) -> ModuleType:
    """Import ``deeprobust.<module>`` (e.g. ``"graph.global_attack"``) despite the bug above."""
    if not hasattr(builtins, "warnings"):
        builtins.warnings = warnings  # type: ignore[attr-defined]
    return importlib.import_module(f"deeprobust.{module}")
