"""Batched versions of the models: ``K`` seeds of one configuration, one forward pass.

:func:`stack_models` takes ``K`` models built as today's runs build them (``set_seed(s)``,
``build_model()``), stacks their parameters (:class:`~twirls.train.batched.layers.Stacked`)
and returns the batched model, whose ``forward(ops, x, masks)`` gives ``(K, n, C)`` logits:
``logits[k]`` is what model ``k`` computes on ``x`` (``masks=None``: eval mode; else the
dropout masks of :class:`~twirls.models.masks.Masks`, drawn in the order the unbatched
forward draws them). Each forward mirrors its model's (same operations in the same order), with
the seeds stacked:

* TWIRLS-base: ``Y⁽⁰⁾ = f(X)`` per seed (``baddbmm``; on sparse features one ``O(nnz)``
  product a seed, and a two-layer ``f`` seed by seed in the cache), then the ``S`` steps
  ``Y ← c + M Y`` on ``[Y_1 … Y_K]`` (``n × K·C``): one sparse product a step for all seeds
  (:func:`twirls.models.propagation.propagate` itself, columns never mix without attention).
  TWIRLS* (``mlp_before = 0``): the cached propagation of ``X``, shared. The training
  forward may ask for the training nodes' logits alone (:meth:`Batched.forward_rows`); then
  ``Y⁽ˢ⁾`` there is one dense product with the ``S`` steps' rows
  (:func:`twirls.models.propagation.row_operator`), where that pays.
* TWIRLS with attention: the steps before the first attention layer as TWIRLS-base's; from
  there each seed re-weights its own graph (eq. 20), so the seeds' states are stacked as the
  rows of one graph made of ``K`` disjoint copies of the dataset's (:func:`copies`): one
  sparse product a step for all seeds still, and every attention weight, degree and step of
  seed ``k`` is that of its own copy (:func:`twirls.models.propagation.propagate_from`).
* MLP: the stacked layers. SGC: the cached ``Â^K X``, shared, then ``X [W_1 … W_K]``; the
  training forward on the training nodes' rows alone (:meth:`BatchedSGC.forward_rows`).
* GCN: ``Â (H W_k)`` per layer, one sparse product over all seeds.
* APPNP: the MLP, then ``Z ← (1-a) Â Z + a H`` on ``[Z_1 … Z_K]``.
* JKNet: GCN's layers; the jump (concatenation or max) on the ``(K, n, ·)`` layer outputs.
* DAGNN: the MLP, then ``[Z, Â Z, …, Â^K Z]`` on ``[Z_1 … Z_K]`` and each seed's scores.
  Both read bag-of-words ``x`` through the CSR copy their unbatched models cache
  (:func:`~twirls.models.baselines.gcnii.sparse_copy`), so input dropout draws the same entries.
* GCNII: the input layer as JKNet's (bag-of-words through the CSR copy), then per layer
  ``S_k = (1-α) Â H_k + α H⁽⁰⁾_k`` on each seed's own ``(n, h)`` slice (one sparse product a
  seed, :func:`~twirls.train.batched.layers.seeds_addmm`: the states never change layout) and
  ``(1-β_l) S_k + β_l S_k W_k`` for every seed in one ``baddbmm``; its optimizer keeps the
  model's two weight-decay groups (:meth:`Batched.param_groups`).
* The closed form (eq. 2): ``f`` as TWIRLS-base's, then one dense product of the cached
  ``(I + λL)⁻¹`` with ``[f_1 … f_K]``: the inverse is read once for all seeds (Cora, one core:
  7 columns 6.8 ms, 70 columns 8.9 ms). The training forward, and the evaluation forward of
  the scored nodes, may multiply only those rows of the inverse
  (:meth:`BatchedClosedForm.forward_rows`).

Not batched (a ``NotImplementedError`` names the reason): attention with ``prox_relu``,
``norm`` layers, learned node inputs (``embedding``), other models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor, nn

from twirls.models.baselines import APPNP, DAGNN, GCN, GCNII, MLP, SGC, JKNet
from twirls.models.baselines.appnp import _scaled
from twirls.models.baselines.gcnii import residual_adjacency, sparse_copy
from twirls.models.baselines.sgc import sgc_features
from twirls.models.closed_form import TWIRLSClosedForm
from twirls.models.graph_ops import GraphOps, SparseMatrix
from twirls.models.layers import FeedForward, is_sparse
from twirls.models.masks import Masks
from twirls.models.propagation import (
    PropagationSpec,
    propagate,
    propagate_from,
    row_operator,
    row_operator_pays,
)
from twirls.models.twirls import TWIRLS
from twirls.train.batched.layers import (
    SparseBatch,
    Stacked,
    as_batch,
    dropout,
    from_wide,
    graph_mm,
    linear,
    narrow_linear,
    relu_dropout,
    seeds_addmm,
    sparse_mlp,
    to_wide,
)


class Batched(nn.Module):
    """Base: ``K`` models' stacked parameters ``p`` and the first model as the template of the
    hyperparameters (kept out of the module tree: its own parameters are not trained)."""

    scores_rows = False  # under row_operator, its evaluation forward too reads forward_rows

    def __init__(self, models: Sequence[nn.Module]) -> None:
        super().__init__()
        self.p = Stacked(models)
        self.num = len(models)
        self.__dict__["template"] = models[0]

    def seed_state(self, k: int) -> dict[str, Tensor]:
        """Seed ``k``'s weights as the unbatched model's ``state_dict``."""
        return self.p.seed_state(k)

    def param_groups(self, weight_decay: float) -> list[dict]:
        """The optimizer's parameter groups, as the unbatched model's ``param_groups`` (one
        group with ``weight_decay`` unless the model has several weight-decay groups)."""
        return [{"params": list(self.parameters()), "weight_decay": weight_decay}]

    def keep_seeds(self, index: Tensor) -> list[tuple[nn.Parameter, nn.Parameter]]:
        """Only the seeds at positions ``index`` from now on (:meth:`Stacked.keep`)."""
        self.num = index.numel()
        return self.p.keep(index)

    def forward_rows(self, ops: GraphOps, x: Tensor, masks: Masks | None,
                     rows: Tensor) -> Tensor:
        """``forward(ops, x, masks)[:, rows]``, ``(K, r, C)``: the logits a loss on ``rows``
        reads (a model may compute only those, :meth:`BatchedTWIRLS.forward_rows`); with
        ``masks=None`` and :attr:`scores_rows` also the evaluation's logits on the scored
        nodes (:func:`~twirls.train.batched.trainer.batch_scores`)."""
        return self(ops, x, masks).index_select(1, rows)

    def input_feed_forward(self, prefix: str, ff: FeedForward, x: Tensor, p: float,
                           masks: Masks | None) -> Tensor | SparseBatch:
        """:meth:`feed_forward` on the input ``x`` after its dropout ``p``: the first block of
        every model here."""
        return self.feed_forward(prefix, ff, dropout(x, p, masks), masks)

    def feed_forward(self, prefix: str, ff: FeedForward, h: Tensor | SparseBatch,
                     masks: Masks | None) -> Tensor | SparseBatch:
        """:class:`FeedForward` ``ff`` (named ``prefix``) on every seed."""
        if ff.init_activate:
            h = relu_dropout(_dense(h), ff.dropout, masks)
        return self.mlp([f"{prefix}.lins.{i}" for i in range(len(ff.lins))], h, ff.dropout,
                        masks)

    def mlp(self, lins: Sequence[str], h: Tensor | SparseBatch, p: float,
            masks: Masks | None) -> Tensor | SparseBatch:
        """The linear layers named ``lins`` on every seed, ReLU and dropout ``p`` between two
        (a two-layer one on sparse features: :func:`sparse_mlp`)."""
        if len(lins) == 2 and (isinstance(h, SparseBatch) or is_sparse(h)):
            return sparse_mlp(h, *(self.p[f"{lin}.{part}"] for lin in lins
                                   for part in ("weight", "bias")), p, masks)
        for i, lin in enumerate(lins):
            h = linear(h, self.p[f"{lin}.weight"], self.p[f"{lin}.bias"])
            if i < len(lins) - 1:
                h = relu_dropout(h, p, masks)
        return h


def _dense(h: Tensor | SparseBatch) -> Tensor:
    if isinstance(h, SparseBatch):
        return h.to_dense()
    return h.to_dense() if is_sparse(h) else h


def _no_norms(*ffs: FeedForward) -> None:
    for ff in ffs:
        _no_norm_layers(ff.norms)


def _no_norm_layers(norms: nn.Module | None) -> None:
    if norms is not None:
        raise NotImplementedError("batched training: norm layers are not supported")


class BatchedTWIRLS(Batched):
    """TWIRLS-base / TWIRLS* (any variant, ``normalized``, ``prox_relu``) and TWIRLS with
    attention (any placement; not with ``prox_relu``)."""

    def __init__(self, models: Sequence[TWIRLS]) -> None:
        m = models[0]
        if m.embedding is not None:
            raise NotImplementedError("batched training: TWIRLS with embedding is not supported")
        if m.propagation.spec.has_attention and m.propagation.spec.prox_relu:
            raise NotImplementedError("batched training: TWIRLS with attention and prox_relu "
                                      "is not supported")
        _no_norms(m.mlp_before, m.mlp_after)
        super().__init__(models)

    def forward(self, ops: GraphOps, x: Tensor, masks: Masks | None = None) -> Tensor:
        m, spec = self.template, self.template.propagation.spec
        if m.cacheable:  # TWIRLS*: the model's own cache entry, shared by every seed
            dense = x.to_dense() if is_sparse(x) else x
            y = ops.cached_for(("twirls*", spec), x, lambda: m._propagate_no_grad(ops, dense))
        else:
            h = self.input_feed_forward("mlp_before", m.mlp_before, x, m.input_dropout, masks)
            h = as_batch(_dense(h), self.num)
            y = (attention_propagate(ops, h, spec) if spec.has_attention
                 else from_wide(propagate(ops, to_wide(h), spec), self.num))
        return as_batch(self.feed_forward("mlp_after", m.mlp_after, y, masks), self.num)

    def forward_rows(self, ops: GraphOps, x: Tensor, masks: Masks | None,
                     rows: Tensor) -> Tensor:
        """The logits on ``rows`` through the dense row operator ``Q_R``
        (:func:`~twirls.models.propagation.row_operator`, cached in ``ops`` for ``rows``):
        ``Y⁽ˢ⁾[rows] = Q_R [f_1 … f_K]``, one dense product instead of ``S`` sparse steps each
        way, where it pays (:func:`~twirls.models.propagation.row_operator_pays`) and nothing
        follows the propagation (``mlp_after = 0``); elsewhere :meth:`Batched.forward_rows`."""
        m, spec = self.template, self.template.propagation.spec
        if m.cacheable or len(m.mlp_after.lins) or not row_operator_pays(ops, spec,
                                                                          rows.numel()):
            return super().forward_rows(ops, x, masks, rows)
        h = self.input_feed_forward("mlp_before", m.mlp_before, x, m.input_dropout, masks)
        q = ops.cached_for(("row_operator", spec), rows, lambda: row_operator(ops, spec, rows))
        return from_wide(q @ to_wide(as_batch(_dense(h), self.num)), self.num)


def attention_propagate(ops: GraphOps, h: Tensor, spec: PropagationSpec) -> Tensor:
    """:func:`~twirls.models.propagation.propagate` with attention for every seed of
    ``h`` ``(K, n, C)``: the steps before the first attention layer on ``[h_1 … h_K]`` (one
    operator for all seeds), the rest on the ``K`` disjoint copies of the graph (:func:`copies`),
    seed ``k``'s state the rows of copy ``k``."""
    num, n, width = h.shape
    first = min(spec.attention.positions(spec.steps), default=spec.steps)
    y = h
    if first:
        y = from_wide(propagate(ops, to_wide(h), replace(spec, steps=first, attention=None)),
                      num)
    if first == spec.steps:
        return y
    union = copies(ops, num)
    out = propagate_from(union, h.reshape(num * n, width), y.reshape(num * n, width), first,
                         spec)
    return out.view(num, n, width)


