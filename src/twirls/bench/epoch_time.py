"""Per-epoch training time of TWIRLS-base vs GCN at equal depth (appendix "Running Time").

    python -m twirls.bench.epoch_time [--rounds-cora 15] [--rounds-arxiv 5] [--threads N]

writes ``reports/benchmarks/epoch_time.json``. One epoch = forward + loss + backward + Adam step
(full batch). Models are timed round-robin (one epoch of each model per round, after two warm-up
epochs) so that load changes on a shared machine hit all of them alike; the median over rounds is
reported, with every sample. Settings:

* Cora (real data from ``data/raw/cora`` or ``--cora-root``; a random graph of Cora's size if
  neither is available): depth 2 and 16 (the paper's Cora setting: 16 steps, α = λ = 1,
  ``f`` = 2-layer MLP); GCN with as many layers as propagation steps, both hidden 64; plus the
  authors' ``dgl.nn.TWIRLSConv`` with the same settings;
* a random graph the size of ogbn-arxiv (169,343 nodes, 1,166,243 undirected edges, 128 features,
  40 classes), the paper's timing setup: 3 MLP layers and 3 propagation steps, GCN with 3 layers,
  hidden 512 (≈ 350k parameters each); also TWIRLS* (MLP after the propagation, cached) and an MLP.

The target is TWIRLS-base ≤ 1.1 × GCN; ``ratios`` gives TWIRLS-base / GCN per setting.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path
from typing import Any

import dgl
import torch
from torch import Tensor

from twirls.data.graph import GraphData
from twirls.models import GraphOps, build_model
from twirls.timing import EpochTimer, arxiv_sized, random_graph, time_round_robin

CORA = {"nodes": 2_708, "edges": 5_278, "features": 1_433, "classes": 7, "train": 140}


def load_cora(root: Path | None) -> tuple[dgl.DGLGraph, Tensor, Tensor, Tensor, str]:
    """``(graph, features, labels, train_idx, source)``; real Cora if its raw files exist."""
    data: GraphData | None = None
    source = ""
    try:
        if root is not None:
            from twirls.data import planetoid

            data, source = planetoid.load(root, "cora"), f"planetoid files in {root}"
        else:
            from twirls.data.registry import load_dataset

            data, source = load_dataset("cora"), "data/raw/cora (pipeline fetch)"
    except Exception as err:  # no raw files: fall back to a random graph of Cora's size
        source = f"random graph of Cora's size (real Cora unavailable: {err})"
    if data is not None and data.features is not None:
        x = data.features / data.features.sum(1, keepdim=True).clamp(min=1)
        return data.graph, x, data.labels, data.splits["public"].train, source
    gen = torch.Generator().manual_seed(1)
    g = random_graph(CORA["nodes"], CORA["edges"])
    x = (torch.rand(CORA["nodes"], CORA["features"], generator=gen) < 0.013).float()
    labels = torch.randint(0, CORA["classes"], (CORA["nodes"],), generator=gen)
    return g, x, labels, torch.arange(CORA["train"]), source


def _cases(g: dgl.DGLGraph, x: Tensor, labels: Tensor, train: Tensor,
           configs: list[tuple[str, str, dict[str, Any]]],
           reference: dict[str, Any] | None = None) -> list[tuple[EpochTimer, dict[str, Any]]]:
    """One :class:`EpochTimer` per config (with the config to report), plus DGL's layer."""
    ops = GraphOps.from_graph(g)
    classes = int(labels.max()) + 1
    cases = []
    for label, name, cfg in configs:
        torch.manual_seed(0)
        model = build_model(name, cfg, x.shape[1], classes)
        cases.append((EpochTimer(label, model, lambda m=model: m(ops, x), labels, train),
                      {"model": name, **cfg}))
    if reference is not None:
        from dgl.nn import TWIRLSConv

        torch.manual_seed(0)
        conv = TWIRLSConv(x.shape[1], classes, reference["hidden"], reference["steps"],
                          num_mlp_before=reference["mlp_before"], num_mlp_after=0,
                          alp=reference["alpha"], lam=reference["lam"])
        cases.append((EpochTimer("dgl_TWIRLSConv", conv, lambda c=conv: c(g, x), labels, train),
                      {"model": "dgl.nn.TWIRLSConv", **reference}))
    return cases


