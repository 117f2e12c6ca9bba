"""Mettack (Meta-Self) structure attack: a fast exact implementation and DeepRobust's reference.

* :mod:`twirls.attack.metattack`      — :class:`Metattack`, the fast implementation;
* :mod:`twirls.attack.deeprobust_ref` — DeepRobust's ``Metattack`` run the same way;
* :mod:`twirls.attack.surrogate`      — DeepRobust-style GCN (surrogate and evaluation);
* :mod:`twirls.attack.normalize`      — ``Â = D^{-1/2}(A+I)D^{-1/2}`` from an edge list;
* :mod:`twirls.attack.io`             — the attacked-graph ``.npz`` file.

Nothing is imported here: a stage that reads an attacked graph imports ``twirls.attack.io``
alone, so its source deps (``python -m twirls.dag deps``) leave out the attack's code, whose
changes reach it through ``data/attacked/<dataset>.npz`` only when the flips change.
"""