def copies(ops: GraphOps, num: int) -> GraphOps:
    """The graph of ``num`` disjoint copies of ``ops``'s (copy ``k``: nodes ``k n … k n + n -
    1``), built once and cached in ``ops``."""

    def build() -> GraphOps:
        shift = (torch.arange(num, device=ops.src.device) * ops.n).repeat_interleave(
            ops.src.numel())
        src, dst = ops.src.repeat(num) + shift, ops.dst.repeat(num) + shift
        return GraphOps(src.cpu(), dst.cpu(), num * ops.n, device=ops.device, dtype=ops.dtype)

    return ops.cached(("copies", num), build)


class BatchedMLP(Batched):
    def __init__(self, models: Sequence[MLP]) -> None:
        _no_norms(models[0].net)
        super().__init__(models)

    def forward(self, ops: GraphOps, x: Tensor, masks: Masks | None = None) -> Tensor:
        m = self.template
        return as_batch(self.input_feed_forward("net", m.net, x, m.input_dropout, masks),
                        self.num)


class BatchedSGC(Batched):
    def forward(self, ops: GraphOps, x: Tensor, masks: Masks | None = None) -> Tensor:
        return linear(dropout(self.features(ops, x), self.template.dropout, masks),
                      self.p["lin.weight"], self.p["lin.bias"])

    def features(self, ops: GraphOps, x: Tensor) -> Tensor:
        """``Â^K X``, computed once and cached in ``ops`` (shared by every seed)."""
        if x.requires_grad:
            raise NotImplementedError("batched training: SGC on a learned input")
        steps = self.template.steps
        return ops.cached_for(("sgc", steps), x, lambda: sgc_features(ops, x, steps))

    def forward_rows(self, ops: GraphOps, x: Tensor, masks: Masks | None,
                     rows: Tensor) -> Tensor:
        """The logits on ``rows`` from those rows of ``Â^K X`` alone (a node's logits read its
        own row only), without dropout; with dropout :meth:`Batched.forward_rows` (its masks
        cover every node)."""
        if masks is not None and self.template.dropout > 0:
            return super().forward_rows(ops, x, masks, rows)
        return linear(self.features(ops, x).index_select(0, rows), self.p["lin.weight"],
                      self.p["lin.bias"])


