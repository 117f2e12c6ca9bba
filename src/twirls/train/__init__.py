"""The shared training protocol: device choice, full-batch training with model selection on
validation accuracy, and repeated runs over seeds."""

from twirls.train.device import cuda_status, pick_device
from twirls.train.loop import (
    RunResult,
    SeedsResult,
    TrainConfig,
    evaluate,
    run_seeds,
    set_seed,
    train_run,
)
from twirls.train.metrics import accuracy, multilabel_f1

__all__ = ["RunResult", "SeedsResult", "TrainConfig", "accuracy", "cuda_status", "evaluate",
           "multilabel_f1", "pick_device", "run_seeds", "set_seed", "train_run"]
