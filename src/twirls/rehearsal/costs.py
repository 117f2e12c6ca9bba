"""The cost table ("What a full run costs"), generated from the benchmark files into
``reports/benchmarks/README.md``.

    python -m twirls.rehearsal.costs [--benchmarks reports/benchmarks]
                                     [--out reports/benchmarks/README.md] [--check]

Reads, from ``--benchmarks``:

* ``rehearsal.json`` (required; :mod:`twirls.rehearsal.run` on this project's CPU machine):
  every large-data stage's ``full_run.estimated_seconds`` and ``peak_rss_gb``;
* ``pipeline.json`` (:mod:`twirls.bench.pipeline`): ``full_repro``, the measured ``dvc repro -f``
  of everything whose data is here;
* ``rehearsal-gpu.json`` (optional; the same runner on a GPU machine): the "one GPU" column,
  from the stages whose ``device`` is CUDA; the stages it lacks, that failed there, ran out of
  its ``--deadline`` (``out_of_time``) or ran on the CPU there are named in the cell;
* ``gpu.json`` (optional; :mod:`twirls.bench.gpu`): the GPU's name, and Table 11's models'
  seconds per epoch on it where ``rehearsal-gpu.json`` has no ``table11``.

Each row of :data:`ROWS` sums the estimates of its stages and names the largest: the first
(with its epochs where it runs more epochs than any other stage of the row, and its patience,
which makes the time an upper bound), then the next ones of at least an hour, five at most; and
the stage with the largest peak RSS. The first row is ``full_repro``, measured; no file measures
it on a GPU. Nothing is transcribed by hand: a stage missing from the files, failed, or run on
the CPU of the GPU machine is named as such, never filled in.

Below the table, the measured run's stages by the part of issue 28's protocol they serve
(:data:`PROTOCOL_PARTS`: the 100-seed cells of Cora and Citeseer, Table 8's diagnostic protocols,
the attacked graphs, the heterophily splits, the rest), each part's seconds as measured and at
the first part's speed, against the issue's 2-h target; then, from ``floor.json``
(:mod:`twirls.bench.floor`, optional), the least time Table 2's GCNII cells can take at the
field's 100 seeds on this CPU, and the whole run with them at that floor and every other stage as
measured (:func:`floor_text`).

Without ``--check`` the whole of ``--out`` (default: ``README.md`` in ``--benchmarks``) is
written (:func:`document`: a title, where it comes from, what the columns mean, the table),
through a temporary file and a rename. ``--check`` writes nothing and exits 1 when ``--out``
is missing or differs from what the files give. Exit status 2, with one line, when
``rehearsal.json`` is missing or not at full size.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twirls.files import write_text

COMMAND = "python -m twirls.rehearsal.costs"
MAKE_TARGET = "make cost-table"
OUT_NAME = "README.md"
#: the RAM every large-data stage should stay under (``rss_limit_gb`` in ``rehearsal.json``)
RSS_LIMIT_GB = 16.0
REHEARSAL, PIPELINE = "rehearsal.json", "pipeline.json"
GPU_REHEARSAL, GPU_BENCH = "rehearsal-gpu.json", "gpu.json"
FLOOR = "floor.json"
NOT_MEASURED = "not measured"
#: contributors named per cell at most; after the largest, only those of at least an hour
MAX_NAMED, NAMED_MIN_SECONDS = 5, 3600.0
#: display names of the models in stage names (``table2@pubmed-gcnii`` -> GCNII)
MODEL_NAMES = {"appnp": "APPNP", "dagnn": "DAGNN", "gat": "GAT", "gcn": "GCN", "gcnii": "GCNII",
               "graphsage": "GraphSAGE", "ignn": "IGNN", "jknet": "JKNet", "mlp": "MLP",
               "sgc": "SGC", "twirls": "TWIRLS", "twirls-base": "TWIRLS-base"}
PROTOCOLS = {"paper": "the paper's"}


class CostTableError(Exception):
    """A problem stated in one line (a missing or reduced-scale rehearsal); exit status 2."""


@dataclass(frozen=True)
class RowSpec:
    """One row of the table.

    Attributes:
        label: the "part" cell; ``{count}`` (stages), ``{seeds}``, ``{grid_points}``,
            ``{models}`` and ``{protocol}`` are filled from the stages' ``full_run``.
        patterns: the rehearsal's stage names of the row (shell patterns, ``[`` literal).
        detail: ``"stages"`` (name the largest stages) or ``"model-epoch"`` (one model's
            seconds per epoch, ``table12``), or ``""``.
    """

    label: str
    patterns: tuple[str, ...]
    detail: str = "stages"


ROWS = (
    RowSpec("Pubmed: {count} `table2@pubmed-*` / `table10@pubmed-*` (Tables 2, 10)",
            ("table2@pubmed-*", "table10@pubmed-*")),
    RowSpec("ogbn-arxiv: {count} `table2@ogbn-arxiv-*` (Table 2)", ("table2@ogbn-arxiv-*",)),
    RowSpec("Amazon: `figure3` (Figure 3; {grid_points} ratios x {seeds} seeds)",
            ("figure3[*]",)),
    RowSpec("`table11` on the real ogbn-arxiv (Table 11)", ("table11",), detail=""),
    RowSpec("PKU: `table12` with {protocol} protocol (Table 12; {models} models x {seeds} "
            "seeds)", ("table12",), detail="model-epoch"),
)

#: the measured run's stages by the part of issue 28's protocol they serve (the first that fits)
PROTOCOL_PARTS = (
    ("the cells of Cora and Citeseer that issue 28 asks at the field's 100 seeds: Tables 2, 8 "
     "and 10, Figure 2 and their variants",
     ("table2@cora-*", "table2@citeseer-*", "table8", "table10@cora-*", "table10@citeseer-*",
      "figure2", "variants@cora-*", "variants@citeseer-*")),
    ("Table 8's three diagnostic protocols (`table8-extra@*`)", ("table8-extra@*",)),
    ("the attacked graphs: Mettack, Tables 4 and 9 and their variants",
     ("attack@*", "table4@*", "table4-*@*", "table9@*", "variants-attacked@*")),
    ("the heterophily splits: Table 3 and its variants",
     ("table3@*", "variants@actor-*", "variants@texas-*", "variants@cornell-*",
      "variants@wisconsin-*")),
    ("the rest: the data, the stages without their data here, the stand-ins (`chains`, "
     "`table11`, `table12`), the figures and the report", ("*",)),
)
#: issue 28's target for the whole run on 2 cores, at the first part's speed
TARGET_HOURS = 2.0


@dataclass(frozen=True)
class Row:
    """One rendered row: the four cells."""

    part: str
    cpu: str
    gpu: str
    peak_rss: str


@dataclass(frozen=True)
class Inputs:
    """The benchmark files (``None``: absent)."""

    rehearsal: dict[str, Any]
    pipeline: dict[str, Any] | None = None
    gpu_rehearsal: dict[str, Any] | None = None
    gpu_bench: dict[str, Any] | None = None
    floor: dict[str, Any] | None = None


# ----------------------------------------------------------------------------- inputs
def load_json(path: Path) -> dict[str, Any] | None:
    """``path``'s JSON object; ``None`` if the file is absent; a :class:`CostTableError` if
    it cannot be read."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CostTableError(f"{path}: not readable as JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise CostTableError(f"{path}: not a JSON object")
    return data


