"""Work-arounds for third-party libraries, kept in one place.

DeepRobust 0.2.11: ``deeprobust/graph/global_attack/__init__.py`` calls ``warnings.warn`` when
``torch_geometric``/``torch_sparse`` are missing, without importing ``warnings`` first, so
``from deeprobust.graph.global_attack import Metattack`` dies with ``NameError``. We do not need
the PyG-based attacks, so we make the name resolvable through ``builtins`` before importing.

DGL: only the models built on DGL's layers (GAT, GraphSAGE) import it, through
:func:`import_dgl_nn`, so that everything else runs on a stack where DGL is not installed (DGL on
PyPI stops at 2.1.0, which needs torch <= 2.2.1 and numpy < 2).
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


DGL_INSTALL_HINT = ("install the pinned stack (`pip install -r requirements.txt`, which has "
                    "dgl==2.1.0), or for CUDA DGL's own wheel (README, 'Device and GPUs')")


class DGLUnavailable(ImportError):
    """A model built on DGL's layers was asked for where DGL cannot be imported; a stage
    reports it as one line (:func:`twirls.stages.skeleton.entry`)."""


def import_dgl_nn(who: str) -> ModuleType:
    """``dgl.nn``, or :class:`DGLUnavailable` saying that ``who`` needs DGL and how to get it."""
    try:
        return importlib.import_module("dgl.nn")
    except ImportError as exc:
        raise DGLUnavailable(f"{who} runs on DGL's layers, and DGL cannot be imported ({exc}); "
                             f"{DGL_INSTALL_HINT}") from exc