class BatchedGCN(Batched):
    def __init__(self, models: Sequence[GCN]) -> None:
        _no_norm_layers(models[0].norms)
        super().__init__(models)

    def forward(self, ops: GraphOps, x: Tensor, masks: Masks | None = None) -> Tensor:
        m, adj, h = self.template, ops.gcn_norm(), x
        for k, lin in enumerate(m.lins):
            h = dropout(h, m.input_dropout if k == 0 else m.dropout, masks)
            h = self.gcn_linear(adj, h, f"lins.{k}", lin)
            if k < len(m.lins) - 1:
                h = torch.relu(h)
        return h

    def gcn_linear(self, adj: SparseMatrix, h: Tensor | SparseBatch, name: str,
                   lin: nn.Linear) -> Tensor:
        """``Â H W + b`` with the layer ``name`` (``lin``'s shape) of every seed: ``Â (H W)``
        on sparse features or where ``W`` narrows, else ``(Â H) W``."""
        weight, bias = self.p[f"{name}.weight"], self.p[f"{name}.bias"]
        if isinstance(h, SparseBatch) or is_sparse(h) or lin.out_features <= lin.in_features:
            h = graph_mm(adj, linear(h, weight))
        else:
            h = linear(graph_mm(adj, h), weight)
        return h + bias.unsqueeze(1)