def read_inputs(folder: Path) -> Inputs:
    """The benchmark files of ``folder``; ``rehearsal.json`` must be there."""
    rehearsal = load_json(folder / REHEARSAL)
    if rehearsal is None:
        raise CostTableError(f"{folder / REHEARSAL} is missing: run python -m "
                             "twirls.rehearsal.run (make rehearsal) first")
    if rehearsal.get("scale", 1.0) != 1.0:
        raise CostTableError(f"{folder / REHEARSAL} was run at --scale {rehearsal['scale']}, "
                             "not at the real sizes: its costs are not the real run's")
    return Inputs(rehearsal, load_json(folder / PIPELINE), load_json(folder / GPU_REHEARSAL),
                  load_json(folder / GPU_BENCH), load_json(folder / FLOOR))


# ----------------------------------------------------------------------------- stages
def matches(stage: str, patterns: tuple[str, ...]) -> bool:
    """Whether ``stage`` fits one of the shell ``patterns`` (``[`` taken literally)."""
    return any(fnmatch.fnmatchcase(stage, p.replace("[", "[[]")) for p in patterns)


def row_stages(report: dict[str, Any] | None, spec: RowSpec) -> list[dict[str, Any]]:
    """The records of ``report``'s stages that belong to the row, in the file's order."""
    return [s for s in (report or {}).get("stages", []) if matches(str(s.get("stage")),
                                                                   spec.patterns)]


def out_of_time(report: dict[str, Any] | None, spec: RowSpec) -> list[str]:
    """The row's stages that ``report``'s run did not start before its ``--deadline``."""
    return [str(s) for s in (report or {}).get("out_of_time") or [] if matches(str(s),
                                                                          spec.patterns)]


def estimate(record: dict[str, Any]) -> float | None:
    """The stage's estimated seconds for its real run, if it ran and has one."""
    seconds = (record.get("full_run") or {}).get("estimated_seconds")
    ok = record.get("status") == "ok" and isinstance(seconds, (int, float))
    return float(seconds) if ok else None


def on_cuda(record: dict[str, Any]) -> bool:
    return "cuda" in str(record.get("device", ""))


def model_name(record: dict[str, Any]) -> str:
    """The model a stage trains, as the paper writes it (``figure3[IGNN]`` -> IGNN,
    ``table2@ogbn-arxiv-twirls-base`` -> TWIRLS-base); else the stage name."""
    stage = str(record.get("stage"))
    if "[" in stage:
        return stage.split("[", 1)[1].rstrip("]")
    if "@" not in stage:
        return f"`{stage}`"
    entry = stage.split("@", 1)[1].removeprefix(f"{record.get('dataset')}-")
    for key in sorted(MODEL_NAMES, key=len, reverse=True):
        if entry == key or entry.startswith(f"{key}-"):
            return MODEL_NAMES[key] + entry[len(key):]
    return f"`{stage}`"


