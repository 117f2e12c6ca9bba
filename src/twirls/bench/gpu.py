"""GPU benchmark: Table 11's models per epoch on an arxiv-sized graph, and the fast Mettack on Cora.

    python -m twirls.bench.gpu [--device cuda] [--out reports/benchmarks/gpu.json] [--quick]

writes one JSON file (atomically: a temporary file, then a rename) with

* ``device``: the device's name (``torch.cuda.get_device_name``), its memory, the torch / CUDA /
  cuDNN / Python / numpy versions;
* ``epoch_time``: seconds per training epoch (forward + loss + backward + Adam step, full batch) and
  per test pass (one no-grad eval-mode forward) of the ten models of the paper's Table 11,
  configured as in ``params/table11.yaml`` (``table11.models``, ~351k parameters each), on a random
  graph with ogbn-arxiv's sizes (169,343 nodes, 1,166,243 edges, 128 features, 40 classes; the work
  of these models depends on the sizes, not on which nodes are linked). Medians over round-robin
  rounds (one epoch of each model per round, after warm-up epochs), every sample kept, with the peak
  GPU memory of each model's warm-up epochs. Each model's times are divided by MLP's and by GCN's,
  next to the same ratios of the paper's T4 times (``src/twirls/reports/paper_numbers.csv``, table
  ``table11``): absolute seconds on another GPU do not compare, ratios do;
* ``mettack``: seconds per flip of the fast Mettack (:class:`twirls.attack.metattack.Metattack`,
  ``engine="torch"``: every product on the device) on nettack-Cora (``cora.npz`` found in
  ``--cora-raw``, ``data/raw/nettack-cora``, ``$TWIRLS_DATA_MIRROR`` or ``../shared/datasets``,
  checked against the manifest's sha256), else on a random graph with its sizes (2,485 nodes,
  5,069 edges, 1,433 binary features; the JSON says which), the peak GPU memory, and the same
  attack on the CPU (the default scipy engine, from the same random state) for a few flips:
  its seconds per flip and how many leading flips agree.

``--quick`` shrinks every part (a 1,000-node graph for the models, two timed epochs; two flips
on a random graph of an eighth of Cora's sizes) so that the whole benchmark runs on a CPU in
under a minute (``--device cpu --quick``: a smoke test of the same code, only the device
differs). Needs neither DVC nor DeepRobust.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
import yaml

from twirls.files import write_json
from twirls.models import GraphOps, build_model
from twirls.timing import ARXIV, EpochTimer, count_parameters, random_task, time_round_robin
from twirls.train.device import pick_device

REPO = Path(__file__).resolve().parents[3]
PAPER_CSV = Path(__file__).resolve().parents[1] / "reports" / "paper_numbers.csv"
TABLE = "table11"
BASELINES = ("MLP", "GCN")  # the ratios' denominators
#: nettack-Cora (largest connected component of gnn-meta-attack's cora.npz), the attacked graph
CORA = {"nodes": 2_485, "edges": 5_069, "features": 1_433, "classes": 7, "words_per_node": 18}
QUICK_SIZES = {"nodes": 1_000, "edges": 4_000, "features": 128, "classes": 40, "train": 500}
#: --quick: the attack on a random graph of an eighth of Cora's sizes
QUICK_CORA = {"nodes": 310, "edges": 634, "features": 180, "classes": 7, "words_per_node": 18}
DEFAULTS = {"epochs": 50, "warmup": 3, "test_epochs": 20, "flips": 100, "cpu_flips": 10}
QUICK = {"epochs": 2, "warmup": 1, "test_epochs": 2, "flips": 2, "cpu_flips": 2}


# ----------------------------------------------------------------------------- inputs
def timing_models(params: Path) -> tuple[dict[str, dict[str, Any]], float]:
    """``table11.models`` and ``table11.lr`` of a params file holding ``table11`` (e.g.
    ``params/table11.yaml``; read with PyYAML, no DVC)."""
    cfg = yaml.safe_load(Path(params).read_text())["table11"]
    return dict(cfg["models"]), float(cfg.get("lr", 0.01))


def paper_running_time(path: Path = PAPER_CSV) -> dict[str, dict[str, float]]:
    """Table 11 of the paper: ``{model: {"train_seconds", "test_seconds", "parameters"}}``."""
    out: dict[str, dict[str, float]] = {}
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            if row["table"] == TABLE:
                out.setdefault(row["model"], {})[row["metric"]] = float(row["mean"])
    return out


def ratios(seconds: dict[str, float | None], key: str) -> dict[str, dict[str, float | None]]:
    """``{model: {"<key>_to_mlp": s / s_MLP, "<key>_to_gcn": s / s_GCN}}`` (``None`` where a
    time is missing)."""
    out = {}
    for model, value in seconds.items():
        out[model] = {}
        for base in BASELINES:
            denominator = seconds.get(base)
            out[model][f"{key}_to_{base.lower()}"] = (
                None if value is None or not denominator else value / denominator)
    return out


# ----------------------------------------------------------------------------- the device
def device_info(device: torch.device) -> dict[str, Any]:
    """Name, memory and software versions of ``device``."""
    info: dict[str, Any] = {
        "type": device.type, "torch": torch.__version__, "cuda": torch.version.cuda,
        "python": platform.python_version(), "numpy": np.__version__,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(name=torch.cuda.get_device_name(device),
                    total_memory_bytes=int(props.total_memory),
                    capability=f"{props.major}.{props.minor}",
                    cudnn=torch.backends.cudnn.version())
    else:
        info.update(name=_cpu_name(), cpu_count=os.cpu_count(),
                    torch_threads=torch.get_num_threads())
    return info



def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: torch.device) -> int:
    """Start a peak-memory window; returns the bytes allocated now (0 off CUDA)."""
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    return int(torch.cuda.memory_allocated(device))


def _peak(device: torch.device) -> int | None:
    """Peak bytes allocated on ``device`` since :func:`_reset_peak` (``None`` off CUDA)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device))


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