class BatchedJKNet(BatchedGCN):
    """JKNet (without norm layers): its GCN layers as :class:`BatchedGCN`'s, the jumping
    knowledge on ``(K, n, ·)`` states."""

    def forward(self, ops: GraphOps, x: Tensor, masks: Masks | None = None) -> Tensor:
        m, adj = self.template, ops.gcn_norm()
        xs = sparse_copy(ops, x)
        first = linear(dropout(x if xs is None else xs, m.input_dropout, masks),
                       self.p["convs.0.weight"])
        h = torch.relu(graph_mm(adj, as_batch(first, self.num))
                       + self.p["convs.0.bias"].unsqueeze(1))
        hs = []
        for layer, conv in enumerate(m.convs[1:], start=1):
            dropped = dropout(h, m.dropout, masks)
            hs.append(dropped if m.jump_after_dropout else h)
            h = torch.relu(self.gcn_linear(adj, dropped, f"convs.{layer}", conv))
        hs.append(dropout(h, m.dropout, masks) if m.jump_after_dropout else h)
        z = torch.cat(hs, dim=-1) if m.mode == "cat" else torch.stack(hs).amax(dim=0)
        if not m.jump_after_dropout:
            z = dropout(z, m.dropout, masks)
        out = narrow_linear(z, self.p["out.weight"])  # Â (z W) where ``final_propagation``
        return (graph_mm(adj, out) if m.final_propagation else out) + self.p["out.bias"][:, None]