def listed(records: list[dict[str, Any]]) -> str:
    return ", ".join(f"`{r.get('stage')}`" for r in records)


# ----------------------------------------------------------------------------- numbers
def unit_for(seconds: float) -> str:
    """How a cell whose total is ``seconds`` writes its durations."""
    if seconds < 60:
        return "s"
    if seconds < 3600:
        return "min"
    return "h1" if seconds < 36000 else "h0"


def duration(seconds: float, unit: str) -> str:
    """``seconds`` in ``unit`` (:func:`unit_for`): ``41 s``, ``7 min``, ``6.2 h``, ``370 h``."""
    if unit == "s":
        return f"{seconds:.0f} s"
    if unit == "min":
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.{1 if unit == 'h1' else 0}f} h"


def per_epoch(seconds: float) -> str:
    """Seconds per epoch to two significant figures (``23``, ``4.1``, ``0.0083``)."""
    return f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.2g}"


def gb(value: float) -> str:
    return f"{value:.1f} GB"


# ----------------------------------------------------------------------------- cells
def runs_epochs(record: dict[str, Any]) -> float:
    full = record.get("full_run") or {}
    return float(full.get("epochs") or 0) * float(full.get("runs") or 1)


def lead_text(record: dict[str, Any], others: list[dict[str, Any]], unit: str,
              alone: bool) -> str:
    """The largest stage: its time, its epochs where it runs more than any other stage of
    the row, and the patience that makes its time an upper bound."""
    full = record.get("full_run") or {}
    text = model_name(record)
    spe = record.get("seconds_per_epoch")
    if others and spe and runs_epochs(record) > max(runs_epochs(o) for o in others):
        text += f", {full.get('epochs')} epochs at {per_epoch(spe)} s"
    text += f": {duration(estimate(record) or 0.0, unit)}" + (" of it" if alone else "")
    if full.get("patience"):
        text += f", an upper bound with patience {full['patience']}"
    return text


def other_text(record: dict[str, Any], unit: str) -> str:
    text = f"{model_name(record)} {duration(estimate(record) or 0.0, unit)}"
    patience = (record.get("full_run") or {}).get("patience")
    return text + (f" (an upper bound with patience {patience})" if patience else "")


def contributors(records: list[dict[str, Any]], unit: str) -> list[str]:
    """The largest stage, then the next ones of at least an hour, at most :data:`MAX_NAMED`."""
    if len(records) < 2:
        return []
    ranked = sorted(records, key=lambda r: (-(estimate(r) or 0.0), str(r.get("stage"))))
    rest = [r for r in ranked[1:MAX_NAMED] if (estimate(r) or 0.0) >= NAMED_MIN_SECONDS]
    alone = not rest
    return [lead_text(ranked[0], ranked[1:], unit, alone), *(other_text(r, unit) for r in rest)]


def details(spec: RowSpec, ok: list[dict[str, Any]], unit: str) -> list[str]:
    """The parenthesised details of an estimate cell."""
    if spec.detail == "stages":
        return contributors(ok, unit)
    if spec.detail == "model-epoch" and len(ok) == 1 and ok[0].get("seconds_per_epoch"):
        return [f"{per_epoch(ok[0]['seconds_per_epoch'])} s per model-epoch"]
    return []


def estimate_cell(spec: RowSpec, ok: list[dict[str, Any]], expected: int, where: str,
                  notes: list[str]) -> str:
    """``~6.2 h, estimate (details; notes)`` from the stages in ``ok`` (``expected``: how
    many stages the row has; fewer in ``ok`` say "for N of M stages")."""
    total = sum(estimate(r) or 0.0 for r in ok)
    unit = unit_for(total)
    part = f" for {len(ok)} of {expected} stages" if len(ok) < expected else ""
    inside = details(spec, ok, unit) + notes
    text = f"~{duration(total, unit)}{part}, estimate{where}"
    return text + (f" ({'; '.join(inside)})" if inside else "")


def why_failed(record: dict[str, Any]) -> str:
    """A few words on why a stage gave no estimate (``needs DGL``, ``killed by signal 9``: a
    time limit or the memory), or ``""``."""
    if "DGL" in str(record.get("error", "")):
        return "needs DGL"
    if "time limit" in str(record.get("error", "")):
        return "stopped at its time limit"
    codes = [r.get("returncode") for r in record.get("runs") or []]
    last = codes[-1] if codes else None
    return f"killed by signal {-last}" if isinstance(last, int) and last < 0 else ""


def failed_note(records: list[dict[str, Any]], prefix: str) -> list[str]:
    """``<prefix>: `a` (needs DGL), `b``` for the stages that gave no estimate."""
    bad = [r for r in records if estimate(r) is None]
    if not bad:
        return []
    return [f"{prefix}: " + ", ".join(f"`{r.get('stage')}`" + (f" ({why_failed(r)})"
                                                              if why_failed(r) else "")
                                      for r in bad)]


