"""What more seeds a split buy on Table 3: each model's runs at one seed a split (as the stages
run them) and at ``--seeds`` a split, and claim 5's comparisons (TWIRLS against each other
model) with their per-split standard error at both, written to
``reports/benchmarks/table3-seeds.json``.

``python -m twirls.bench.split_seeds [--datasets texas wisconsin cornell actor] [--seeds 5]
[--skip actor-gat actor-h2gcn] [--out reports/benchmarks/table3-seeds.json]``

Each Table 3 entry of a dataset (``params/table3.yaml``; Geom-GCN left out, its cells run its
authors' loop) trains as its stage trains it (:func:`twirls.train.experiment.run_experiment`
with ``train.batch``, ``train.row_operator`` and ``jobs``), with ``--seeds`` seeds on each of the
ten splits instead of the dataset's one (split ``i``: seeds ``1000 i + s``). "One seed a split"
is the first seed of each split of that same run (batched models round otherwise than the
committed one-run-a-seed cells, so their numbers differ from ``results.csv`` a little). The
error is the claims' (:func:`twirls.reports.claims.per_split_error`). Per model the record keeps
both means, the spread of a split's seeds (the mean over splits of their ``pstdev``) and the
seconds; per comparison the mean difference and its error at both counts. A dataset's record is
written when it is done.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from twirls.bench.batched_seeds import load
from twirls.bench.calibrate import reference_seconds
from twirls.bench.pipeline import bench_header
from twirls.config.entries import seeds_and_batch, train_entry
from twirls.data.registry import DatasetUnavailable, load_dataset
from twirls.files import write_json
from twirls.params import read_all
from twirls.reports.claims import RunScores, by_split, per_split_error
from twirls.train.cpu import configure_cpu
from twirls.train.experiment import run_experiment
from twirls.train.parallel import resolve_jobs

DATASETS = ("texas", "wisconsin", "cornell", "actor")
SUBJECT = "twirls"  # claim 5's model (the entry <dataset>-twirls)
LEFT_OUT = ("geom-gcn",)  # its authors' loop, one run a split


def entries_of(dataset: str, table3: dict[str, Any], skip: set[str]) -> dict[str, dict]:
    """``{model key: entry}`` of Table 3's entries on ``dataset`` (``<dataset>-<key>``)."""
    out = {}
    for name, exp in table3.items():
        key = name.removeprefix(f"{dataset}-")
        if exp["dataset"] == dataset and key not in LEFT_OUT and name not in skip:
            out[key] = exp
    return out


def first_seeds(scores: RunScores) -> RunScores:
    """The runs of each split's first seed."""
    first = {split: min((s for sp, s in scores if sp == split), key=int) for split, _ in scores}
    return {(split, seed): v for (split, seed), v in scores.items() if first[split] == seed}


def seed_spread(scores: RunScores) -> float:
    """The mean over splits of the ``pstdev`` of a split's seeds."""
    return statistics.fmean(statistics.pstdev(v) for v in by_split(scores).values())


def run_scores(exp: dict[str, Any], data: Any, seeds: int, params: dict[str, Any]
               ) -> tuple[RunScores, float]:
    """``{(split, seed offset): test score}`` of ``exp`` at ``seeds`` a split, and its seconds."""
    _, batch = seeds_and_batch(exp, params["train"])
    device = torch.device("cpu")
    start = time.perf_counter()
    result = run_experiment(exp, data, seeds, device, progress=False,
                            jobs=resolve_jobs(params["jobs"], device), batch=batch,
                            row_operator=bool(params["train"].get("row_operator", False)))
    seconds = time.perf_counter() - start
    return {(str(r.seed // 1000), str(r.seed % 1000)): 100 * r.test
            for r in result.runs}, seconds


def comparison(a: RunScores, b: RunScores) -> dict[str, Any]:
    """Mean difference of ``a`` and ``b`` and its per-split error, at one seed and at all."""
    out = {}
    for label, (x, y) in {"one_seed": (first_seeds(a), first_seeds(b)),
                          "all_seeds": (a, b)}.items():
        error = per_split_error(x, y)
        out[label] = {"difference": round(statistics.fmean(x.values())
                                          - statistics.fmean(y.values()), 3),
                      "error": None if error is None else round(error, 3)}
    one, every = out["one_seed"]["error"], out["all_seeds"]["error"]
    out["error_ratio"] = round(every / one, 3) if one and every is not None else None
    return out


def bench_dataset(dataset: str, args: argparse.Namespace, params: dict[str, Any]
                  ) -> dict[str, Any]:
    entries = entries_of(dataset, params["table3"], set(args.skip))
    if SUBJECT not in entries:
        raise SystemExit(f"split_seeds: no {dataset}-{SUBJECT} entry in params/table3.yaml")
    data = load_dataset(dataset, args.raw)
    record: dict[str, Any] = {"dataset": dataset, "seeds": args.seeds,
                              "splits": len(data.splits), "reference_s": reference_seconds(),
                              "load_start": load(), "models": {}, "comparisons": {}}
    scores = {}
    for key, exp in entries.items():
        print(f"split_seeds: {dataset}-{key}, {args.seeds} seeds a split", file=sys.stderr)
        scores[key], seconds = run_scores(train_entry(exp), data, args.seeds, params)
        first = first_seeds(scores[key])
        record["models"][exp["cells"]["table3"]] = {
            "mean_one_seed": round(statistics.fmean(first.values()), 3),
            "mean_all_seeds": round(statistics.fmean(scores[key].values()), 3),
            "runs": len(scores[key]), "seed_spread": round(seed_spread(scores[key]), 3),
            "seconds": round(seconds, 1)}
    subject = entries[SUBJECT]["cells"]["table3"]
    for key, exp in entries.items():
        if key != SUBJECT:
            record["comparisons"][f"{subject} - {exp['cells']['table3']}"] = comparison(
                scores[SUBJECT], scores[key])
    record["load_end"] = load()
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--seeds", type=int, default=5, help="seeds a split (default 5)")
    parser.add_argument("--skip", nargs="*", default=[],
                        help="Table 3 entries to leave out, e.g. actor-gat")
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    parser.add_argument("--out", type=Path, default=Path("reports/benchmarks/table3-seeds.json"))
    args = parser.parse_args(argv)
    if args.seeds < 2:
        parser.error("--seeds: at least 2 seeds a split (one is what the stages run)")
    params = read_all(Path("."))
    unknown = sorted(set(args.skip) - set(params["table3"]))
    if unknown:
        parser.error(f"--skip: {', '.join(unknown)} is no entry of params/table3.yaml")
    configure_cpu(params.get("threads"))  # as every stage
    old = json.loads(args.out.read_text()) if args.out.is_file() else {}
    out = bench_header("split_seeds", argv, (
        "Table 3 at one seed a split (the first of each) and at `seeds` a split from one run of "
        "each model: means, the spread of a split's seeds, and TWIRLS minus each model with the "
        "per-split standard error the claims use (twirls.reports.claims.per_split_error)"),
        params.get("threads"))
    out["records"] = [r for r in old.get("records", []) if r["dataset"] not in args.datasets]
    for dataset in args.datasets:
        try:
            out["records"].append(bench_dataset(dataset, args, params))
        except DatasetUnavailable as exc:
            parser.exit(1, f"split_seeds: {exc}\n")
        write_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