def _setting(title: str, dataset: dict[str, Any],
             cases: list[tuple[EpochTimer, dict[str, Any]]]) -> dict[str, Any]:
    results = []
    for timer, cfg in cases:
        summary = timer.summary()
        results.append({"model": timer.name, "config": cfg, "parameters": summary["parameters"],
                        "train_ms_median": 1000 * summary["train_seconds_median"],
                        "eval_ms_median": 1000 * summary["test_seconds_median"],
                        "train_ms_all": [round(1000 * t, 3) for t in timer.train_s]})
    by_name = {r["model"]: r for r in results}
    ratio = by_name["twirls_base"]["train_ms_median"] / by_name["gcn"]["train_ms_median"]
    line = ", ".join(f"{r['model']} {r['train_ms_median']:.1f} ms" for r in results)
    print(f"[{title}] {line}; TWIRLS-base / GCN = {ratio:.2f}", flush=True)
    return {"setting": title, "dataset": dataset, "twirls_base_over_gcn": ratio,
            "results": results}


def twirls_cfg(steps: int, mlp: int, hidden: int, after: bool = False) -> dict[str, Any]:
    return {"steps": steps, "lam": 1.0, "alpha": 1.0, "hidden": hidden,
            "mlp_before": 0 if after else mlp, "mlp_after": mlp if after else 0}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds-cora", type=int, default=15)
    parser.add_argument("--rounds-arxiv", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--cora-root", type=Path, default=None,
                        help="folder with ind.cora.* (default: data/raw/cora via the registry)")
    parser.add_argument("--skip-arxiv", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("reports/benchmarks/epoch_time.json"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    settings = []

    g, x, labels, train, source = load_cora(args.cora_root)
    cora = {"name": "cora", "source": source, "nodes": g.num_nodes(),
            "undirected_edges": g.num_edges() // 2, "features": x.shape[1]}
    for depth in (2, 16):
        configs = [("gcn", "gcn", {"layers": depth, "hidden": 64, "dropout": 0.5}),
                   ("twirls_base", "twirls", {**twirls_cfg(depth, 2, 64), "dropout": 0.5})]
        reference = {"steps": depth, "lam": 1.0, "alpha": 1.0, "hidden": 64, "mlp_before": 2}
        cases = _cases(g, x, labels, train, configs, reference)
        time_round_robin([timer for timer, _ in cases], args.rounds_cora)
        settings.append(_setting(f"cora, depth {depth}", cora, cases))

    if not args.skip_arxiv:
        g, x, labels, train = arxiv_sized()
        arxiv = {"name": "random graph of ogbn-arxiv's size", "nodes": g.num_nodes(),
                 "undirected_edges": g.num_edges() // 2, "features": x.shape[1]}
        configs = [("gcn", "gcn", {"layers": 3, "hidden": 512, "dropout": 0.5}),
                   ("twirls_base", "twirls", {**twirls_cfg(3, 3, 512), "dropout": 0.5}),
                   ("twirls_star", "twirls",
                    {**twirls_cfg(3, 3, 512, after=True), "dropout": 0.5}),
                   ("mlp", "mlp", {"layers": 3, "hidden": 512, "dropout": 0.5})]
        cases = _cases(g, x, labels, train, configs)
        time_round_robin([timer for timer, _ in cases], args.rounds_arxiv)
        settings.append(_setting("arxiv-sized random graph, depth 3", arxiv, cases))

    out = {
        "description": "per-epoch training time (forward+backward+Adam step, full batch), "
                       "median over round-robin rounds; eval = one no-grad forward",
        "target": "TWIRLS-base <= 1.1 x GCN at equal depth",
        "machine": {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "load_average_before": load_before, "load_average_after": os.getloadavg(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "dgl": dgl.__version__, "device": "cpu"},
        "settings": settings,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")
    return out


if __name__ == "__main__":
    main()