def timing_notes(ok: list[dict[str, Any]], gpu: bool) -> list[str]:
    """How far the estimates of ``ok`` can be trusted: stages whose epochs were too short to
    time against the start-up's noise (the rehearsal counts them as 0 s, so only their start-up
    is in the sum: a lower bound), and, on a GPU (``gpu``), stages timed on a single first
    epoch, which holds CUDA's warm-up (likely high)."""
    notes = []
    untimed = [r for r in ok if r.get("seconds_per_epoch") == 0
               and len(r.get("epochs_measured") or []) > 0]
    if untimed:
        notes.append(f"epochs below the timing noise, start-up only (a lower bound): "
                     f"{listed(untimed)}")
    single = [r for r in ok if gpu and r.get("epochs_measured") == [1]
              and r.get("seconds_per_epoch")]
    if single:
        notes.append(f"timed on one first epoch, warm-up included (likely high): "
                     f"{listed(single)}")
    return notes


def late_note(stages: list[str]) -> list[str]:
    return [f"out of time: {', '.join(f'`{s}`' for s in stages)}"] if stages else []


def cpu_cell(spec: RowSpec, records: list[dict[str, Any]], late: list[str]) -> str:
    """The "2-core CPU" cell from ``rehearsal.json``'s stages of the row (``late``: those its
    run had no time for)."""
    if not records and not late:
        return f"no stage {' / '.join(f'`{p}`' for p in spec.patterns)} in {REHEARSAL}"
    ok = [r for r in records if estimate(r) is not None]
    notes = (timing_notes(ok, gpu=False) + failed_note(records, "failed in the rehearsal")
             + late_note(late))
    if not ok:
        return f"no estimate ({'; '.join(notes)})"
    return estimate_cell(spec, ok, len(records) + len(late), "", notes)


def gpu_name(inputs: Inputs, records: list[dict[str, Any]] = ()) -> str:
    """The GPU that ran ``records`` (stages of ``rehearsal-gpu.json``): the ``gpu`` each one
    records (calls on different machines kept into one file), else the file's machine's GPU
    name, else ``gpu.json``'s CUDA device name, else the stages' CUDA devices (``cuda:0``)."""
    named = sorted({str(r["gpu"]) for r in records if r.get("gpu")})
    if named and all(r.get("gpu") for r in records):
        return " and ".join(named)
    machine = (inputs.gpu_rehearsal or {}).get("machine") or {}
    for key in ("gpu_name", "gpu"):
        if isinstance(machine.get(key), str) and machine[key]:
            return machine[key]
    bench = (inputs.gpu_bench or {}).get("device") or {}
    if bench.get("type") == "cuda" and bench.get("name"):
        return str(bench["name"])
    devices = sorted({str(s.get("device")) for s in (inputs.gpu_rehearsal or {}).get(
        "stages", []) if on_cuda(s)})
    return ", ".join(f"`{d}`" for d in devices) or "the GPU"


def gpu_notes(expected: list[str], records: list[dict[str, Any]],
              not_run: list[dict[str, Any]], late: list[str],
              runs: dict[str, Any] | None = None) -> list[str]:
    """What of the row did not run on the GPU: stages missing from ``rehearsal-gpu.json``,
    listed there as not run or out of time, failed there, or run on the CPU there; and the
    stages it sized for other runs (seeds x points) than ``runs`` (stage -> runs in
    ``rehearsal.json``, which follows today's params)."""
    runs = runs or {}
    names = {str(r.get("stage")) for r in records}
    skipped = {str(n.get("stage")): str(n.get("reason", "")) for n in not_run}
    missing = [s for s in expected if s not in names and s not in skipped and s not in late]
    notes = [f"not run there: `{s}` ({why})" for s, why in skipped.items()]
    if missing:
        notes.append(f"not in {GPU_REHEARSAL}: " + ", ".join(f"`{s}`" for s in missing))
    notes += late_note([s for s in late if s not in names])
    notes += failed_note(records, "failed there")
    short = [f"`{r['stage']}` ({r['full_run']['runs']} of {runs[r['stage']]})"
             for r in records if estimate(r) is not None and isinstance(r.get("full_run"), dict)
             and runs.get(r.get("stage")) not in (None, r["full_run"].get("runs"))]
    if short:
        notes.append(f"sized for other runs than {REHEARSAL} (today's params): "
                     + ", ".join(short))
    cpu = [r for r in records if estimate(r) is not None and not on_cuda(r)]
    if cpu:
        notes.append(f"ran on the CPU there: {listed(cpu)}")
    return notes