class BatchedDAGNN(Batched):
    """DAGNN (without norm layers): the MLP on every seed, then ``[Z, Â Z, …, Â^K Z]`` on
    ``[Z_1 … Z_K]`` (the model's own :meth:`AdaptiveAdjustment.representations`: one sparse
    product a step for all seeds) and each seed's adaptive adjustment."""

    def __init__(self, models: Sequence[DAGNN]) -> None:
        _no_norm_layers(models[0].norms)
        super().__init__(models)

    def forward(self, ops: GraphOps, x: Tensor, masks: Masks | None = None) -> Tensor:
        m = self.template
        xs = sparse_copy(ops, x)
        h = dropout(x if xs is None else xs, m.input_dropout, masks)
        z = as_batch(self.mlp([f"lins.{i}" for i in range(len(m.lins))], h, m.dropout, masks),
                     self.num)
        hs = m.adjust.representations(ops, to_wide(z))  # (n, steps+1, K·c): Â^j Z_k, block k
        n, depth, width = hs.shape
        # the scores σ(Â^j Z_k s_k + b_k) and their weighted sum, elementwise (products with a
        # K-wide or 1-wide side are slower on the CPU than the passes over memory)
        proj = self.p["adjust.proj.weight"].view(1, 1, self.num, -1)
        scores = torch.sigmoid((hs.view(n, depth, self.num, -1) * proj).sum(-1)
                               + self.p["adjust.proj.bias"].view(-1))  # (n, steps+1, K)
        out = (hs * scores.repeat_interleave(width // self.num, dim=-1)).sum(1)
        return from_wide(out, self.num)


class BatchedGCNII(Batched):
    """GCNII: ``H⁽⁰⁾ = ReLU(X W_in + b_in)`` on every seed (bag-of-words ``x`` through the CSR
    copy its unbatched model caches, so input dropout draws the same entries), then per layer
    ``S = (1-α) Â dropout(H) + α H⁽⁰⁾`` seed by seed on ``(K, n, h)`` (:func:`seeds_addmm`)
    and ``H ← ReLU((1-β_l) S_k + β_l S_k W_k)`` (one ``baddbmm``), and the output layer. Each
    ReLU and the dropout after it are one node (:func:`relu_dropout`, drawing the mask the
    next layer's dropout draws): the bits of the two apart, with fewer passes over the states
    (~8 % of a Cora epoch with :func:`seeds_addmm`, docs/costs.md)."""

    def forward(self, ops: GraphOps, x: Tensor, masks: Masks | None = None) -> Tensor:
        m, p = self.template, self.p
        xs = sparse_copy(ops, x)
        h0 = torch.relu(linear(dropout(x if xs is None else xs, m.dropout, masks),
                               p["lin_in.weight"], p["lin_in.bias"]))
        alpha = m.convs[0].alpha  # every layer's (GCNIIConfig.alpha; layers >= 1)
        adj, teleport = residual_adjacency(ops, alpha), h0 * alpha
        h = dropout(h0, m.dropout, masks)  # the dropped-out input of the next layer
        for layer, conv in enumerate(m.convs):
            s = seeds_addmm(adj, teleport, h)
            # Stacked keeps W_l transposed: (K, hidden, hidden) holds W_lᵀ
            weight = p[f"convs.{layer}.weight"].transpose(1, 2)
            h = relu_dropout(torch.baddbmm(s, s, weight, beta=1.0 - conv.beta, alpha=conv.beta),
                             m.dropout, masks)
        out = narrow_linear(h, p["lin_out.weight"])
        return out + p["lin_out.bias"].unsqueeze(1)

    def param_groups(self, weight_decay: float) -> list[dict]:
        """:meth:`GCNII.param_groups`: the convolutions with ``conv_weight_decay``, the
        input and output layers with ``weight_decay``."""
        named = list(zip(self.p.names, self.p.params, strict=True))
        convs = [q for name, q in named if name.startswith("convs.")]
        dense = [q for name, q in named if not name.startswith("convs.")]
        return [{"params": convs, "weight_decay": self.template.conv_weight_decay},
                {"params": dense, "weight_decay": weight_decay}]


class BatchedAPPNP(Batched):
    def __init__(self, models: Sequence[APPNP]) -> None:
        _no_norms(models[0].mlp)
        super().__init__(models)

    def forward(self, ops: GraphOps, x: Tensor, masks: Masks | None = None) -> Tensor:
        m = self.template
        h = as_batch(self.input_feed_forward("mlp", m.mlp, x, m.dropout, masks), self.num)
        adj = ops.cached(("appnp", m.alpha, ops.dtype), lambda: _scaled(ops, 1.0 - m.alpha))
        z = to_wide(h)
        teleport = m.alpha * z
        for _ in range(m.steps):
            z = adj.addmm(teleport, z)
        return from_wide(z, self.num)


class BatchedClosedForm(Batched):
    scores_rows = True

    def __init__(self, models: Sequence[TWIRLSClosedForm]) -> None:
        _no_norms(models[0].f)
        super().__init__(models)

    def forward(self, ops: GraphOps, x: Tensor, masks: Masks | None = None) -> Tensor:
        return from_wide(self.template.propagate(ops, self.wide_f(x, masks)), self.num)

    def forward_rows(self, ops: GraphOps, x: Tensor, masks: Masks | None,
                     rows: Tensor) -> Tensor:
        """The logits on ``rows`` from those rows of the inverse alone, ``M[rows] [f_1 … f_K]``
        (a node's logits read its own row of ``M``): ``|rows| / n`` of the dense product each
        way (Cora's 140 training nodes: 5 %, the 1,640 scored ones: 61 %). The rows of ``M``
        are cached for the training forward and for the evaluation's, one entry each."""
        wide = self.wide_f(x, masks)
        return from_wide(self.template.propagate_rows(ops, wide, rows, self.training), self.num)

    def wide_f(self, x: Tensor, masks: Masks | None) -> Tensor:
        """``[f_1 … f_K]``, ``(n, K·C)``: every seed's ``f`` side by side."""
        m = self.template
        return to_wide(as_batch(self.input_feed_forward("f", m.f, x, m.input_dropout, masks),
                                self.num))


BATCHED: dict[type, type[Batched]] = {TWIRLS: BatchedTWIRLS, MLP: BatchedMLP, SGC: BatchedSGC,
                                      GCN: BatchedGCN, APPNP: BatchedAPPNP,
                                      TWIRLSClosedForm: BatchedClosedForm, JKNet: BatchedJKNet,
                                      DAGNN: BatchedDAGNN, GCNII: BatchedGCNII}


def stack_models(models: Sequence[nn.Module]) -> Batched:
    """The batched model of ``models`` (one architecture, ``K`` initialisations)."""
    kinds = {type(m) for m in models}
    if len(kinds) != 1:
        raise ValueError(f"stack_models: one architecture expected, got {sorted(map(str, kinds))}")
    kind = kinds.pop()
    if kind not in BATCHED:
        raise NotImplementedError(f"batched training: {kind.__name__} is not supported (batched: "
                                  f"{', '.join(c.__name__ for c in BATCHED)})")
    return BATCHED[kind](models)
