"""Stage ``attack``: the Mettack-perturbed Cora / Citeseer graphs of the paper's Table 4.

Setting (paper section "Adversarial Attack Results", GNNGuard's non-targeted attack, DeepRobust's
``examples/graph/test_mettack.py``): DeepRobust's nettack-format graph (largest connected
component), split 10/10/80 drawn with ``--seed``, a linearised GCN surrogate trained on the
training nodes, Meta-Self (``lambda_=0``), ``int(rate * edges)`` flips, no likelihood constraint.

Implementations:

* ``fast``       — :class:`twirls.attack.metattack.Metattack` (same flips as DeepRobust, ~100×
  faster); resumable: progress is checkpointed next to ``--out`` and resumed after a Ctrl-C.
  ``--device`` (params.yaml ``attack.device``) says where its dense ``n × n`` work runs: ``cpu``
  (the default: scipy, the engine that made the committed graphs) or ``auto`` / ``cuda``
  (torch on the GPU, for speed; it makes the CPU's first flips on the GPU tests' graph, but on a
  long attack a near-tie may break the other way, so the graph can differ from the CPU's);
* ``deeprobust`` — DeepRobust's own ``Metattack`` (hours on Cora: reference only);
* ``prognn``     — no attack: Pro-GNN's published ``<x>_meta_adj_<rate>.npz`` from ``--raw``
  with Pro-GNN's split.

Writes ``--out`` (see :mod:`twirls.attack.io`) with the perturbed adjacency, the split and
metadata: implementation, rate, seed, n_flips, and the accuracies of the linear
surrogate and of DeepRobust's evaluation GCN (the paper's "surrogate (GCN)" row) on the clean and
the attacked graph. Its bytes depend only on the graph (DVC reruns the stages that read it when
they change); the wall-clock seconds go to ``--metrics``.

    python -m twirls.stages.attack --dataset nettack-cora --raw data/raw/nettack-cora \\
        --rate 0.2 --seed 15 --implementation fast --out data/attacked/nettack-cora.npz
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from twirls.attack import surrogate as sur
from twirls.attack.io import AttackedGraph, save_attacked
from twirls.attack.metattack import Metattack
from twirls.data import nettack
from twirls.train.device import stage_device
from twirls.train.outputs import write_metrics

IMPLEMENTATIONS = ("fast", "deeprobust", "prognn")


def n_flips_between(clean: sp.spmatrix, attacked: sp.spmatrix) -> int:
    """Number of node pairs ``i < j`` whose edge differs."""
    return int(sp.triu(abs(sp.csr_matrix(clean) - sp.csr_matrix(attacked)), k=1).sum())


def evaluate(adj: sp.spmatrix, features: sp.spmatrix, labels: np.ndarray, split,
             seeds: list[int]) -> dict[str, float | list[float]]:
    """Test accuracies on ``adj``: the linear surrogate (first seed) and, for each seed, the
    evaluation GCN trained 200 epochs on ``split.train`` (``gcn``: final weights, DeepRobust's
    ``test()``; ``gcn_val``: validation-selected, DeepRobust ``fit(idx_val=...)`` as GNNGuard's
    evaluation, the protocol behind the paper's "surrogate (GCN)" row)."""
    train, val, test = (t.numpy() for t in (split.train, split.val, split.test))
    torch.manual_seed(seeds[0])
    linear = sur.accuracy(sur.train_gcn(adj, features, labels, train, sur.SURROGATE), labels, test)
    out: dict[str, float | list[float]] = {"linear_surrogate": linear}
    for key, idx_val in (("gcn", None), ("gcn_val", val)):
        accs = []
        for seed in seeds:
            torch.manual_seed(seed)
            log_probs = sur.train_gcn(adj, features, labels, train, sur.EVALUATION, idx_val)
            accs.append(sur.accuracy(log_probs, labels, test))
        out.update({key: accs, f"{key}_mean": float(np.mean(accs)),
                    f"{key}_std": float(np.std(accs))})
    return out


def run(args: argparse.Namespace, device: str | torch.device = "cpu") -> dict:
    """Attack (the ``fast`` one on ``device``), evaluate and write ``args.out``; returns the
    metadata."""
    data = nettack.load(args.raw, args.dataset)
    adj, features, labels = data.meta["adj"], data.meta["features_sparse"], data.labels.numpy()
    n_perturbations = int(args.rate * (adj.sum() // 2))
    if args.implementation == "prognn":
        split_name, split = "prognn", data.splits["prognn"]
    elif args.seed == 15:
        split_name, split = "seed15", data.splits["seed15"]
    else:
        split_name, split = f"seed{args.seed}", nettack.stratified_split(labels, seed=args.seed)
    train = split.train.numpy()
    unlabeled = np.union1d(split.val.numpy(), split.test.numpy())

    start = time.perf_counter()
    flips = np.zeros((0, 2), np.int64)
    if args.implementation == "prognn":
        attacked = nettack.load_prognn_meta_adj(args.raw, args.dataset, args.rate)
    elif args.implementation == "fast":
        np.random.seed(args.seed)
        torch.manual_seed(args.seed)  # same random stream as DeepRobust's example
        log_probs = sur.train_gcn(adj, features, labels, train, sur.SURROGATE)
        targets = sur.self_training_labels(log_probs, labels, train)
        attack = Metattack(adj, features, labels, train, unlabeled, targets, device=device)
        checkpoint = args.out.with_name(args.out.name + ".checkpoint.npz")
        attacked = attack.attack(n_perturbations, progress=not args.quiet, checkpoint=checkpoint)
        flips = np.asarray(attack.flips, np.int64)
    else:
        from twirls.attack import deeprobust_ref

        result, _ = deeprobust_ref.run_example(adj, features, labels, train, unlabeled,
                                               n_perturbations, seed=args.seed,
                                               progress=not args.quiet)
        attacked, flips = result.adj, np.asarray(result.flips, np.int64)
    seconds = time.perf_counter() - start

    seeds = list(range(args.seed, args.seed + args.eval_seeds))
    meta = {
        "dataset": args.dataset, "implementation": args.implementation, "rate": args.rate,
        "seed": args.seed, "split": split_name, "n_perturbations": n_perturbations,
        "n_flips": n_flips_between(adj, attacked),
        "nodes": int(adj.shape[0]), "clean_edges": int(adj.sum() // 2),
        "clean": evaluate(adj, features, labels, split, seeds),
        "attacked": evaluate(attacked, features, labels, split, seeds),
    }
    save_attacked(args.out, AttackedGraph(adj=attacked, idx_train=train,
                                          idx_val=split.val.numpy(), idx_test=split.test.numpy(),
                                          meta=meta, flips=flips))
    if args.implementation == "fast":
        checkpoint.unlink(missing_ok=True)
    if args.metrics is not None:  # timings: a metrics file no stage depends on
        write_metrics(args.metrics, {"seconds": round(seconds, 2), "n_flips": meta["n_flips"],
                                  "torch_threads": torch.get_num_threads(),
                                  "gcn_clean": meta["clean"]["gcn_mean"],
                                  "gcn_attacked": meta["attacked"]["gcn_mean"]})
    return {**meta, "seconds": seconds, "device": str(torch.device(device))}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True, choices=nettack.NAMES)
    parser.add_argument("--raw", type=Path, required=True,
                        help="folder with <x>.npz, <x>_prognn_splits.json, <x>_meta_adj_<rate>.npz")
    parser.add_argument("--rate", type=float, default=0.2, help="fraction of edges to flip")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--implementation", choices=IMPLEMENTATIONS, default="fast")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--metrics", type=Path, default=None,
                        help="JSON with the wall-clock seconds (kept out of --out, whose bytes "
                             "must depend only on the graph)")
    parser.add_argument("--eval-seeds", type=int, default=5,
                        help="seeds of the evaluation GCN (accuracy mean ± std)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: a flip is thousands of small ops, and "
                             "with other jobs on the cores more threads make it ~10x slower)")
    parser.add_argument("--device", default="cpu",
                        help="where the fast attack's dense work runs: cpu (default: the engine "
                             "behind the committed graphs), auto (CUDA if usable) or cuda[:N]; "
                             "the other implementations run on the CPU")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if not args.raw.is_dir():
        parser.error(f"--raw {args.raw}: no such folder; fetch the raw files first "
                     f"(`dvc repro fetch@{args.dataset}`).")
    if not 0.0 < args.rate <= 1.0:
        parser.error(f"--rate {args.rate}: must be in (0, 1], e.g. 0.2 for 20% of the edges.")
    if args.eval_seeds < 1 or args.threads < 1:
        parser.error("--eval-seeds and --threads must be at least 1.")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = (stage_device(args.device, who="attack") if args.implementation == "fast"
              else torch.device("cpu"))
    try:
        meta = run(args, device)
    except (FileNotFoundError, ValueError) as exc:
        sys.exit(f"attack: {exc}")
    except KeyboardInterrupt:
        sys.exit(f"attack: interrupted; {args.out} was not written. Rerun the same command to "
                 f"resume from {args.out.name}.checkpoint.npz.")
    clean, attacked = meta["clean"], meta["attacked"]
    print(f"{args.out}: {meta['n_flips']} flips in {meta['seconds']:.0f} s on {meta['device']}; "
          f"GCN test accuracy "
          f"{100 * clean['gcn_mean']:.2f} -> {100 * attacked['gcn_mean']:.2f} "
          f"(± {100 * attacked['gcn_std']:.2f}); validation-selected "
          f"{100 * clean['gcn_val_mean']:.2f} -> {100 * attacked['gcn_val_mean']:.2f} "
          f"(± {100 * attacked['gcn_val_std']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
