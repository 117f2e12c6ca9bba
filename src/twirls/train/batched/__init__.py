"""Batched training of several seeds of one configuration in one process (issue 28): the seeds'
parameters stacked, every dense layer one batched product and every graph product one sparse
product over all seeds. :func:`run_seeds_batched` returns what
:func:`twirls.train.loop.run_seeds` returns."""

from twirls.models.masks import Masks
from twirls.train.batched.layers import Stacked
from twirls.train.batched.models import BATCHED, Batched, stack_models
from twirls.train.batched.trainer import (
    BatchConfig,
    Selection,
    batch_runs,
    run_batches,
    run_seeds_batched,
    train_batch,
)

__all__ = ["BATCHED", "BatchConfig", "Batched", "Masks", "Selection", "Stacked", "batch_runs",
           "run_batches", "run_seeds_batched", "stack_models", "train_batch"]
