r"""SSE (Dai et al., ICML 2018, "Learning Steady-States of Iterative Algorithms over Graphs"):
node embeddings defined as the steady state of a learned operator, learned by a stochastic
schedule that alternates sampled fixed-point updates of a persistent embedding table with
parameter updates on sampled labelled nodes.

Sources: the SSE paper for the model and the schedule (its operator and losses as DGL's SSE
tutorial, ``dmlc/dgl`` ``tutorials/models/1_gnn/8_sse_mx.py``, writes them out); the authors'
C++ (``Hanjun-Dai/steady_state_embedding``) for the settings of their runs and for what keeps
their table bounded (below), read, not ported.

**Steady-state operator** (the SSE paper): every node ``v`` holds an embedding ``h_v``
(width ``hidden``), and the embeddings should satisfy ``h_v = T_Θ(\{h_u\}_{u ∈ N(v)})`` with

.. math::

    T_\Theta[\{h_u\}]_v = W_1\,\sigma\Big(W_2\big[x_v,\ \textstyle\bigoplus_{u \in N(v)}
    [h_u, x_u]\big]\Big),

``[·, ·]`` concatenation, ``σ = ReLU``, ``x_v`` the node's features and ``⊕`` the neighbours'
sum (the paper's ``Σ``, ``aggregate: sum``) or mean (``aggregate: mean``, the authors' run
scripts' ``-avg 1``). ``W_1`` and ``W_2`` are affine (weights and biases; Glorot-uniform weights
as the authors' ``GetVar``, zero biases). Prediction: a linear map of ``T_Θ`` at the node,
``logits_v = V\,T_\Theta[\{h_u\}]_v + c`` (the authors' ``classifier`` on ``tilde_v``; the
loss is cross-entropy, or binary cross-entropy for Amazon's label rows, as in the shared
training loop).

**The bound** (``normalize: true``, the default; the authors' C++ code, not the paper): every
``T_Θ`` output is divided by its L2 norm, as the authors' ``L2ColNorm`` does to ``tilde_v`` in
their Amazon (``code/multilabel``) and chain (``code/fit_algo/connectivity``) programs,

.. math::

    \hat T_\Theta[\{h_u\}]_v = z_v / \max(\lVert z_v\rVert_2, \epsilon), \qquad
    z_v = W_1\,\sigma\big(W_2[\dots]\big), \qquad \epsilon = 10^{-12},

so ``||T̂_v|| <= 1`` and a damped update is a convex combination: ``||h_v|| <= max(||h_v^{(0)}||,
1)`` for every node at every step, whatever the weights. The table starts Glorot-uniform,
``U(±\sqrt{6 / (n + \text{hidden})})`` (``table_init: glorot``, the authors' ``GetVar`` for
``node_embed``; a row's norm is at most ``\sqrt{6\,\text{hidden} / (n + \text{hidden})}``,
below 1 once ``n > 5 hidden``): with the zero table of DGL's tutorial
(``table_init: zeros``) and zero biases, ``z_v = 0`` at every featureless node at the first
step, where the normalisation's gradient ``~1/ε`` is 10^12 and wrecks Adam's second moments.
``normalize: false`` is the paper's operator as written: nothing bounds it (its Lipschitz
constant is that of the learned weights, :func:`operator_lipschitz_bound`), and on Chains its
table grows until it overflows float32.

**The guard** (both variants): a training step whose table has an entry that is not finite or
exceeds ``table_limit`` in magnitude (default 10^6, far above the bound, far below float32's
3.4·10^38) gives NaN logits, computed on the device without a host read; the shared loop stops
such a run with a ``ValueError`` at that epoch and scores none of its epochs (the model's
``divergence`` note), so a diverging run is never reported from an epoch before its overflow.

**Damped fixed-point update** of a set ``S`` of nodes (the SSE paper; ``α`` the weight of the new
value, the authors' ``UpdateEmbedding``: ``0.9 · new + 0.1 · old``):

.. math::

    h_v \leftarrow (1 - \alpha)\, h_v + \alpha\, T_\Theta[\{h_u\}]_v \qquad v \in S,

every ``v ∈ S`` computed from the same table, then written (the authors' batch update).

**Stochastic alternating schedule** (the SSE paper's algorithm): the table ``H`` persists across
training steps (a buffer of this module, ``table``, initialised by ``table_init``); each training
step is

1. ``updates`` (``n_h``) sampled fixed-point updates: each draws ``update_batch`` nodes from all
   nodes and applies the damped update to them (no gradient);
2. one parameter update (``n_f = 1``, the authors' ``f_iter 1``) on ``batch_size`` sampled
   labelled nodes: the loss of ``V T_Θ[\{h_u\}]_v`` with ``H`` held fixed, so the gradient
   reaches ``W_1, W_2, V`` (and a learned input, below) through one application of the
   operator, not through the iterations that produced ``H`` (the paper's steady-state
   gradient; the tutorial's ``L_StochasticSteadyState``).

Sampling as the authors' ``DataProvider``: consecutive batches of a random permutation,
reshuffled when the next batch would run past its end; a batch at least as large as the set
takes the whole set. Here step 1 runs in the train-mode ``forward`` and step 2's batch comes
from :meth:`SSE.loss_nodes`, which the shared loop calls before each training step; the optimiser
step is the loop's. The train-mode forward computes the logits of that batch only (the other
rows are 0 and read by nothing), and a batch's neighbour sums cost its own edges on the CPU
(:func:`aggregate`).

**Prediction** (eval mode, the authors' ``TestLoop``): ``V T_Θ[\{h_u\}]_v + c`` on the current
table, without changing it; ``eval_sweeps = k > 0`` first runs ``k`` full damped sweeps
(every node at once) on a copy of the table.

Without node features (Amazon) ``embedding = d > 0`` learns a ``d``-dim input ``x_v`` per node
(the authors' ``init_w`` table; the paper's "we learn a 128-dim feature vector for each node"
for every model), trained through ``x_v`` and the neighbours' ``x_u`` in ``T_Θ``.

Not taken from the authors' C++ code (``Hanjun-Dai/steady_state_embedding``): its per-task
operators, which differ from the paper's (Amazon: ``normalize(W [mean h_u, 1])``, no features;
the chains-connectivity task: ``normalize(tanh(mean h_u))`` with no weights), its gradient
steps on the embedding table itself (here the table is the iteration's state only, as in the
paper), and its optimiser's clipping of the global gradient norm at 5 (``graphnn``'s
``IOptimizer`` default; it bounds a parameter step, not the table, which the normalisation
bounds). :meth:`SSE.solve_` runs full damped sweeps to a tolerance (the fixed point the schedule
approaches; tests).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from twirls.models.config import ModelConfig, check
from twirls.models.graph_ops import GraphOps, SparseMatrix

AGGREGATES = ("sum", "mean")
TABLE_INITS = ("glorot", "zeros")


@dataclass(frozen=True)
class SSEConfig(ModelConfig):
    """SSE hyperparameters (the ``model_cfg`` keys of ``model: sse``).

    Defaults: the paper's operator (sum over neighbours) kept bounded as the authors' code
    keeps it (each ``T`` output L2-normalised, a Glorot-uniform table) with the numbers of
    the authors' run scripts (``code/fit_algo/connectivity/connect.sh``,
    ``code/multilabel/run.sh``): ``α = 0.9``, batches of 128, ``v_iter 10`` updates per step.
    ``normalize: false`` is the paper's operator as written, which nothing bounds (the table
    guard, ``table_limit``, stops such a run when its table leaves every bound).
    """

    MODEL: ClassVar[str] = "SSE"

    hidden: int = 16  # width of h_v and of T's inner layer (the authors' n_embed = n_hidden)
    embedding: int = 0  # d > 0: learn a d-dim input x_v per node (no features; needs num_nodes)
    alpha: float = 0.9  # damping: h <- (1 - alpha) h + alpha T(h), 0 < alpha <= 1
    aggregate: str = "sum"  # "sum" (the paper) | "mean" (the authors' runs, -avg 1)
    normalize: bool = True  # L2-normalise each T output (the authors' code: L2ColNorm)
    table_init: str = "glorot"  # "glorot" (the authors' GetVar) | "zeros" (DGL's tutorial)
    table_limit: float = 1e6  # stop the run once some |h_v[i]| exceeds this (or is not finite)
    updates: int = 10  # n_h: sampled fixed-point updates per training step (v_iter)
    update_batch: int = 128  # nodes per fixed-point update (0: all nodes)
    batch_size: int = 128  # labelled nodes per parameter update (0: all of them)
    eval_sweeps: int = 0  # full damped sweeps on a copy of the table before predicting


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Cycler:
    """Batches of ``batch`` positions out of ``range(size)``: consecutive slices of a random
    permutation, a new permutation when the next slice would run past its end (the authors'
    ``DataProvider::SampleNodes``); ``batch >= size`` (or 0) gives ``arange(size)`` every time.
    Permutations are drawn on ``device`` from torch's generator there (seeded runs repeat)."""

    def __init__(self, size: int, batch: int, device: torch.device) -> None:
        self.size, self.device = int(size), device
        self.batch = self.size if batch <= 0 or batch >= size else int(batch)
        self.perm: Tensor | None = None
        self.pos = 0

    def next(self) -> Tensor:
        if self.batch == self.size:
            return torch.arange(self.size, device=self.device)
        if self.perm is None or self.pos + self.batch > self.size:
            self.perm = torch.randperm(self.size, device=self.device)
            self.pos = 0
        out = self.perm[self.pos:self.pos + self.batch]
        self.pos += self.batch
        return out