def gpu_cell(spec: RowSpec, expected: list[str], inputs: Inputs) -> str:
    """The "one GPU" cell: ``rehearsal-gpu.json``'s CUDA stages of the row; for ``table11``
    without them, ``gpu.json``'s measured epochs; else "not measured"."""
    report = inputs.gpu_rehearsal
    scale = (report or {}).get("scale", 1.0)
    records = row_stages(report, spec) if scale == 1.0 else []
    not_run = [n for n in (report or {}).get("not_run", []) if matches(str(n.get("stage")),
                                                                       spec.patterns)]
    late = out_of_time(report, spec)
    ok = [r for r in records if estimate(r) is not None and on_cuda(r)]
    if not ok:
        bench = bench_table11_cell(inputs.gpu_bench) if spec.patterns == ("table11",) else ""
        if bench:
            return bench
        if scale != 1.0:
            return f"{NOT_MEASURED} ({GPU_REHEARSAL} ran at --scale {scale}, not the real sizes)"
        notes = gpu_notes([], records, not_run, late) if records or not_run or late else []
        return NOT_MEASURED + (f" ({'; '.join(notes)})" if notes else "")
    expected = expected or [str(r.get("stage")) for r in records]
    runs = {s.get("stage"): (s.get("full_run") or {}).get("runs")
            for s in inputs.rehearsal.get("stages", [])}
    notes = timing_notes(ok, gpu=True) + gpu_notes(expected, records, not_run, late, runs)
    peaks = [r["gpu_peak_gb"] for r in ok if isinstance(r.get("gpu_peak_gb"), (int, float))]
    if peaks:
        notes.insert(0, f"GPU memory up to {gb(max(peaks))}")
    count = max(len(expected), len(records))
    return estimate_cell(spec, ok, count, f" on {gpu_name(inputs, ok)}", notes)


def bench_table11_cell(bench: dict[str, Any] | None) -> str:
    """Table 11's models per epoch on a GPU, measured by ``twirls.bench.gpu`` (``gpu.json``;
    not ``--quick``, on CUDA), or ``""``."""
    device = (bench or {}).get("device") or {}
    timing = (bench or {}).get("epoch_time") or {}
    if device.get("type") != "cuda" or bench.get("quick") or not timing.get("models"):
        return ""
    models = timing["models"]
    timed = [m for m in models if isinstance(m.get("train_seconds"), (int, float))]
    if not timed:
        return ""
    seconds = sum(m["train_seconds"] for m in timed)
    models_text = f"{len(timed)} models'" if len(timed) > 1 else "one model's"
    text = (f"{per_epoch(seconds)} s per round of {models_text} training epochs, "
            f"measured on {device.get('name', 'the GPU')} ({GPU_BENCH}, an arxiv-sized random "
            "graph")
    rest = [m for m in models if m not in timed]
    if rest:
        text += "; not timed: " + ", ".join(f"{m.get('model')} ({m.get('status')})"
                                            for m in rest)
    return text + ")"


def peak_cell(records: list[dict[str, Any]]) -> str:
    """The largest ``peak_rss_gb`` of the row's stages, and which (rows of several stages)."""
    peaks = [r for r in records if isinstance(r.get("peak_rss_gb"), (int, float))]
    if not peaks:
        return f"not in {REHEARSAL}"
    top = max(peaks, key=lambda r: r["peak_rss_gb"])
    return gb(top["peak_rss_gb"]) + (f" (`{top.get('stage')}`)" if len(records) > 1 else "")


def label(spec: RowSpec, records: list[dict[str, Any]], count: int) -> str:
    """The "part" cell: ``spec.label`` with the ``count`` of stages and the ``full_run`` values
    of ``records`` (several values joined by ``/``, none: ``?``)."""
    values: dict[str, str] = {"count": str(count)}
    for key in ("seeds", "grid_points", "models", "protocol"):
        found = sorted({str((r.get("full_run") or {}).get(key)) for r in records
                        if (r.get("full_run") or {}).get(key) is not None})
        values[key] = "/".join(found) or "?"
    if values["protocol"] != "?":
        values["protocol"] = PROTOCOLS.get(values["protocol"], f"the `{values['protocol']}`")
    return spec.label.format_map(values)


# ----------------------------------------------------------------------------- rows
def measured_row(pipeline: dict[str, Any] | None) -> Row:
    """Everything whose data is here: ``pipeline.json``'s ``full_repro`` (measured)."""
    part = "everything whose data is here (by part: `docs/costs.md`)"
    run = (pipeline or {}).get("full_repro")
    if not run:
        return Row(part, f"no `full_repro` in {PIPELINE}", NOT_MEASURED, f"not in {PIPELINE}")
    if run.get("complete") and isinstance(run.get("seconds"), (int, float)):
        cpu = f"{run['seconds'] / 3600:.2f} h, measured"
    else:
        so_far = float(run.get("seconds_so_far") or 0.0)
        cpu = (f"incomplete run: {len(run.get('stages') or {})} stages in "
               f"{duration(so_far, unit_for(so_far))}, measured")
    peak, parts = run.get("peak_rss_gb"), len(run.get("parts") or [])
    if not isinstance(peak, (int, float)):
        rss = "see `docs/costs.md`"
    elif parts > 1:  # the largest process of the last part only: the others' ended unmeasured
        rss = f"see `docs/costs.md` (resumed in {parts} parts; the last one's largest: {gb(peak)})"
    else:
        rss = f"{gb(peak)} (largest process; which stage is not recorded)"
    if parts > 1 and run.get("complete"):
        cpu += f" (stage time, in {parts} parts)"
        hours = (run.get("normalised") or {}).get("hours") or {}
        if hours:
            cpu += (f"; {' / '.join(f'{h:.2f}' for h in hours.values())} h at the first "
                    f"part's speed (`reference_s`: {' / '.join(hours)})")
    return Row(part, cpu, NOT_MEASURED, rss)


