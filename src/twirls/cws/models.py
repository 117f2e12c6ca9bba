"""The models of Table 12: a character embedding in front of a tagger.

* ``mlp``, ``gcn``, ``twirls``: the project's models (:func:`twirls.models.build_model`) run on
  the batch's block-diagonal chain graph, with the embedding of every character as its node
  features.
* ``bilstm``: the paper's bi-LSTM baseline, "one LSTM layer and one linear transform layer": a
  bidirectional ``nn.LSTM`` over each sentence and a linear map of both directions to the tags.

The embedding is fastNLP's static ``cn-char-fastnlp-100d`` vectors (the paper's protocol;
fine-tuned unless ``freeze``, as fastNLP's ``StaticEmbedding`` defaults to
``requires_grad=True``) or learned from scratch (the stand-in).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pad_sequence

from twirls.config.checks import ConfigError, choose, locate, mapping
from twirls.cws.batching import SentenceBatch
from twirls.data.pku import TAGS
from twirls.models import TWIRLS, build_model
from twirls.models.config import ModelConfig, check

#: model names of the ``table12`` params group beyond :data:`twirls.models.MODELS`.
GRAPH_MODELS = ("mlp", "gcn", "twirls")
MODEL_NAMES = (*GRAPH_MODELS, "bilstm")


@dataclass(frozen=True)
class BiLSTMConfig(ModelConfig):
    """bi-LSTM hyperparameters (the ``model_cfg`` keys of ``model: bilstm``)."""

    MODEL: ClassVar[str] = "bi-LSTM"

    hidden: int = 256  # units per direction (the paper gives none)
    dropout: float = 0.0  # on the LSTM's output


class BiLSTMTagger(nn.Module):
    """One bidirectional LSTM layer (``hidden`` units per direction) and one linear layer.

    The two directions are two ``nn.LSTM``: one reads each sentence left to right, the other
    right to left (each sentence reversed within its own length, padding after it), which is
    what ``nn.LSTM(bidirectional=True)`` on a packed batch computes; on the CPU, backward through
    a packed sequence is ~25x slower than through these padded ones.

    Hyperparameters: :class:`BiLSTMConfig`.
    """

    def __init__(self, in_dim: int, out_dim: int, cfg: BiLSTMConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or BiLSTMConfig()
        hidden, dropout = cfg.hidden, cfg.dropout
        check(hidden >= 1, "bi-LSTM", f"hidden must be >= 1, got {hidden}")
        check(0.0 <= dropout < 1.0, "bi-LSTM", f"dropout must be in [0, 1), got {dropout}")
        self.forward_lstm = nn.LSTM(in_dim, hidden, batch_first=True)
        self.backward_lstm = nn.LSTM(in_dim, hidden, batch_first=True)
        self.linear = nn.Linear(2 * hidden, out_dim)
        self.dropout = nn.Dropout(dropout)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, in_dim: int,
                    out_dim: int) -> BiLSTMTagger:
        return cls(in_dim, out_dim, BiLSTMConfig.from_mapping(cfg))

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        """``x (n, d)``: the characters of the batch's sentences, concatenated; returns
        ``(n, out_dim)`` in the same order."""
        lengths = lengths.to(x.device)
        padded = pad_sequence(list(torch.split(x, lengths.tolist())), batch_first=True)
        steps = torch.arange(padded.shape[1], device=x.device)[None, :]
        valid = steps < lengths[:, None]
        # position t of a sentence of length L <-> L - 1 - t (padding stays in place)
        flip = torch.where(valid, lengths[:, None] - 1 - steps, steps)
        reversed_ = padded.gather(1, flip[..., None].expand(-1, -1, padded.shape[2]))
        ahead, _ = self.forward_lstm(padded)
        behind, _ = self.backward_lstm(reversed_)
        behind = behind.gather(1, flip[..., None].expand(-1, -1, behind.shape[2]))
        return self.linear(self.dropout(torch.cat([ahead, behind], dim=2)[valid]))


class CWSTagger(nn.Module):
    """``embedding → tagger``; ``forward(batch)`` gives ``(n, 4)`` B/M/E/S logits."""

    def __init__(self, embedding: nn.Embedding, tagger: nn.Module, name: str) -> None:
        super().__init__()
        self.embedding = embedding
        self.tagger = tagger
        self.name = name

    def forward(self, batch: SentenceBatch) -> Tensor:
        x = self.embedding(batch.tokens)
        if self.name == "bilstm":
            return self.tagger(x, batch.lengths)
        if isinstance(self.tagger, TWIRLS) and self.tagger.cacheable and x.requires_grad:
            # TWIRLS with nothing trainable before the propagation caches the propagated input
            # under no_grad (TWIRLS*); here the embedding in front is trained, so the gradient
            # must flow through the propagation: TWIRLS.forward's uncached branch.
            t = self.tagger
            return t.mlp_after(t.propagation(batch.ops, t.mlp_before(x)))
        return self.tagger(batch.ops, x)


def make_embedding(vocab_size: int, dim: int, pretrained: np.ndarray | None = None,
                   freeze: bool = False) -> nn.Embedding:
    """``vocab_size`` rows of ``dim``: the ``pretrained`` matrix, or ``N(0, 1)`` (torch's
    default) to be learned."""
    if pretrained is not None:
        if pretrained.shape != (vocab_size, dim):
            raise ValueError(f"pretrained embedding is {pretrained.shape}, expected "
                             f"{(vocab_size, dim)}")
        # a copy: fine-tuning updates the weight in place, and every run starts from the vectors
        return nn.Embedding.from_pretrained(torch.tensor(pretrained, dtype=torch.float32),
                                            freeze=freeze)
    embedding = nn.Embedding(vocab_size, dim)
    embedding.weight.requires_grad_(not freeze)
    return embedding


def build_tagger(name: str, cfg: Mapping[str, Any] | None, vocab_size: int, dim: int,
                 pretrained: np.ndarray | None = None, freeze: bool = False) -> CWSTagger:
    """The Table 12 model ``name`` (one of :data:`MODEL_NAMES`) over a ``vocab_size × dim``
    character embedding."""
    if name not in MODEL_NAMES:
        raise ValueError(f"table12: unknown model {name!r}; known: {', '.join(MODEL_NAMES)}")
    embedding = make_embedding(vocab_size, dim, pretrained, freeze)
    if name == "bilstm":
        tagger: nn.Module = BiLSTMTagger.from_config(cfg, dim, len(TAGS))
    else:
        tagger = build_model(name, cfg, dim, len(TAGS))
    return CWSTagger(embedding, tagger, name)


def check_models(path: str, models: Mapping[str, Any]) -> None:
    """Raise :class:`~twirls.config.checks.ConfigError` (one line) on the first model of the
    ``table12`` group (``path``: ``table12.models``) whose name is unknown or whose
    ``model_cfg`` does not build (a small trial tagger); the rest of the group:
    :func:`twirls.config.table12.check_table12`."""
    for label, entry in models.items():
        where = f"{path}.{label}"
        choose(f"{where}.model", entry.get("model"), MODEL_NAMES, "model")
        cfg = entry.get("model_cfg")
        if cfg is not None:
            mapping(f"{where}.model_cfg", cfg)
        try:
            build_tagger(entry["model"], cfg, 5, 4)
        except (ValueError, TypeError, KeyError) as exc:
            raise ConfigError(f"{locate(where + '.model_cfg')}: {exc}") from None