class SSE(nn.Module):
    """SSE for node classification (see module doc); hyperparameters :class:`SSEConfig`.

    Args:
        in_dim: feature width (ignored with ``cfg.embedding > 0``).
        out_dim: classes (or labels of a multi-label task).
        cfg: the hyperparameters.
        num_nodes: the graph's node count: rows of the persistent embedding table (required).

    Attributes:
        table: ``(num_nodes, hidden)`` buffer, the persistent embeddings ``H``.
        last_update_nodes: the node batches of the latest training step's fixed-point updates.
        last_loss_nodes: the labelled batch of the latest :meth:`loss_nodes`.

    Shapes: ``forward(ops, x)``: ``x (n, in_dim)`` (``None`` with ``embedding``) →
    ``(n, out_dim)``.
    """

    own_embedding = True  # `embedding` is its own learned input (build_model does not wrap it)
    #: why a non-finite training loss means divergence: ``train_run`` then stops the run there
    #: and scores none of its epochs (the train-mode forward makes the loss NaN, see forward)
    divergence = ("the embedding table has left |h| <= table_limit or holds a non-finite "
                  "entry: no steady state (normalize: true keeps every row's norm <= 1)")

    def __init__(self, in_dim: int, out_dim: int, cfg: SSEConfig | None = None,
                 num_nodes: int | None = None) -> None:
        super().__init__()
        cfg = cfg or SSEConfig()
        check(_is_int(cfg.hidden) and cfg.hidden >= 1, "SSE",
              f"hidden must be an integer >= 1, got {cfg.hidden!r}")
        check(_is_int(cfg.embedding) and cfg.embedding >= 0, "SSE",
              f"embedding must be an integer >= 0, got {cfg.embedding!r}")
        check(isinstance(cfg.alpha, int | float) and not isinstance(cfg.alpha, bool)
              and 0.0 < cfg.alpha <= 1.0, "SSE", f"alpha must be in (0, 1], got {cfg.alpha!r}")
        check(isinstance(cfg.normalize, bool), "SSE",
              f"normalize must be true or false, got {cfg.normalize!r}")
        check(cfg.aggregate in AGGREGATES, "SSE",
              f"aggregate must be one of {', '.join(AGGREGATES)}, got {cfg.aggregate!r}")
        check(cfg.table_init in TABLE_INITS, "SSE",
              f"table_init must be one of {', '.join(TABLE_INITS)}, got {cfg.table_init!r}")
        check(isinstance(cfg.table_limit, int | float) and not isinstance(cfg.table_limit, bool)
              and 0.0 < cfg.table_limit < math.inf, "SSE",
              f"table_limit must be a finite number > 0, got {cfg.table_limit!r}")
        for key in ("updates", "update_batch", "batch_size", "eval_sweeps"):
            value = getattr(cfg, key)
            check(_is_int(value) and value >= 0, "SSE",
                  f"{key} must be an integer >= 0, got {value!r}")
        check(num_nodes is not None and num_nodes >= 1, "SSE",
              "the embedding table has one row per node: pass num_nodes")
        self.cfg = cfg
        self.embedding: nn.Parameter | None = None
        if cfg.embedding:
            self.embedding = nn.Parameter(torch.empty(int(num_nodes), cfg.embedding))
            nn.init.normal_(self.embedding, 0.0, 1e-3)  # as NodeTable / TWIRLS' embedding
            in_dim = cfg.embedding
        check(in_dim >= 1, "SSE", "no node features: set `embedding: <dim>` to learn an input "
              "per node")
        self.in_dim, self.hidden = int(in_dim), cfg.hidden
        self.w2 = nn.Linear(2 * self.in_dim + cfg.hidden, cfg.hidden)  # [x_v, ⊕h_u, ⊕x_u]
        self.w1 = nn.Linear(cfg.hidden, cfg.hidden)
        self.out = nn.Linear(cfg.hidden, out_dim)
        for lin in (self.w2, self.w1, self.out):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)
        self.register_buffer("table", torch.zeros(int(num_nodes), cfg.hidden))
        if cfg.table_init == "glorot":  # the authors' GetVar: U(±sqrt(6 / (rows + cols)))
            bound = math.sqrt(6.0 / (int(num_nodes) + cfg.hidden))
            nn.init.uniform_(self.table, -bound, bound)
        self._update_cycler: _Cycler | None = None
        self._loss_cycler: _Cycler | None = None
        self._loss_rows: Tensor | None = None
        self.last_update_nodes: list[Tensor] = []
        self.last_loss_nodes: Tensor | None = None

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int, out_dim: int,
                    num_nodes: int | None = None) -> SSE:
        return cls(in_dim, out_dim, SSEConfig.from_mapping(cfg), num_nodes=num_nodes)

    # ------------------------------------------------------------------ the operator
    def adjacency(self, ops: GraphOps) -> SparseMatrix:
        """``A`` (``aggregate: sum``) or ``D⁻¹ A`` (``mean``; isolated nodes: a zero row)."""
        mode = self.cfg.aggregate

        def build() -> SparseMatrix:
            if mode == "sum":
                return ops.matrix(1.0, 0.0, symmetric=True)
            inv = 1.0 / ops.deg.clamp(min=1.0)
            return ops.matrix(inv[ops.dst], 0.0)

        return ops.cached(("sse_adjacency", mode, ops.dtype), build)

    def inputs(self, x: Tensor | None) -> Tensor:
        """``x_v`` for every node: the learned table (``embedding``) or the features."""
        if self.embedding is not None:
            if x is not None:
                raise ValueError("SSE: built with `embedding` (a learned input per node), so it "
                                 f"takes no features; got x of shape {tuple(x.shape)}")
            return self.embedding
        if x is None:
            raise ValueError("SSE: x is None (dataset without node features); set "
                             "`embedding: <dim>` in the model config to learn node inputs")
        return x

    def operands(self, ops: GraphOps, x: Tensor | None) -> tuple[Tensor, SparseMatrix]:
        """The inputs (:meth:`inputs`) and the aggregation matrix of a graph the table fits."""
        if ops.n != self.table.shape[0]:
            raise ValueError(f"SSE: the table has {self.table.shape[0]} rows but the graph has "
                             f"{ops.n} nodes")
        return self.inputs(x), self.adjacency(ops)

    def operator(self, adj: SparseMatrix, h: Tensor, x: Tensor, rows: Tensor | None = None,
                 agg_x: Tensor | None = None) -> Tensor:
        """``T_Θ[{h_u}]_v`` for the nodes ``rows`` (all if ``None``), in that order.
        ``agg_x``: ``⊕_u x_u`` of those nodes when the caller has it (it does not change
        between the updates of one step)."""
        if agg_x is None:
            agg_x = aggregate(adj, x, rows)
        x_v = x if rows is None else x.index_select(0, rows)
        z = self.w1(F.relu(self.w2(torch.cat([x_v, aggregate(adj, h, rows), agg_x], dim=-1))))
        return F.normalize(z, dim=-1) if self.cfg.normalize else z

    def classify(self, z: Tensor) -> Tensor:
        return self.out(z)

    def damped(self, old: Tensor, new: Tensor) -> Tensor:
        """``(1 - α) old + α new``."""
        alpha = self.cfg.alpha
        return new if alpha == 1.0 else torch.lerp(old, new, alpha)

    # ------------------------------------------------------------------ fixed point
    def table_within_limit(self) -> Tensor:
        """0-dim bool on the table's device: every entry finite and ``|h_v[i]| <= table_limit``
        (False for NaN too)."""
        return self.table.abs().amax() <= self.cfg.table_limit

    @torch.no_grad()
    def residual(self, ops: GraphOps, x: Tensor | None, h: Tensor | None = None) -> float:
        """``max_v ||T_Θ[{h_u}]_v - h_v||_∞`` of the table (or of ``h``): 0 at a fixed point."""
        h = self.table if h is None else h
        xs = self.inputs(x)
        adj = self.adjacency(ops)
        return float((self.operator(adj, h, xs) - h).abs().max())

    @torch.no_grad()
    def sweep(self, ops: GraphOps, x: Tensor | None, h: Tensor, sweeps: int) -> Tensor:
        """``sweeps`` full damped updates (every node at once) of ``h``, returned (a new
        tensor; ``h`` is left as it is)."""
        xs = self.inputs(x)
        adj = self.adjacency(ops)
        agg_x = adj @ xs
        for _ in range(sweeps):
            h = self.damped(h, self.operator(adj, h, xs, agg_x=agg_x))
        return h

    @torch.no_grad()
    def solve_(self, ops: GraphOps, x: Tensor | None, *, tol: float = 1e-6,
               max_sweeps: int = 10_000) -> tuple[int, float]:
        """Full damped sweeps of the table in place until :meth:`residual` is below ``tol`` or
        ``max_sweeps``; returns ``(sweeps, residual)`` (reads the residual on the host every
        sweep)."""
        for done in range(max_sweeps + 1):
            res = self.residual(ops, x)
            if res < tol or done == max_sweeps:
                return done, res
            self.table.copy_(self.sweep(ops, x, self.table, 1))
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ the schedule
    def loss_nodes(self, train: Tensor) -> Tensor:
        """The labelled nodes of this training step's parameter update: ``batch_size`` of
        ``train`` (see :class:`_Cycler`), or all of them. The shared loop calls it before each
        training step and takes the loss on these rows; the next train-mode forward computes
        their logits only."""
        cyc = self._loss_cycler
        if cyc is None or cyc.size != train.numel() or cyc.device != train.device:
            cyc = self._loss_cycler = _Cycler(train.numel(), self.cfg.batch_size, train.device)
        rows = train if cyc.batch == cyc.size else train.index_select(0, cyc.next())
        self._loss_rows = self.last_loss_nodes = rows
        return rows

    @torch.no_grad()
    def update_table_(self, ops: GraphOps, x: Tensor | None) -> None:
        """Step 1 of the schedule: ``updates`` sampled damped updates of the table."""
        xs, adj = self.operands(ops, x)
        # off the CPU, the aggregates of a batch come from whole-graph products (gathering a
        # batch's edges needs their count on the host); ⊕x once per step there
        agg_x_all = None if xs.device.type == "cpu" else adj @ xs
        cyc = self._update_cycler
        if cyc is None or cyc.device != self.table.device:
            cyc = self._update_cycler = _Cycler(ops.n, self.cfg.update_batch,
                                                self.table.device)
        self.last_update_nodes = []
        for _ in range(self.cfg.updates):
            nodes = cyc.next()
            agg_x = None if agg_x_all is None else agg_x_all.index_select(0, nodes)
            new = self.operator(adj, self.table, xs, nodes, agg_x)
            self.table.index_copy_(0, nodes, self.damped(self.table.index_select(0, nodes), new))
            self.last_update_nodes.append(nodes)

    def forward(self, ops: GraphOps, x: Tensor | None) -> Tensor:
        xs, adj = self.operands(ops, x)
        if not self.training:
            h = self.table
            if self.cfg.eval_sweeps:
                h = self.sweep(ops, x, h, self.cfg.eval_sweeps)
            return self.classify(self.operator(adj, h, xs))
        self.update_table_(ops, x)
        rows, self._loss_rows = self._loss_rows, None
        z = self.operator(adj, self.table.detach(), xs, rows)
        # the table guard, on the device (no host read): once the table has left its bound the
        # step's logits are NaN, so is the loop's training loss, and train_run stops the run
        # (``divergence``); within the bound ``where`` passes the logits and gradients unchanged
        logits = torch.where(self.table_within_limit(), self.classify(z), torch.nan)
        if rows is None:
            return logits
        return logits.new_zeros(ops.n, logits.shape[1]).index_copy(0, rows, logits)