def protocol_parts(run: dict[str, Any]) -> list[tuple[str, int, float, dict[str, float]]]:
    """``run``'s (a complete ``full_repro``) stages by :data:`PROTOCOL_PARTS`: each part's
    label, number of stages, seconds and seconds at the first part's speed by each
    calibration (:func:`twirls.bench.pipeline.scaled_seconds`); parts without stages left
    out."""
    from twirls.bench.pipeline import scaled_seconds

    stages = run.get("stages") or {}
    owner = {name: next(i for i, (_, patterns) in enumerate(PROTOCOL_PARTS)
                        if matches(name, patterns)) for name in stages}
    rows = []
    for i, (text, _) in enumerate(PROTOCOL_PARTS):
        names = [name for name in stages if owner[name] == i]
        if names:
            rows.append((text, len(names), sum(stages[n] for n in names),
                         scaled_seconds(run, names)))
    return rows


def protocol_text(pipeline: dict[str, Any] | None) -> str:
    """The measured run by the parts of issue 28's protocol, as a table and what its first row
    says of the target; ``""`` without a complete ``full_repro``."""
    run = (pipeline or {}).get("full_repro") or {}
    if not (run.get("complete") and run.get("stages")):
        return ""
    rows = protocol_parts(run)
    kinds = list(rows[0][3])
    scaled_head = (f" at the first part's speed (`reference_s`: {' / '.join(kinds)}) |"
                   if kinds else "")
    lines = [f"| part of issue 28's protocol | stages | measured |{scaled_head}",
             "|---|---|---|" + ("---|" if kinds else "")]
    for text, count, seconds, scaled in rows:
        at_first = " / ".join(f"{v / 3600:.2f}" for v in scaled.values())
        lines.append(f"| {cell(text)} | {count} | {seconds / 3600:.2f} h |"
                     + (f" {at_first} h |" if kinds else ""))
    text = [wrap("The measured run by the part of issue 28's protocol each stage serves (the "
                 "stages' own seconds; the whole run adds the stale reruns and DVC's time "
                 "between stages):"), "\n".join(lines)]
    first = rows[0]
    if first[0] == PROTOCOL_PARTS[0][0]:  # the 100-seed cells: held against the target
        hours = " / ".join(f"{v / 3600:.2f}" for v in first[3].values()) or f"{first[2] / 3600:.2f}"
        speed = " at the first part's speed" if kinds else ""
        text.append(wrap(f"Issue 28 asks for the whole run in {TARGET_HOURS:g} h on 2 cores"
                         f"{speed}; the first row alone takes {hours} h."))
    return "\n\n".join(text)


def rest_of_run(run: dict[str, Any], floor_stages: list[str]) -> dict[str, float]:
    """Seconds at the first part's speed, by calibration, of a complete ``full_repro``'s stages
    other than ``floor_stages`` (those the floor stands in for); ``{}`` without the stages."""
    from twirls.bench.pipeline import scaled_seconds

    stages = run.get("stages") or {}
    if not (run.get("complete") and stages):
        return {}
    return scaled_seconds(run, [name for name in stages if name not in floor_stages])


