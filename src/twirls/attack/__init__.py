"""Mettack (Meta-Self) structure attack: a fast exact implementation and DeepRobust's reference.

* :mod:`twirls.attack.metattack`      — :class:`Metattack`, the fast implementation;
* :mod:`twirls.attack.deeprobust_ref` — DeepRobust's ``Metattack`` run the same way;
* :mod:`twirls.attack.surrogate`      — DeepRobust-style GCN (surrogate and evaluation);
* :mod:`twirls.attack.normalize`      — ``Â = D^{-1/2}(A+I)D^{-1/2}`` from an edge list;
* :mod:`twirls.attack.io`             — the attacked-graph ``.npz`` file.
"""

from twirls.attack.io import AttackedGraph, load_attacked, save_attacked
from twirls.attack.metattack import Metattack

__all__ = ["AttackedGraph", "Metattack", "load_attacked", "save_attacked"]