# ----------------------------------------------------------------------------- epoch time
def time_models(models: dict[str, dict[str, Any]], sizes: dict[str, int], device: torch.device,
                *, epochs: int, warmup: int, test_epochs: int, lr: float,
                log: Callable[[str], None] = print) -> dict[str, Any]:
    """Seconds per training epoch and per test pass of every model (see module doc)."""
    start = time.perf_counter()
    g, x_cpu, labels_cpu, train_cpu = random_task(**sizes)
    classes = int(labels_cpu.max()) + 1
    ops = GraphOps.from_graph(g, device=device)
    x, labels, train = x_cpu.to(device), labels_cpu.to(device), train_cpu.to(device)
    which = "ogbn-arxiv's sizes" if sizes == ARXIV else "reduced sizes (--quick)"
    graph = {"description": f"random graph with {which} (twirls.timing.random_task)",
             **sizes, "undirected_edges": g.num_edges() // 2,
             "seconds_to_build": round(time.perf_counter() - start, 2)}
    rows: dict[str, dict[str, Any]] = {}
    timers: list[EpochTimer] = []
    for label, spec in models.items():
        row: dict[str, Any] = {"model": label, "name": spec["model"],
                               "config": spec.get("model_cfg") or {}}
        rows[label] = row
        torch.manual_seed(0)
        model = build_model(spec["model"], spec.get("model_cfg"), x.shape[1], classes,
                            num_nodes=g.num_nodes()).to(device)
        timer = EpochTimer(label, model, lambda m=model: m(ops, x), labels, train, lr=lr,
                           weight_decay=0.0)
        before = _reset_peak(device)
        try:  # warm-up here (not in time_round_robin) to measure each model's peak memory
            for _ in range(warmup):
                timer.train_epoch()
            timer.test_epoch()
        except RuntimeError as exc:  # e.g. CUDA out of memory: report it, time the others
            row.update(status="failed", reason=f"{type(exc).__name__}: {exc}"[:500])
            log(f"{label}: failed ({row['reason'][:200]})")
            del timer, model
            if device.type == "cuda":
                torch.cuda.empty_cache()
            continue
        row.update(status="timed", device=str(device), parameters=count_parameters(model),
                   memory_before_bytes=before if device.type == "cuda" else None,
                   peak_memory_bytes=_peak(device))
        timers.append(timer)
    if timers:
        time_round_robin(timers, epochs, warmup=0, test_epochs=test_epochs,
                         progress=lambda msg: log(f"  {msg}"))
    for timer in timers:
        rows[timer.name].update(
            train_seconds=statistics.median(timer.train_s),
            test_seconds=statistics.median(timer.test_s),
            train_seconds_all=[round(t, 6) for t in timer.train_s],
            test_seconds_all=[round(t, 6) for t in timer.test_s])

    paper = paper_running_time()
    for key in ("train", "test"):
        ours = ratios({m: r.get(f"{key}_seconds") for m, r in rows.items()}, key)
        theirs = ratios({m: t.get(f"{key}_seconds") for m, t in paper.items()}, key)
        for model, row in rows.items():
            row.setdefault("ratios", {}).update(ours[model])
            row.setdefault("paper_t4", {}).update(
                {f"{key}_seconds": paper.get(model, {}).get(f"{key}_seconds"),
                 **theirs.get(model, {f"{key}_to_{b.lower()}": None for b in BASELINES})})
    for model, row in rows.items():
        row["paper_t4"]["parameters"] = paper.get(model, {}).get("parameters")
    peaks = [r["peak_memory_bytes"] for r in rows.values() if r.get("peak_memory_bytes")]
    return {"graph": graph, "epochs": epochs, "warmup": warmup, "test_epochs": test_epochs,
            "lr": lr, "peak_memory_bytes": max(peaks) if peaks else None,
            "models": list(rows.values())}