def floor_text(floor: dict[str, Any] | None, pipeline: dict[str, Any] | None) -> str:
    """What ``floor.json`` says: the products of the cells it counts on the rows that matter,
    their time at the peak rate of dense products of the CPU it ran on and, scaled as the full
    run is (``reference_s``), at its first part's speed; also with each cell's mean epochs two
    standard errors lower, and on every node's rows; then the whole run with those cells at
    their floor and every other stage as measured, against the target; ``""`` without the
    file."""
    if not (floor and floor.get("records")):
        return ""
    records = floor["records"]
    run = (pipeline or {}).get("full_repro") or {}
    first = ((run.get("parts") or [{}])[0]).get("reference_s") or {}
    here = floor.get("reference_s") or {}
    factors = {k: first[k] / here[k] for k in ("python", "torch")  # to the first part's day
               if isinstance(first.get(k), (int, float)) and isinstance(here.get(k), (int, float))}

    def hours(seconds: float) -> str:
        scaled = " / ".join(f"{seconds * factor / 3600:.2f}" for factor in factors.values())
        return f"{scaled} h" if factors else f"{seconds / 3600:.2f} h here"

    low = sum(r["floor_s"] * max(0.0, 1 - 2 * (r["epochs_sem"] or 0) / r["epochs_mean"])
              for r in records)
    each = "; ".join(f"{r['config']}: {r['needed_gflop_per_seed_epoch']:.1f} GFLOP a seed-epoch "
                     f"of the {r['gflop_per_seed_epoch']:.1f} its stage multiplies on every "
                     f"node, x {r['epochs_mean']:g} epochs, the mean of its "
                     f"{r['committed_runs']} committed runs, = {r['pflop']:.3f} PFLOP"
                     for r in records)
    speed = (f" at the first part's speed (`reference_s`: {' / '.join(factors)})"
             if factors else "")
    stages = [f"table2@{r['config']}" for r in records]
    paths = list(floor.get("peak_gflops_by_kernels") or {})
    kernels = f" with MKL's {and_list(paths)} kernels" if paths else ""
    text = (
        f"The floor (`{FLOOR}`, `python -m twirls.bench.floor`): the float32 matrix products of "
        f"{and_list([f'`{s}`' for s in stages])} at "
        f"{and_list(sorted({r['seeds'] for r in records}))} seeds on the rows that matter (each "
        "layer on the nodes within reach of the labels an epoch reads: the training nodes in a "
        "training step, the validation nodes in an evaluation, the test nodes once a run), "
        f"counted as one seed's epoch runs them ({each}), take {floor['floor_s'] / 3600:.2f} h "
        f"at the peak rate of dense products of the CPU they were timed on ({floor.get('cpu')}, "
        f"{floor.get('cpu_capability')}: {floor['peak_gflops']:g} GFLOP/s on "
        f"{floor.get('threads')} cores, the best of `torch.mm` on "
        f"{and_list(list(floor['peak_gflops_by_shape']))}{kernels}), "
        f"{hours(floor['floor_s'])}{speed}; {hours(low)} with each mean two standard errors "
        f"fewer epochs; on every node's rows, as the stages multiply them, "
        f"{floor['all_rows_floor_s'] / 3600:.2f} h ({hours(floor['all_rows_floor_s'])}).")
    rest = rest_of_run(run, stages) if factors else {}
    if rest and set(rest) == set(factors):
        totals = {k: (low * factors[k] + rest[k]) / 3600 for k in factors}
        verdict = "above" if min(totals.values()) > TARGET_HOURS else "not clearly above"
        text += (
            f" With these cells at their floor and every other stage as the full run measured "
            f"it ({' / '.join(f'{v / 3600:.2f}' for v in rest.values())} h at the first part's "
            f"speed), the run would still take {' / '.join(f'{v:.2f}' for v in totals.values())}"
            f" h with the fewer epochs: {verdict} the {TARGET_HOURS:g}-h target.")
    else:
        least = low * min(factors.values(), default=1.0) / 3600
        verdict = "above" if least > TARGET_HOURS else "not clearly above"
        text += f" These cells alone: {verdict} the {TARGET_HOURS:g}-h target."
    return wrap(text + " A dense product's rate need not scale as either calibration does.")


def rehearsed_row(spec: RowSpec, inputs: Inputs) -> Row:
    records = row_stages(inputs.rehearsal, spec)
    late = out_of_time(inputs.rehearsal, spec)
    expected = [str(r.get("stage")) for r in records] + late
    return Row(label(spec, records, len(expected)), cpu_cell(spec, records, late),
               gpu_cell(spec, expected, inputs), peak_cell(records))


def table_rows(inputs: Inputs) -> list[Row]:
    """Every row of the table: the measured run, then one per :data:`ROWS` entry."""
    return [measured_row(inputs.pipeline), *(rehearsed_row(s, inputs) for s in ROWS)]


def cores(inputs: Inputs) -> str:
    machine = inputs.rehearsal.get("machine") or {}
    count = machine.get("cpus_usable") or machine.get("cpu_count")
    return f"{count}-core CPU" if count else "CPU"


