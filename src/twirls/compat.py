"""Work-arounds for third-party libraries, kept in one place.

DeepRobust 0.2.11:

- ``deeprobust/graph/global_attack/__init__.py`` calls ``warnings.warn`` when
  ``torch_geometric``/``torch_sparse`` are missing, without importing ``warnings`` first, so
  ``from deeprobust.graph.global_attack import Metattack`` dies with ``NameError``. We do not need
  the PyG-based attacks, so we make the name resolvable through ``builtins`` before importing.
- ``deeprobust/graph/defense/__init__.py`` imports ``node_embedding`` (DeepWalk, Node2Vec), which
  imports gensim. gensim has no wheel for Python 3.14 and its source does not compile there, so
  the default stack installs DeepRobust without its declared dependencies
  (``requirements-nodeps.txt``) and without gensim. We use neither class: where gensim is
  missing, that one module is a placeholder whose classes say why they cannot be used.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import sys
import warnings
from types import ModuleType

NODE_EMBEDDING = "deeprobust.graph.defense.node_embedding"


def import_deeprobust(module: str) -> ModuleType:
    """Import ``deeprobust.<module>`` (e.g. ``"graph.global_attack"``) despite the bugs above."""
    if not hasattr(builtins, "warnings"):
        builtins.warnings = warnings  # type: ignore[attr-defined]
    if NODE_EMBEDDING not in sys.modules and importlib.util.find_spec("gensim") is None:
        sys.modules[NODE_EMBEDDING] = _without_gensim()
    return importlib.import_module(f"deeprobust.{module}")


def _without_gensim() -> ModuleType:
    placeholder = ModuleType(NODE_EMBEDDING, "DeepRobust's DeepWalk/Node2Vec, not installed")

    class NeedsGensim:
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise ImportError(f"{type(self).__name__} from {NODE_EMBEDDING} needs gensim, which "
                              "this stack leaves out (twirls/compat.py); pip install gensim")

    for name in ("DeepWalk", "Node2Vec", "BaseEmbedding"):
        setattr(placeholder, name, type(name, (NeedsGensim,), {"__module__": NODE_EMBEDDING}))
    return placeholder
