"""Chains: IGNN's synthetic long-range-dependency benchmark (Gu et al., 2020), generated.

The paper (appendix "Chains Long-Range Dependency Dataset") uses the dataset "introduced by
IGNN": disjoint chains, each labelled with one of 2 classes; only the first node of a chain
carries its class in its features, so every other node must receive that information from up to
``length - 1`` hops away. Generated exactly as IGNN's ``load_citation_chain``:

* ``num_classes = 2`` classes x ``num_chains_per_class = 20`` chains x ``length = 10`` nodes,
  node order (class, chain, position);
* features ``(n, feature_dim = 100)``: the head (position 0) of a class-``c`` chain has a 1 in
  column ``c``, everything else is 0. IGNN adds ``uniform(-0, 0)`` noise, which is 0 but still
  draws ``n * feature_dim`` numbers from the ``RandomState(seed = 42)`` stream, so we draw too;
* every node of a chain has its chain's class;
* the same stream then shuffles ``arange(n)``: the first 20 ids are train, the next 100
  validation and the next 200 test (split ``"ignn"``).

IGNN stores only the directed links ``k -> k + 1`` of each chain and never symmetrises them;
our graph (like every graph here, the paper's :math:`A`) holds each link in both directions.
Features are IGNN's before its row normalisation (which leaves one-hot rows and zero rows
unchanged anyway). ``name`` ``"chains"`` gives the defaults; ``"chains-<L>"`` gives length ``L``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from twirls.data.graph import GraphData, Split, undirected_graph

NAME = "chains"
NUM_CLASSES = 2
#: keyword arguments of :func:`generate` that :func:`load` (and a sweep's ``data_grid``) accept.
OPTIONS = ("num_chains_per_class", "length", "feature_dim", "seed", "num_train", "num_val",
           "num_test")


def generate(
    num_chains_per_class: int = 20,
    length: int = 10,
    feature_dim: int = 100,
    seed: int = 42,
    num_train: int = 20,
    num_val: int = 100,
    num_test: int = 200,
    name: str = NAME,
) -> GraphData:
    """IGNN's chains dataset with the given sizes (defaults: IGNN's)."""
    c, k, length_ = NUM_CLASSES, num_chains_per_class, length
    n = c * k * length_
    if length_ < 1 or k < 1 or feature_dim < c:
        raise ValueError(f"chains.generate: need length >= 1, num_chains_per_class >= 1 and "
                         f"feature_dim >= {c}; got {length_}, {k}, {feature_dim}.")
    if num_train + num_val + num_test > n:
        raise ValueError(f"chains.generate: {num_train}+{num_val}+{num_test} split nodes but "
                         f"only {n} nodes; use more or longer chains, or smaller splits.")
    rng = np.random.RandomState(seed)
    features = rng.uniform(-0.0, 0.0, size=(c, k, length_, feature_dim))
    features[:, :, 0, :c] += np.eye(c).reshape(c, 1, c)
    labels = np.repeat(np.arange(c), k * length_)
    order = np.arange(n)
    rng.shuffle(order)

    heads = np.arange(0, n, length_)
    src = (heads[:, None] + np.arange(length_ - 1)[None, :]).reshape(-1)
    split = Split(
        train=torch.from_numpy(order[:num_train].copy()),
        val=torch.from_numpy(order[num_train:num_train + num_val].copy()),
        test=torch.from_numpy(order[num_train + num_val:num_train + num_val + num_test].copy()),
    )
    return GraphData(
        name=name,
        graph=undirected_graph(torch.from_numpy(src), torch.from_numpy(src + 1), n),
        features=torch.from_numpy(features.reshape(n, feature_dim)).float(),
        labels=torch.from_numpy(labels),
        splits={"ignn": split},
        meta={
            "source": "generated as IGNN's load_citation_chain",
            "num_chains": c * k,
            "length": length_,
            "heads": torch.from_numpy(heads),
            "seed": seed,
        },
    )


def load(root: Path | None = None, name: str = NAME, **options: Any) -> GraphData:
    """``"chains"`` (IGNN's defaults) or ``"chains-<L>"`` (chains of ``L`` nodes); ``root`` is
    unused (nothing to read). ``options`` (any of :data:`OPTIONS`) go to :func:`generate`."""
    if name == NAME:
        return generate(**options)
    prefix = f"{NAME}-"
    if name.startswith(prefix) and name[len(prefix):].isdigit():
        return generate(**{"length": int(name[len(prefix):]), **options}, name=name)
    raise ValueError(f"chains.load: unknown dataset {name!r}; expected 'chains' or 'chains-<L>' "
                     f"(e.g. 'chains-20').")