def aggregate(adj: SparseMatrix, y: Tensor, rows: Tensor | None = None) -> Tensor:
    """``(adj @ y)[rows]`` (all rows if ``None``), differentiable in ``y``. On the CPU the rows'
    edges are gathered from the CSR pattern (cost: their edges, not the graph's); elsewhere the
    whole product is taken and indexed (no host read)."""
    if rows is None:
        return adj @ y
    if y.device.type != "cpu":
        return (adj @ y).index_select(0, rows)
    ops = adj.ops
    starts = ops.crow.index_select(0, rows)
    counts = ops.crow.index_select(0, rows + 1) - starts
    seg = torch.repeat_interleave(torch.arange(rows.numel()), counts)
    first = torch.cumsum(counts, 0) - counts  # position of each row's first edge in the batch
    pos = starts.index_select(0, seg) + torch.arange(seg.numel()) - first.index_select(0, seg)
    weights = adj.values.detach().index_select(0, pos).to(y.dtype).unsqueeze(-1)
    gathered = y.index_select(0, ops.col.index_select(0, pos)) * weights
    return y.new_zeros(rows.numel(), y.shape[-1]).index_add(0, seg, gathered)


def operator_lipschitz_bound(model: SSE, ops: GraphOps) -> float:
    """An upper bound on the Lipschitz constant of ``H ↦ T_Θ[H]`` in the max-row-2-norm
    (without ``normalize``): ``||W_1||₂ ||W_2^h||₂ ||⊕||_∞`` with ``W_2^h`` the columns of
    ``W_2`` that read ``⊕h_u`` and ``||⊕||_∞`` the largest row sum of the aggregation (1 for
    the mean, the largest degree for the sum). Below 1: the damped iteration contracts, and
    every schedule of it converges to the unique fixed point (tests)."""
    d = model.in_dim
    w2h = model.w2.weight.detach()[:, d:d + model.hidden]
    row_sum = 1.0 if model.cfg.aggregate == "mean" else float(ops.deg.max()) if ops.n else 0.0
    return (float(torch.linalg.matrix_norm(model.w1.weight.detach(), 2))
            * float(torch.linalg.matrix_norm(w2h, 2)) * row_sum)


__all__ = ["AGGREGATES", "SSE", "SSEConfig", "aggregate", "operator_lipschitz_bound"]