# ----------------------------------------------------------------------------- Mettack
def _cora_candidates(cora_raw: Path | None) -> list[Path]:
    from twirls.data.fetch import MIRROR_ENV, entries_for

    mirror_path = next(e.mirror_path for e in entries_for("nettack-cora") if e.file == "cora.npz")
    out = []
    if cora_raw is not None:
        out.append(cora_raw / "cora.npz" if cora_raw.is_dir() else cora_raw)
    out.append(Path("data/raw/nettack-cora/cora.npz"))
    out.append(REPO / "data/raw/nettack-cora/cora.npz")
    if os.environ.get(MIRROR_ENV, "").strip():
        out.append(Path(os.environ[MIRROR_ENV].strip()) / mirror_path)
    out.append(REPO.parent / "shared" / "datasets" / mirror_path)
    return out


def attack_graph(cora_raw: Path | None = None, *, seed: int = 1,
                 random_sizes: dict[str, int] | None = None):
    """``(adj, features, labels, idx_train, idx_unlabeled, description)``: nettack-Cora with
    DeepRobust's ``seed15`` split if its ``cora.npz`` is found (and matches the manifest's
    checksum), else a random graph with its sizes and the same kind of split. With
    ``random_sizes``, a random graph of those sizes (``CORA``'s keys) without looking."""
    from twirls.data import nettack
    from twirls.data.fetch import entries_for, file_digest

    entry = next(e for e in entries_for("nettack-cora") if e.file == "cora.npz")
    kind, expected = entry.checksum.split(":", 1)
    tried = []
    for path in [] if random_sizes else _cora_candidates(cora_raw):
        if not path.is_file():
            tried.append(f"{path} (missing)")
            continue
        if file_digest(path, kind) != expected:
            tried.append(f"{path} (checksum differs from the manifest's)")
            continue
        adj_raw, attr, labels = nettack.read_npz(path)
        adj, keep = nettack.clean_adjacency(adj_raw)
        features, labels = attr[keep], np.asarray(labels[keep], dtype=np.int64)
        split = nettack.stratified_split(labels, seed=15)
        desc = {"dataset": "nettack-cora", "source": str(path)}
        break
    else:
        from twirls.timing import random_graph

        rng = np.random.default_rng(seed)
        sizes = random_sizes or CORA
        n, d = sizes["nodes"], sizes["features"]
        g = random_graph(n, sizes["edges"], seed=seed)
        src, dst = (t.numpy() for t in g.edges())
        adj = sp.csr_matrix((np.ones(len(src), np.float32), (src, dst)), shape=(n, n))
        features = sp.csr_matrix((rng.random((n, d)) < sizes["words_per_node"] / d)
                                 .astype(np.float32))
        labels = rng.integers(0, sizes["classes"], n).astype(np.int64)
        split = nettack.stratified_split(labels, seed=15)
        if random_sizes:
            desc = {"dataset": "random graph (reduced sizes, --quick)",
                    "source": "twirls.timing.random_graph"}
        else:
            desc = {"dataset": "random graph with nettack-Cora's sizes",
                    "source": "twirls.timing.random_graph (nettack-Cora's cora.npz not "
                              "found: " + "; ".join(tried) + ")"}
    train = split.train.numpy()
    unlabeled = np.union1d(split.val.numpy(), split.test.numpy())
    desc.update(nodes=int(adj.shape[0]), edges=int(adj.nnz // 2), features=int(features.shape[1]),
                train=len(train), unlabeled=len(unlabeled))
    return adj, sp.csr_matrix(features, dtype=np.float32), labels, train, unlabeled, desc


def _run_flips(attack, flips: int, device: torch.device) -> list[float]:
    seconds = []
    for _ in range(flips):
        _sync(device)
        start = time.perf_counter()
        attack.step()  # ends with a read of the argmax to the host
        _sync(device)
        seconds.append(time.perf_counter() - start)
    return seconds


def time_mettack(device: torch.device, *, flips: int, cpu_flips: int,
                 cora_raw: Path | None = None, random_sizes: dict[str, int] | None = None,
                 log: Callable[[str], None] = print) -> dict[str, Any]:
    """Seconds per flip of the fast Mettack on ``device`` (``engine="torch"``), and the CPU's
    default engine from the same random state for ``cpu_flips`` flips (see module doc)."""
    from twirls.attack import surrogate as sur
    from twirls.attack.metattack import Metattack

    adj, x, labels, train, unlabeled, desc = attack_graph(cora_raw, random_sizes=random_sizes)
    log(f"Mettack on {desc['dataset']} ({desc['nodes']} nodes, {desc['edges']} edges)")
    torch.manual_seed(15)  # as the attack stage: the surrogate's self-training labels, CPU
    targets = sur.self_training_labels(sur.train_gcn(adj, x, labels, train, sur.SURROGATE),
                                       labels, train)
    state = torch.get_rng_state()
    before = _reset_peak(device)
    attack = Metattack(adj, x, labels, train, unlabeled, targets, device=device, engine="torch")
    seconds = _run_flips(attack, flips, device)
    peak = _peak(device)
    steady = seconds[1:] or seconds  # the first flip pays for CUDA/cuSPARSE start-up
    out: dict[str, Any] = {
        **desc, "device": str(device), "engine": attack.engine, "flips": flips,
        "seconds_per_flip": statistics.fmean(steady),
        "seconds_per_flip_median": statistics.median(steady),
        "first_flip_seconds": seconds[0], "seconds": [round(s, 5) for s in seconds],
        "flipped_pairs": [list(f) for f in attack.flips],
        "memory_before_bytes": before if device.type == "cuda" else None,
        "peak_memory_bytes": peak,
    }
    n_20 = int(0.2 * desc["edges"])  # the paper's 20% perturbation rate
    out["estimated_seconds_for_20_percent"] = {"flips": n_20,
                                               "seconds": n_20 * out["seconds_per_flip"]}
    del attack
    if cpu_flips > 0:
        torch.set_rng_state(state)
        ref = Metattack(adj, x, labels, train, unlabeled, targets)  # CPU, scipy engine
        ref_seconds = _run_flips(ref, cpu_flips, torch.device("cpu"))
        agree = 0
        for a, b in zip(out["flipped_pairs"], ref.flips, strict=False):
            if tuple(a) != tuple(b):
                break
            agree += 1
        out["cpu_reference"] = {
            "engine": ref.engine, "flips": cpu_flips, "torch_threads": torch.get_num_threads(),
            "seconds_per_flip": statistics.fmean(ref_seconds),
            "seconds": [round(s, 5) for s in ref_seconds],
            "flipped_pairs": [list(f) for f in ref.flips],
            "leading_flips_agree": agree, "flips_compared": min(flips, cpu_flips),
            "speedup_of_device": statistics.fmean(ref_seconds) / out["seconds_per_flip"]}
    return out


# ----------------------------------------------------------------------------- report
def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def summary_lines(report: dict[str, Any]) -> list[str]:
    """The benchmark as a short text table (printed at the end)."""
    lines = [f"device: {report['device'].get('name')} ({report['device']['type']}), "
             f"torch {report['device']['torch']}, CUDA {report['device']['cuda']}"]
    et = report.get("epoch_time")
    if et:
        lines.append(f"epoch time on {et['graph']['nodes']:,} nodes / "
                     f"{et['graph']['edges']:,} edges: seconds, ratio to MLP / GCN "
                     "(paper T4 ratio in brackets)")
        for row in et["models"]:
            if row["status"] != "timed":
                lines.append(f"  {row['model']:<13} {row['status']}: {row['reason'][:90]}")
                continue
            r, p = row["ratios"], row["paper_t4"]
            lines.append(
                f"  {row['model']:<13} train {row['train_seconds']:.4f} s  "
                f"/MLP {_fmt(r['train_to_mlp'])} [{_fmt(p['train_to_mlp'])}]  "
                f"/GCN {_fmt(r['train_to_gcn'])} [{_fmt(p['train_to_gcn'])}]   "
                f"test {row['test_seconds']:.4f} s  /MLP {_fmt(r['test_to_mlp'])} "
                f"[{_fmt(p['test_to_mlp'])}]  peak {_fmt(_mib(row['peak_memory_bytes']), '.0f')}"
                " MiB")
    mt = report.get("mettack")
    if mt:
        line = (f"Mettack on {mt['dataset']}: {mt['seconds_per_flip']:.4f} s per flip on "
                f"{mt['device']} (peak {_fmt(_mib(mt['peak_memory_bytes']), '.0f')} MiB)")
        ref = mt.get("cpu_reference")
        if ref:
            line += (f"; CPU (scipy engine) {ref['seconds_per_flip']:.4f} s per flip; first "
                     f"{ref['leading_flips_agree']}/{ref['flips_compared']} flips agree")
        lines.append(line)
    return lines


def _mib(value: int | None) -> float | None:
    return None if value is None else value / 2**20


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda",
                        help="cuda (default), cuda:<i>, cpu or auto")
    parser.add_argument("--out", type=Path, default=None,
                        help="default reports/benchmarks/gpu.json (gpu-quick.json with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="small graph, few epochs and flips (a smoke test, < 1 min on a CPU)")
    parser.add_argument("--params", type=Path, default=None,
                        help="params file with table11.models (default: ./params/table11.yaml, "
                             "else the repository's)")
    parser.add_argument("--epochs", type=int, default=None, help="timed training epochs")
    parser.add_argument("--warmup", type=int, default=None, help="untimed epochs per model")
    parser.add_argument("--test-epochs", type=int, default=None, help="timed test passes")
    parser.add_argument("--flips", type=int, default=None, help="Mettack flips on the device")
    parser.add_argument("--cpu-flips", type=int, default=None,
                        help="Mettack flips on the CPU (scipy engine) to compare with")
    parser.add_argument("--cora-raw", type=Path, default=None,
                        help="folder holding nettack's cora.npz (or the file)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: 1 with --quick, else torch's default; "
                             "1 is much faster on a shared CPU)")
    parser.add_argument("--skip-epoch-time", action="store_true")
    parser.add_argument("--skip-mettack", action="store_true")
    args = parser.parse_args(argv)
    settings = {**(QUICK if args.quick else DEFAULTS),
                **{k: v for k, v in vars(args).items() if k in DEFAULTS and v is not None}}
    if settings["epochs"] < 1 or settings["warmup"] < 1 or settings["flips"] < 1:
        parser.error("--epochs, --warmup and --flips must be >= 1")
    threads = args.threads if args.threads is not None else (1 if args.quick else 0)
    if threads > 0:
        torch.set_num_threads(threads)
    try:
        device = pick_device(args.device, who="twirls.bench.gpu")
    except (ValueError, RuntimeError) as exc:
        parser.error(f"{exc} Here: pass --device cpu (and --quick for a smoke test).")
    out_path = args.out or Path("reports/benchmarks") / (
        "gpu-quick.json" if args.quick else "gpu.json")
    params = args.params or next((p for p in (Path("params/table11.yaml"),
                                              REPO / "params" / "table11.yaml") if p.is_file()),
                                 Path("params/table11.yaml"))

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    report: dict[str, Any] = {
        "description": "seconds per training epoch / test pass of Table 11's models on an "
                       "arxiv-sized random graph, with ratios to MLP and GCN next to the "
                       "paper's (one Tesla T4); seconds per flip of the fast Mettack on Cora",
        "command": "python -m twirls.bench.gpu " + " ".join(
            sys.argv[1:] if argv is None else argv),
        "quick": args.quick, "settings": settings, "device": device_info(device),
    }
    log(f"device: {report['device']['name']} ({device})")
    if not args.skip_epoch_time:
        models, lr = timing_models(params)
        report["params"] = str(params)
        sizes = QUICK_SIZES if args.quick else dict(ARXIV)
        report["epoch_time"] = time_models(
            models, sizes, device, epochs=settings["epochs"], warmup=settings["warmup"],
            test_epochs=settings["test_epochs"], lr=lr, log=log)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if not args.skip_mettack:
        report["mettack"] = time_mettack(device, flips=settings["flips"],
                                         cpu_flips=settings["cpu_flips"],
                                         cora_raw=args.cora_raw, log=log,
                                         random_sizes=QUICK_CORA if args.quick else None)
    report["peak_rss_mb"] = _peak_rss_mb()
    write_json(out_path, report)
    for line in summary_lines(report):
        print(line)
    print(f"wrote {out_path}")
    return report


if __name__ == "__main__":
    result = main()
    failed = [r["model"] for r in result.get("epoch_time", {}).get("models", [])
              if r["status"] == "failed"]
    sys.exit(1 if failed else 0)
