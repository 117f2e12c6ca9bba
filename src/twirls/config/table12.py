"""The ``table12`` params group (``params/table12.yaml``; one stage, every model and seed of
Table 12) and its check. Each model's name and ``model_cfg`` are checked by building it
(:func:`twirls.cws.models.check_models`, called by the stages ``check-params`` and ``table12``),
so that the other stages, which check their params with this module, do not import the taggers.

Shape (every key required; ``models`` keys are the row labels of paper_numbers.csv)::

    table12:
      seeds: 3                      # runs per model (seeds 0..seeds-1)
      batch_size: 32                # sentences per mini-batch (one block-diagonal graph)
      bucket: 16                    # length-sorted chunks of 16 batches (0: no bucketing)
      lr: 1.0e-3                    # Adam
      weight_decay: 0.0
      epochs: {paper: 20, stand-in: 8}
      embedding_dim: 100            # learned embedding width of the stand-in (= fastNLP's 100)
      freeze_embedding: false       # fastNLP's StaticEmbedding default: fine-tuned
      stand_in_fraction: 0.8        # first 80% of the test-gold sentences train the stand-in
      models:
        TWIRLS-base: {model: twirls, model_cfg: {steps: 8, lam: 1.0, alpha: 0.5, ...}}
        bi-LSTM: {model: bilstm, model_cfg: {hidden: 256}}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twirls.config.checks import fail, keys, mapping, number

KEYS = ("seeds", "batch_size", "bucket", "lr", "weight_decay", "epochs", "embedding_dim",
        "freeze_embedding", "stand_in_fraction", "models")
PROTOCOLS = ("paper", "stand-in")


def check_table12(path: str, value: Any) -> None:
    """Raise :class:`~twirls.config.checks.ConfigError` (one line) on the first bad value of
    the group (each model's name and config: :func:`twirls.cws.models.check_models`)."""
    group = mapping(path, value)
    keys(path, group, KEYS)
    for key in KEYS:
        if key not in group:
            fail(path, "...", f"missing key {key!r}")
    number(f"{path}.seeds", group["seeds"], integer=True, lo=1)
    number(f"{path}.batch_size", group["batch_size"], integer=True, lo=1)
    number(f"{path}.bucket", group["bucket"], integer=True, lo=0)
    number(f"{path}.lr", group["lr"], lo=0, lo_open=True)
    number(f"{path}.weight_decay", group["weight_decay"], lo=0)
    number(f"{path}.embedding_dim", group["embedding_dim"], integer=True, lo=1)
    number(f"{path}.stand_in_fraction", group["stand_in_fraction"], lo=0, hi=1, lo_open=True,
           hi_open=True)
    if not isinstance(group["freeze_embedding"], bool):
        fail(f"{path}.freeze_embedding", group["freeze_embedding"], "expected true or false")
    epochs = mapping(f"{path}.epochs", group["epochs"])
    keys(f"{path}.epochs", epochs, PROTOCOLS)
    for protocol in PROTOCOLS:
        if protocol not in epochs:
            fail(f"{path}.epochs", dict(epochs), f"missing key {protocol!r}")
        number(f"{path}.epochs.{protocol}", epochs[protocol], integer=True, lo=1)
    models = mapping(f"{path}.models", group["models"])
    if not models:
        fail(f"{path}.models", models, "expected at least one model")
    for label, entry in models.items():
        where = f"{path}.models.{label}"
        keys(where, mapping(where, entry), ("model", "model_cfg"))


def train_config(group: Mapping[str, Any], protocol: str) -> dict[str, Any]:
    """The :class:`twirls.cws.train.CWSTrainConfig` keys for ``protocol``."""
    return {"epochs": int(group["epochs"][protocol]), "lr": float(group["lr"]),
            "weight_decay": float(group["weight_decay"]), "batch_size": int(group["batch_size"]),
            "bucket": int(group["bucket"])}
