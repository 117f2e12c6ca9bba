"""What every stage script shares: its declared params (checked against the schema), torch
threads, its device, the paths it owns, and one clear line instead of a traceback.

A stage script reads like DVC's example-get-started: parse its arguments, ``open_stage``, load
the data, call the library, write through :class:`StageOutputs`. Library code raises
``ValueError`` (or :class:`twirls.config.schema.ConfigError`, one of them) and
:class:`twirls.data.registry.DatasetDamaged`; :func:`entry` turns those into ``error: <stage>:
<message>`` and exit status 1.
"""

from __future__ import annotations

import argparse
import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twirls.cells import Cell, write_cells, write_runs
from twirls.config.schema import check_params
from twirls.params import load_params
from twirls.stages import cli
from twirls.stages.cli import Main
from twirls.train import journal
from twirls.train.checkpoint import save_checkpoint
from twirls.train.loop import SeedsResult
from twirls.train.outputs import write_history, write_metrics


@dataclass(frozen=True)
class StageOutputs:
    """The files one stage ``<group>@<name>`` owns: ``results/<group>/<name>.csv`` (its runs,
    one row each: :mod:`twirls.cells`), ``results/<group>/<name>.json`` (report
    cells), ``metrics/<group>/<name>.json`` (``dvc metrics``), ``plots/<group>/<name>.csv``
    (``dvc plots``) and, when it saves one, ``models/<group>/<name>.pt`` (a trained model); a
    stage without a name owns ``results/<group>.json`` and so on."""

    group: str
    name: str = ""
    root: Path = Path(".")

    @classmethod
    def extra(cls, group: str, table: str) -> StageOutputs:
        """Stage ``<group>-extra@<table>``: the curve of sweep ``group`` that fills the extra
        table ``table`` (the sweep's ``extras``)."""
        return cls(f"{group}-extra", table)

    @property
    def stage(self) -> str:
        """The stage's name in ``dvc.yaml``: ``<group>@<name>``, or ``<group>``."""
        return f"{self.group}@{self.name}" if self.name else self.group

    def path(self, kind: str, suffix: str) -> Path:
        if self.name:
            return self.root / kind / self.group / f"{self.name}{suffix}"
        return self.root / kind / f"{self.group}{suffix}"

    @property
    def results(self) -> Path:
        return self.path("results", ".json")

    @property
    def metrics(self) -> Path:
        return self.path("metrics", ".json")

    @property
    def plots(self) -> Path:
        return self.path("plots", ".csv")

    @property
    def runs(self) -> Path:
        return self.path("results", ".csv")

    def write_cells(self, cells: list[Cell]) -> None:
        write_cells(self.results, cells)

    def write_metrics(self, summary: dict[str, Any]) -> None:
        write_metrics(self.metrics, summary)

    def write_runs(self, rows: list[dict[str, Any]]) -> None:
        write_runs(self.runs, rows)

    def write(self, cells: list[Cell], summary: dict[str, Any],
              rows: list[dict[str, Any]]) -> None:
        """The stage's runs (:meth:`write_runs`), its cells (:meth:`write_cells`), then its
        metrics (:meth:`write_metrics`)."""
        self.write_runs(rows)
        self.write_cells(cells)
        self.write_metrics(summary)

    def write_history(self, history: list[dict[str, float]]) -> None:
        write_history(self.plots, history)

    @property
    def model(self) -> Path:
        return self.path("models", ".pt")

    def write_model(self, entry: dict[str, Any], result: SeedsResult | None, device: str,
                    reason: str = "") -> None:
        """``models/<group>/<name>.pt``: the first run of ``result`` and its weights
        (``result.first_model``), or, without a result, why there is none."""
        experiment = f"{self.group}.{self.name}"
        if result is None:
            save_checkpoint(self.model, experiment, entry, reason=reason)
            return
        first = result.runs[0]
        run = {"seed": first.seed, "epochs": len(first.history), "best_epoch": first.best_epoch,
               "train_at_best": first.train, "val_at_best": first.val,
               "test_at_best": first.test}
        save_checkpoint(self.model, experiment, entry, run=run, device=device,
                        state_dict=result.first_model)


def open_stage(stage: str) -> dict[str, Any]:
    """The params ``stage`` declares in ``dvc.yaml``, checked against the schema; the process
    flushes denormals to zero and uses ``threads`` torch threads when the stage declares it
    (:func:`twirls.train.cpu.configure_cpu`)."""
    from twirls.train.cpu import configure_cpu

    params = load_params(stage)
    check_params(params)
    configure_cpu(params.get("threads"))
    return params


def entry(stage_main: Main) -> Main:
    """:func:`twirls.stages.cli.entry` that also turns a damaged dataset
    (:class:`twirls.data.registry.DatasetDamaged`) into one line, and keeps the stage's finished
    runs in its journal (:mod:`twirls.train.journal`) until it has written its outputs: stopped
    part-way, it goes on from them."""
    from twirls.data.registry import DatasetDamaged

    name = cli.stage_name(stage_main)

    @functools.wraps(stage_main)
    def journaled(argv: list[str] | None = None) -> int:
        folder = journal.folder_for(name, sys.argv[1:] if argv is None else argv)
        with journal.opened(folder) as book:
            status = stage_main(argv)
        if status == 0:  # its outputs are written: its runs are no longer needed
            book.clear()
        return status

    return cli.entry(journaled, errors=(ValueError, DatasetDamaged))


def raw_out_parser(description: str | None) -> argparse.ArgumentParser:
    """The arguments of a stage that reads ``--raw`` data (default ``data/raw``) and writes its
    outputs under ``--out`` (default the repository root)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    parser.add_argument("--out", type=Path, default=Path("."))
    return parser


def attacked_parser(description: str | None) -> argparse.ArgumentParser:
    """The arguments of a stage that trains on the attacked graphs: ``--raw`` (clean data,
    default ``data/raw``) and ``--attacked`` (the perturbed graphs, default ``data/attacked``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    parser.add_argument("--attacked", type=Path, default=Path("data/attacked"))
    return parser
