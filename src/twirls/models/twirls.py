"""TWIRLS (Yang et al., ICML 2021): an MLP, unfolded IRLS propagation, an MLP.

Architecture (appendix "Basic Architecture Design", Fig. "Model Architecture")::

    x ──dropout──> f(X; W) = MLP, K layers ──> S propagation steps (eq. 6 / eq. 21)
                                               with attention layers (eq. 20)
      ──> g(y; θ) = MLP, L layers ──> logits

* ``mlp_before = K``, ``mlp_after = L``; in every experiment of the paper one of them is 0.
  With ``K = 0`` nothing before the propagation has parameters, so (if ``input_dropout = 0``)
  the propagation of ``X`` is computed once and cached in the :class:`GraphOps`: this is
  **TWIRLS*** (appendix "Running Time"), whose training costs an MLP's.
* ``attention=None`` gives **TWIRLS-base**.
* Widths follow the reference: ``K = 1`` is a single linear map ``in_dim → out_dim`` (if
  ``L = 0``) and ``hidden`` is unused. The appendix table's hidden size "-" (Cora, Citeseer,
  Pubmed, ATK-*) means "not set": the reference's README runs them with ``--mlp_bef=1`` (no hidden
  layer at all), and any K = 2 run without ``--hidden_size`` gets the argparse default 128
  (FFTYYY/TWIRLS ``config.py``), which is our default ``hidden``.
* ``dropout`` acts after every hidden activation of the MLPs; ``input_dropout`` on the node
  features before ``f`` (the reference's ``--dropout`` and ``--inp_dropout``: the paper's
  "dropout 0.8 for Cora" is the README's ``--inp_dropout=0.8`` with a one-layer ``f``).
* ``embedding = d > 0`` learns a ``d``-dim vector per node instead of features (Amazon, no
  features; initialised ``N(0, 1e-3²)`` as in the reference); needs ``num_nodes``.

Config keys and their defaults: :class:`TWIRLSConfig`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from twirls.models.attention import AttentionSpec
from twirls.models.config import ModelConfig, check
from twirls.models.graph_ops import GraphOps
from twirls.models.layers import FeedForward, dropout, is_sparse
from twirls.models.propagation import Propagation, PropagationSpec


@dataclass(frozen=True)
class TWIRLSConfig(ModelConfig):
    """TWIRLS hyperparameters (the ``model_cfg`` keys of ``model: twirls``; see the module doc).
    ``steps``, ``lam`` and ``alpha`` have no default: a config must give them."""

    MODEL: ClassVar[str] = "TWIRLS"

    steps: int  # S propagation steps (eq. 6 / eq. 21)
    lam: float  # λ > 0, weight of the graph term (eq. 1)
    alpha: float | str  # step size α > 0 (eq. 5); "auto": 1/(1+λ), the reference's
    mlp_before: int = 1  # K layers of f(X; W) before the propagation (0: TWIRLS*)
    mlp_after: int = 0  # L layers of g(y; θ) after it (not both 0)
    #: width of hidden MLP layers and of the propagation when K, L > 0; "-" or None (the
    #: appendix table's "not set"): this default, the reference's argparse default
    hidden: int | str | None = 128
    dropout: float = 0.0  # after every hidden activation of the MLPs (reference --dropout)
    input_dropout: float = 0.0  # on the node features before f (reference --inp_dropout)
    norm: str = "none"  # "none" | "batch" | "layer", in the MLPs
    prox_relu: bool = False  # proximal step for Y >= 0 (eq. 10), a ReLU after every step
    variant: str = "paper"  # "paper" (the equations) | "reference" (the authors' code)
    normalized: bool = False  # normalized-Laplacian unfolding instead of Jacobi preconditioning
    #: IRLS attention (eq. 20), ``{p, tau, T, placement}`` as read by
    #: :meth:`AttentionSpec.from_config <twirls.models.attention.AttentionSpec.from_config>`;
    #: None: TWIRLS-base
    attention: Mapping[str, Any] | None = None
    embedding: int = 0  # d > 0: learn a d-dim input per node (needs num_nodes)

    def propagation_spec(self) -> PropagationSpec:
        """The propagation these hyperparameters describe (``alpha: auto`` resolved)."""
        alpha = 1.0 / (1.0 + float(self.lam)) if self.alpha == "auto" else self.alpha
        check(isinstance(alpha, int | float), "TWIRLS",
              f"alpha must be a number or 'auto' (= 1/(1+lam)), got {alpha!r}")
        return PropagationSpec(
            steps=self.steps, lam=float(self.lam), alpha=float(alpha), variant=self.variant,
            normalized=bool(self.normalized), prox_relu=bool(self.prox_relu),
            attention=AttentionSpec.from_config(self.attention))


class TWIRLS(nn.Module):
    """TWIRLS / TWIRLS-base / TWIRLS* (see module doc). ``x`` may be sparse CSR.

    Args:
        in_dim: node feature width (ignored when ``cfg.embedding > 0``).
        out_dim: number of classes.
        cfg: the hyperparameters.
        num_nodes: number of nodes (only for ``cfg.embedding``).

    Shapes: ``forward(ops, x)`` takes ``x: (n, in_dim)`` (or ``None`` with ``embedding``) and
    returns ``(n, out_dim)`` logits.
    """

    accepts_sparse = True  # x may be a sparse CSR matrix (see FeedForward)
    own_embedding = True  # `embedding` is its own learned input (build_model does not wrap it)

    def __init__(self, in_dim: int, out_dim: int, cfg: TWIRLSConfig,
                 num_nodes: int | None = None) -> None:
        super().__init__()
        spec = cfg.propagation_spec()
        hidden = TWIRLSConfig.hidden if cfg.hidden in (None, "-") else int(cfg.hidden)
        mlp_before, mlp_after = int(cfg.mlp_before), int(cfg.mlp_after)
        dropout, input_dropout = float(cfg.dropout), float(cfg.input_dropout)
        norm, embedding = cfg.norm, int(cfg.embedding)
        check(mlp_before >= 0 and mlp_after >= 0, "TWIRLS",
              f"mlp_before and mlp_after must be >= 0, got {mlp_before}, {mlp_after}")
        check(mlp_before + mlp_after > 0, "TWIRLS",
              "mlp_before and mlp_after are both 0: nothing maps features to classes; "
              "set one of them to >= 1")
        check(0.0 <= dropout < 1.0 and 0.0 <= input_dropout < 1.0, "TWIRLS",
              f"dropout rates must be in [0, 1), got {dropout}, {input_dropout}")
        self.embedding: nn.Parameter | None = None
        if embedding:
            check(num_nodes is not None, "TWIRLS",
                  "embedding > 0 learns one vector per node: pass num_nodes to from_config")
            self.embedding = nn.Parameter(torch.empty(int(num_nodes), embedding))
            nn.init.normal_(self.embedding, 0.0, 1e-3)
            in_dim = embedding
        prop_width = in_dim if mlp_before == 0 else (out_dim if mlp_after == 0 else hidden)
        self.mlp_before = FeedForward(in_dim, hidden, prop_width, mlp_before,
                                      dropout=dropout, norm=norm)
        self.propagation = Propagation(spec)
        self.mlp_after = FeedForward(prop_width, hidden, out_dim, mlp_after, dropout=dropout,
                                     norm=norm, init_activate=mlp_before > 0 and mlp_after > 0)
        self.input_dropout = input_dropout
        self.in_dim, self.out_dim = in_dim, out_dim

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> TWIRLS:
        """Build from a plain dict (a ``params.yaml`` section); keys: :class:`TWIRLSConfig`."""
        return cls(in_dim, out_dim, TWIRLSConfig.from_mapping(cfg), num_nodes=num_nodes)

    @property
    def cacheable(self) -> bool:
        """TWIRLS*: nothing trainable or random before the propagation, so it is cached."""
        return (len(self.mlp_before.lins) == 0 and self.input_dropout == 0.0
                and self.embedding is None)

    def forward(self, ops: GraphOps, x: Tensor | None) -> Tensor:
        if self.embedding is not None:
            x = self.embedding
        elif x is None:
            raise ValueError("TWIRLS: x is None (dataset without node features); set "
                             "`embedding: <dim>` in the model config to learn node inputs")
        if self.cacheable:
            spec = self.propagation.spec
            dense = x.to_dense() if is_sparse(x) else x
            y = ops.cached_for(("twirls*", spec), x,
                               lambda: self._propagate_no_grad(ops, dense))
        else:
            x = dropout(x, self.input_dropout, self.training)
            y = self.propagation(ops, self.mlp_before(x))
        return self.mlp_after(y)

    def _propagate_no_grad(self, ops: GraphOps, x: Tensor) -> Tensor:
        with torch.no_grad():
            return self.propagation(ops, x)
