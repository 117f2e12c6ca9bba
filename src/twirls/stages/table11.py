"""Stage ``table11``: Table 11, per-epoch training and test time of the paper's ten models.

The paper (appendix "Running Time") trains every model for 100 epochs on ogbn-arxiv on one
Tesla T4, all with three hidden layers and three propagation layers and about 351k parameters,
and reports the mean seconds per training epoch and per test pass. Params ``table11``::

    graph: auto          # auto: ogbn-arxiv when fetched, else a random graph of random_sizes
    random_sizes: {nodes: 169343, edges: 1166243, features: 128, classes: 40, train: 90941}
    epochs: 3            # timed training epochs per model (round-robin, after `warmup`)
    warmup: 1
    threads: 0           # torch threads (0: every core; the stage runs alone)
    lr: 0.01
    models:              # report label -> model and config (hidden sizes give ~351k parameters)
      GCN: {model: gcn, model_cfg: {layers: 3, hidden: 512, norm: batch}}

The work of these models is set by the graph's sizes (nodes, edges, features), not by which
nodes are linked; only memory locality differs. So a random graph of the same sizes stands in
for ogbn-arxiv when it cannot be fetched, and every cell's note says which graph and device
were used. Writes ``results/table11.csv`` (every timed epoch, one row each: :func:`timing_rows`),
``results/table11.json`` (cells:
``train_seconds`` and ``test_seconds``, medians over epochs, and ``parameters``) and
``metrics/table11.json`` (every sample).
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from twirls.cells import Cell
from twirls.data.registry import DatasetUnavailable, load_dataset
from twirls.models import GraphOps, build_model
from twirls.stages.skeleton import StageOutputs, entry, open_stage, raw_out_parser
from twirls.timing import EpochTimer, count_parameters, random_task, time_round_robin
from twirls.train.device import stage_device
from twirls.train.experiment import check_model

TABLE, DATASET = "table11", "ogbn-arxiv"


def timing_graph(cfg: dict[str, Any], raw: Path):
    """``(graph, features, labels, train_idx, description)`` per ``cfg["graph"]``."""
    mode = cfg.get("graph", "auto")
    if mode not in ("auto", "random"):
        raise ValueError(f"table11.graph must be 'auto' or 'random', got {mode!r}")
    why = "table11.graph: random"
    if mode == "auto":
        try:
            data = load_dataset(DATASET, raw)
            return (data.graph, data.features, data.labels, data.splits["time"].train,
                    "ogbn-arxiv")
        except DatasetUnavailable:
            why = "ogbn-arxiv not fetched"
    g, x, labels, train = random_task(**{k: int(v) for k, v in cfg["random_sizes"].items()})
    desc = (f"random graph of {g.num_nodes():,} nodes, {g.num_edges() // 2:,} edges, "
            f"{x.shape[1]} features ({why})")
    return g, x, labels, train, desc


def timing_cells(timers: list[EpochTimer], devices: dict[str, str], graph_desc: str,
                 threads: int) -> list[Cell]:
    """Table 11's cells: median seconds per training epoch and per test pass, and parameters.

    The paper's claim is each model's time relative to MLP's and GCN's on one device: every
    model is timed on the same one. On any graph but ogbn-arxiv itself (``graph_desc`` is
    :data:`DATASET` only then) every cell is a ``stand-in``: computed on a substitute, shown
    beside the paper's numbers but never judged."""
    cells = []
    substitute = graph_desc != DATASET
    status = "stand-in" if substitute else ""
    graph = "random" if substitute else DATASET
    for timer in timers:
        rows = {"model": timer.name, "graph": graph, "variant": ""}
        note = (f"{'stand-in: ' if substitute else ''}{graph_desc}; {devices[timer.name]} "
                f"({threads} threads); median over epochs")
        for metric, samples in (("train_seconds", timer.train_s), ("test_seconds", timer.test_s)):
            cells.append(Cell(TABLE, DATASET, timer.name, metric, statistics.median(samples),
                              statistics.pstdev(samples), len(samples), status=status,
                              note=note, extra={"rows": rows}))
        cells.append(Cell(TABLE, DATASET, timer.name, "parameters",
                          float(count_parameters(timer.model)), None, 1, status=status,
                          note=note, extra={"rows": rows}))
    return cells


def timing_rows(timers: list[EpochTimer], devices: dict[str, str], graph_desc: str
                ) -> list[dict[str, Any]]:
    """Every timed epoch as a row (:mod:`twirls.cells`): ``train_seconds`` and
    ``test_seconds`` per ``epoch`` (0-based, after the warm-up), and each model's
    ``parameters``; ``graph`` is ``ogbn-arxiv`` or ``random`` (a stand-in)."""
    graph = DATASET if graph_desc == DATASET else "random"
    rows = []
    for timer in timers:
        base = {"table": TABLE, "dataset": DATASET, "graph": graph, "model": timer.name,
                "variant": "", "split": "time", "seed": 0}
        for metric, samples in (("train_seconds", timer.train_s), ("test_seconds", timer.test_s)):
            rows += [{**base, "epoch": i, "metric": metric, "value": value,
                      "device": devices[timer.name]} for i, value in enumerate(samples)]
        rows.append({**base, "metric": "parameters",
                     "value": float(count_parameters(timer.model)),
                     "device": devices[timer.name]})
    return rows


@entry
def main(argv: list[str] | None = None) -> int:
    parser = raw_out_parser(__doc__)
    args = parser.parse_args(argv)
    params = open_stage("table11")
    cfg = params["table11"]
    threads = int(cfg.get("threads") or 0)
    torch.set_num_threads(threads if threads > 0 else max(1, os.cpu_count() or 1))

    g, x_cpu, labels_cpu, train_cpu, graph_desc = timing_graph(cfg, args.raw)
    for label, spec in cfg["models"].items():
        check_model(spec, f"table11.models.{label}")
    device = stage_device(params["device"], who="table11")
    ops, x, labels, train = (GraphOps.from_graph(g, device=device), x_cpu.to(device),
                             labels_cpu.to(device), train_cpu.to(device))
    timers, devices = [], {}
    for label, spec in cfg["models"].items():
        torch.manual_seed(0)
        try:
            model = build_model(spec["model"], spec.get("model_cfg"), x.shape[1],
                                int(labels_cpu.max()) + 1, num_nodes=g.num_nodes()).to(device)
        except (KeyError, ValueError) as exc:
            raise ValueError(f"table11.models.{label}: {exc}") from None
        timers.append(EpochTimer(label, model, lambda m=model, o=ops, h=x: m(o, h), labels,
                                 train, lr=float(cfg.get("lr", 0.01)), weight_decay=0.0))
        devices[label] = str(device)
    epochs, warmup = int(cfg["epochs"]), int(cfg.get("warmup", 2))
    with tqdm(total=epochs + max(3, epochs // 3), desc="timing rounds", file=sys.stderr) as bar:
        time_round_robin(timers, epochs, warmup=warmup, progress=lambda _: bar.update())

    threads = torch.get_num_threads()
    summaries = [timer.summary() for timer in timers]
    for s in summaries:
        print(f"{s['model']}: train {s['train_seconds_median']:.3f} s, "
              f"test {s['test_seconds_median']:.3f} s, {s['parameters']:,} parameters")
    StageOutputs("table11", root=args.out).write(
        timing_cells(timers, devices, graph_desc, threads),
        {"graph": graph_desc, "device": ", ".join(sorted(set(devices.values()))),
         "devices": devices, "threads": threads,
         "epochs": epochs, "warmup": warmup, "models": summaries},
        timing_rows(timers, devices, graph_desc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
