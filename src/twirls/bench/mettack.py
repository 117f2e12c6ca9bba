"""Benchmark: DeepRobust's ``Metattack`` against our fast one on nettack-Cora, in one run.

Both start from identical inputs (our seeded surrogate's self-training labels, the same torch
random state), each in its own fresh process so that its peak memory (``ru_maxrss``) is its own.
DeepRobust runs only a few flips (18-29 s each on 2 cores), ours many more. Reports seconds per
flip, peak and per-flip resident memory, the speed-up, how many leading flips agree, and how
often our surrogate predicts the same label as DeepRobust's seeded surrogate.

    python -m twirls.bench.mettack            # -> reports/benchmarks/mettack.json
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch

from twirls.attack import surrogate as sur
from twirls.bench.calibrate import reference_seconds
from twirls.data import nettack
from twirls.files import write_json
from twirls.train.outputs import stack


def _load(raw: Path, dataset: str):
    data = nettack.load(raw, dataset)
    split = data.splits["seed15"]
    unlabeled = np.union1d(split.val.numpy(), split.test.numpy())
    return (data.meta["adj"], data.meta["features_sparse"], data.labels.numpy(),
            split.train.numpy(), unlabeled)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _worker(implementation: str, raw: Path, dataset: str, n_flips: int, targets: np.ndarray,
            rng_state: np.ndarray, threads: int) -> dict:
    """Run ``n_flips`` flips of one implementation in this (fresh) process."""
    torch.set_num_threads(threads)
    adj, features, labels, train, unlabeled = _load(raw, dataset)
    rss_before = _rss_mb()
    torch.set_rng_state(torch.from_numpy(rng_state))
    if implementation == "fast":
        from twirls.attack.metattack import Metattack

        attack = Metattack(adj, features, labels, train, unlabeled, targets)
        seconds, rss = [], []
        for _ in range(n_flips):
            t = time.perf_counter()
            attack.step()
            seconds.append(time.perf_counter() - t)
            rss.append(round(_rss_mb(), 1))
        flips = attack.flips
    else:
        from twirls.attack import deeprobust_ref

        result = deeprobust_ref.run_metattack(adj, features, labels, train, unlabeled, n_flips,
                                              torch.from_numpy(targets))
        flips, seconds, rss = result.flips, result.seconds, []
    return {
        "flips": [list(f) for f in flips],
        "seconds_per_flip": float(np.mean(seconds)),
        "seconds_per_flip_median": float(np.median(seconds)),
        "seconds": [round(s, 4) for s in seconds],
        "rss_before_attack_mb": round(rss_before, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "rss_after_each_flip_mb": rss,
    }


def _in_child(*args) -> dict:
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(_worker, *args).result()


def _deeprobust_surrogate_agreement(adj, features, labels, train, ours: torch.Tensor) -> float:
    """Share of nodes where DeepRobust's seeded surrogate predicts the same class as ours."""
    from twirls.compat import import_deeprobust

    gcn = import_deeprobust("graph.defense").GCN
    torch.manual_seed(15)
    model = gcn(nfeat=features.shape[1], nclass=int(labels.max()) + 1, nhid=16, dropout=0.5,
                with_relu=False, with_bias=True, device="cpu")
    model.fit(features, adj, labels, train)
    return float((model.output.argmax(1) == ours.argmax(1)).float().mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="nettack-cora", choices=nettack.NAMES)
    parser.add_argument("--raw", type=Path, default=None, help="default data/raw/<dataset>")
    parser.add_argument("--dr-flips", type=int, default=3)
    parser.add_argument("--fast-flips", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for both (1: robust when other jobs share the cores)")
    parser.add_argument("--out", type=Path, default=Path("reports/benchmarks/mettack.json"))
    args = parser.parse_args(argv)
    raw = args.raw or Path("data/raw") / args.dataset
    if not raw.is_dir():
        parser.error(f"--raw {raw}: no such folder; fetch it first "
                     f"(`dvc repro fetch@{args.dataset}`).")
    if args.dr_flips < 1 or args.fast_flips < args.dr_flips:
        parser.error("need 1 <= --dr-flips <= --fast-flips.")

    torch.set_num_threads(args.threads)
    adj, features, labels, train, _ = _load(raw, args.dataset)
    torch.manual_seed(15)
    log_probs = sur.train_gcn(adj, features, labels, train, sur.SURROGATE)
    targets = sur.self_training_labels(log_probs, labels, train).numpy()
    rng_state = torch.get_rng_state().numpy()

    common = (raw, args.dataset)
    fast = _in_child("fast", *common, args.fast_flips, targets, rng_state, args.threads)
    print(f"fast: {fast['seconds_per_flip']:.3f} s/flip", file=sys.stderr)
    dr = _in_child("deeprobust", *common, args.dr_flips, targets, rng_state, args.threads)
    print(f"deeprobust: {dr['seconds_per_flip']:.1f} s/flip", file=sys.stderr)
    reference_s = reference_seconds()  # the machine's speed, to compare records by
    agree = 0
    for a, b in zip(dr["flips"], fast["flips"], strict=False):
        if a != b:
            break
        agree += 1
    report = {
        "dataset": args.dataset, "nodes": int(adj.shape[0]), "edges": int(adj.sum() // 2),
        "torch_threads": args.threads, "cpu_count": os.cpu_count(),
        "load_average_at_end": list(os.getloadavg()), "stack": stack(),
        "reference_s": reference_s,
        "speedup": dr["seconds_per_flip"] / fast["seconds_per_flip"],
        "leading_flips_agree": agree, "flips_compared": len(dr["flips"]),
        "surrogate_prediction_agreement_with_deeprobust": _deeprobust_surrogate_agreement(
            adj, features, labels, train, log_probs),
        "deeprobust": dr, "fast": fast,
        "command": "python -m twirls.bench.mettack " + " ".join(argv or sys.argv[1:]),
    }
    write_json(args.out, report)
    print(f"{args.out}: DeepRobust {dr['seconds_per_flip']:.1f} s/flip, fast "
          f"{fast['seconds_per_flip']:.3f} s/flip ({report['speedup']:.0f}x); "
          f"first {agree}/{len(dr['flips'])} flips agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
