"""Table 12: every model of the ``table12`` params group, every seed, as report cells.

Cells: table ``table12``, dataset ``pku``, the model labels of paper_numbers.csv, metric
``macro_f1`` (percent), mean ± population std over the seeds, per-seed scores in ``extra``.
Under the stand-in protocol every cell has ``status="stand-in"`` and a note saying what differs
from the paper; under the paper's protocol ``status`` is left to the report (reproduced /
differs) and the note lists the training settings the paper does not give.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from twirls.cells import Cell, run_rows
from twirls.config.table12 import train_config
from twirls.cws.models import build_tagger
from twirls.cws.protocols import PAPER, CWSData, Protocol, choose_protocol, load_cws
from twirls.cws.train import CWSRun, CWSTrainConfig, seeded_run
from twirls.data.pku import EMBEDDING_DIM
from twirls.train.loop import SeedsResult
from twirls.train.parallel import run_all

TABLE, DATASET, METRIC = "table12", "pku", "macro_f1"


def unstated(group: Mapping[str, Any], protocol: str) -> str:
    """The settings the paper does not give, as we chose them."""
    return (f"not in the paper, ours: Adam lr {group['lr']:g}, weight decay "
            f"{group['weight_decay']:g}, {group['epochs'][protocol]} epochs, batches of "
            f"{group['batch_size']} sentences, test score at the best-validation epoch, "
            f"{group['seeds']} seeds")


def protocol_note(data: CWSData, group: Mapping[str, Any]) -> str:
    facts = data.facts
    if data.protocol.name == PAPER:
        return (f"paper protocol: PKU training file (minus a fixed 10% of its sentences for "
                f"validation), full PKU test gold ({facts['sentences']['test']} sentences), "
                f"fastNLP cn-char-fastnlp-100d embeddings "
                f"({'frozen' if group['freeze_embedding'] else 'fine-tuned'}); "
                + unstated(group, "paper"))
    n_train, n_test = facts["stand_in_sentences"]
    return (
        f"STAND-IN, not the paper's protocol: trained on the first "
        f"{100 * group['stand_in_fraction']:g}% of the sentences of the PKU test gold "
        f"({n_train} sentences, of which a fixed 10% validate) and tested on the remaining "
        f"{n_test} sentences ({facts['characters']['test']} characters) instead of training on "
        f"the PKU training file and testing on the whole test gold; character embeddings "
        f"({group['embedding_dim']}-d) learned from random initialisation instead of fastNLP's "
        f"pretrained cn-char-fastnlp-100d; "
        + unstated(group, "stand-in")
        + f". Missing for the paper's protocol: {'; '.join(data.protocol.missing)}")


def model_runs(data: CWSData, group: Mapping[str, Any], label: str, device: torch.device,
               progress: bool = True) -> list[Callable[[], CWSRun]]:
    """One zero-argument run per seed of model ``label`` (each seeds what it uses)."""
    entry = group["models"][label]
    cfg = CWSTrainConfig.from_config(train_config(group, data.protocol.name))
    dim = EMBEDDING_DIM if data.embedding is not None else int(group["embedding_dim"])

    def build():
        return build_tagger(entry["model"], entry.get("model_cfg"), data.vocab_size, dim,
                            data.embedding, bool(group["freeze_embedding"]))

    return [partial(seeded_run, build, data.train, data.val, data.test, cfg, seed, device,
                    progress, desc=f"{label} seed {seed}")
            for seed in range(int(group["seeds"]))]


def cell_of(label: str, runs: list[CWSRun], data: CWSData, note: str) -> Cell:
    scores = [100 * r.test for r in runs]
    return Cell(TABLE, DATASET, label, METRIC, mean=statistics.fmean(scores),
                std=statistics.pstdev(scores), runs=len(runs),
                status="stand-in" if data.protocol.name != PAPER else "", note=note,
                extra={"protocol": data.protocol.name, "test_per_run": scores,
                       "rows": {"model": label, "graph": "clean", "variant": "",
                                "protocol": data.protocol.name},
                       "val_per_run": [100 * r.val for r in runs],
                       "best_epoch_per_run": [r.best_epoch for r in runs]})


def no_data_cells(group: Mapping[str, Any], reason: str) -> list[Cell]:
    return [Cell(TABLE, DATASET, label, METRIC, status="no-data", note=reason)
            for label in group["models"]]


def run_table12(group: Mapping[str, Any], root: Path, device: torch.device | str = "cpu",
                progress: bool = True, protocol: Protocol | None = None, jobs: int = 1
                ) -> tuple[list[Cell], dict[str, Any], list[dict[str, Any]]]:
    """Run every model of ``group`` on the PKU files in ``root``; ``(cells, metrics, rows)``
    (rows: every run, :mod:`twirls.cells`, with the ``protocol`` as a column). The runs spread
    over ``jobs`` worker processes (:func:`twirls.train.parallel.run_all`; same results).

    Raises :class:`twirls.data.registry.DatasetUnavailable` without the test gold (the caller
    writes :func:`no_data_cells`)."""
    start = time.perf_counter()
    protocol = protocol or choose_protocol(root)
    data = load_cws(root, protocol, float(group["stand_in_fraction"]))
    note = protocol_note(data, group)
    device = torch.device(device)
    labels = list(group["models"])
    seeds = int(group["seeds"])
    # every (model, seed) run in one pool, so the long ones (GCN-8, bi-LSTM) share the cores
    pending = [run for label in labels
               for run in model_runs(data, group, label, device, progress and jobs == 1)]
    done = run_all(pending, jobs, desc="table12: runs", progress=progress)
    cells, summary, rows = [], {}, []
    for i, label in enumerate(labels):
        runs = done[i * seeds:(i + 1) * seeds]
        cell = cell_of(label, runs, data, note)
        cells.append(cell)
        rows += run_rows(SeedsResult(runs), identity={"table": TABLE, "dataset": DATASET,
                                                      "graph": "clean", "model": label},
                         metric=METRIC, splits=["test"], device=str(device),
                         grid={"protocol": protocol.name})
        summary[label] = {"macro_f1_mean": cell.mean, "macro_f1_std": cell.std,
                          "runs": cell.runs,
                          "seconds_mean": statistics.fmean(r.seconds for r in runs),
                          "seconds_per_run": [round(r.seconds, 2) for r in runs]}
        if progress:
            tqdm.write(f"table12 {label}: macro F1 {cell.mean:.2f} ± {cell.std:.2f} "
                       f"({cell.runs} runs, {protocol.name})")
    metrics = {"status": "stand-in" if protocol.name != PAPER else "ok",
               "protocol": protocol.name, "device": str(device), **data.facts,
               "models": summary, "seconds": time.perf_counter() - start}
    return cells, metrics, rows