def cell(text: str) -> str:
    """``text`` safe inside a table cell: one line, ``|`` escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def render(inputs: Inputs) -> str:
    """The markdown table, one line per row, ending with a newline."""
    lines = [f"| part | {cores(inputs)} | one GPU | peak RSS |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(cell(c) for c in (r.part, r.cpu, r.gpu, r.peak_rss)) + " |"
              for r in table_rows(inputs)]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- document
def and_list(values: list[Any]) -> str:
    """``[1, 2, 5]`` -> ``1, 2 and 5``."""
    words = [str(v) for v in values]
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


def budgets(report: dict[str, Any] | None) -> str:
    """``budgets_epochs`` of a rehearsal, as words (``1 and 2``); ``?`` when absent."""
    epochs = (report or {}).get("budgets_epochs")
    return and_list(list(epochs)) if isinstance(epochs, list) and epochs else "?"


def rehearsal_text(rehearsal: dict[str, Any]) -> str:
    """How the CPU column was estimated (the rehearsal's epochs, length and median load average
    from its file; "several runs" when its last call re-measured some stages, `--only`)."""
    wall = rehearsal.get("rehearsal_wall_seconds")
    minutes = "" if not isinstance(wall, (int, float)) else (
        f"{round(wall / 60)}-minute " if wall >= 90 else f"{round(wall)}-second ")
    run = f"one {minutes}run"
    if "--only" in str(rehearsal.get("command", "")):  # a later call re-measured some stages
        run = f"several runs, the latest a {minutes}run of some stages"
    loads = sorted(r["load_average_1min"] for s in rehearsal.get("stages", [])
                   for r in s.get("runs", []) if isinstance(r.get("load_average_1min"),
                                                            (int, float)))
    load = f"load average about {loads[len(loads) // 2]:.1f}" if loads else "load average unknown"
    return (
        "Pubmed's `allx`, ogbn-arxiv, Amazon and the PKU training file are not reachable here, "
        "so their stages were rehearsed: `make rehearsal` writes files in their real formats at "
        "Table 5's sizes (synthetic content; never reported as results) and runs every stage "
        "that reads them through the real stage code with "
        f"{budgets(rehearsal)} epochs, which gives each stage's seconds per epoch, fixed "
        "overhead and peak RSS (`reports/benchmarks/rehearsal.json`). The full-run figures "
        "below extrapolate those to the real epochs and seeds of `params.yaml` (estimates from "
        f"{run}, {load} on the 2 cores; loaded runs moved per-epoch times by "
        "up to ~40%; patience may stop runs earlier). Each curve of Figure 3 is rehearsed alone "
        "(`figure3[IGNN]`), since the curves train for different numbers of epochs.")


def rss_text(rehearsal: dict[str, Any]) -> str:
    """Whether every rehearsed stage stays under the RAM limit; ``""`` without peaks."""
    peaks = [r for r in rehearsal.get("stages", [])
             if isinstance(r.get("peak_rss_gb"), (int, float))]
    if not peaks:
        return ""
    limit = float(rehearsal.get("rss_limit_gb") or RSS_LIMIT_GB)
    top = max(peaks, key=lambda r: r["peak_rss_gb"])
    if top["peak_rss_gb"] < limit:
        return f"Every large-data stage stays under {limit:g} GB of RAM."
    return (f"Not every large-data stage stays under {limit:g} GB of RAM: "
            f"`{top.get('stage')}` peaks at {gb(top['peak_rss_gb'])}.")


def gpu_text(gpu_rehearsal: dict[str, Any] | None) -> str:
    """Where the GPU column comes from; ``""`` without ``rehearsal-gpu.json``."""
    if gpu_rehearsal is None:
        return ""
    return (
        "The GPU column comes from `make gpu-session` on a lent H200 and H100 "
        "([`docs/gpu-session.md`](../../docs/gpu-session.md)), whose budgets of "
        f"{budgets(gpu_rehearsal)} epochs sit beside a ~15 s start-up per stage: where the two "
        "runs differed by noise only, the cell says its estimate is a lower bound, and stages "
        "timed on their first epoch alone (CUDA's warm-up in it) are likely high.")


def wrap(text: str, width: int = 99) -> str:
    """``text`` as lines of at most ``width`` characters (words never split)."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "\n".join(lines)


def document(inputs: Inputs) -> str:
    """The whole generated file: title, provenance, what the columns mean, the table, and the
    measured run by the parts of issue 28's protocol (:func:`protocol_text`) with its floor
    (:func:`floor_text`)."""
    after = " ".join(t for t in (
        "The first row is the one measured run, `full_repro` in `pipeline.json` (`python -m "
        "twirls.bench.pipeline --full`); `docs/costs.md` times its parts.",
        rss_text(inputs.rehearsal), gpu_text(inputs.gpu_rehearsal)) if t)
    parts = [
        "# What a full run costs",
        wrap(f"Generated by `{MAKE_TARGET}` (`{COMMAND}`) from the JSON files beside it; do not "
             "edit it by hand: a test fails when it is out of step with them."),
        wrap(rehearsal_text(inputs.rehearsal)),
        render(inputs).rstrip("\n"),
        wrap(after),
        protocol_text(inputs.pipeline),
        floor_text(inputs.floor, inputs.pipeline),
    ]
    return "\n\n".join(p for p in parts if p) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmarks", type=Path, default=Path("reports/benchmarks"),
                        help="folder of rehearsal.json, pipeline.json (and the GPU files)")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"the generated file (default: {OUT_NAME} in --benchmarks)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if --out is missing or differs from the files' (no write)")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    out: Path = args.out if args.out is not None else args.benchmarks / OUT_NAME
    new = document(read_inputs(args.benchmarks))
    old = out.read_bytes().decode() if out.is_file() else None
    if args.check:
        if new != old:
            what = "is missing" if old is None else f"differs from {args.benchmarks}"
            print(f"{out}: the cost table {what}; run {COMMAND} ({MAKE_TARGET})",
                  file=sys.stderr)
            return 1
        return 0
    if new != old:
        write_text(out, new)
    print(f"{out}: cost table {'rewritten' if new != old else 'unchanged'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except CostTableError as exc:
        print(f"{COMMAND}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
