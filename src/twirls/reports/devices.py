"""Where the numbers were computed: the device and the software stack each stage recorded in
its metrics file.

Every experiment stage writes ``"device"`` (``cpu``, ``cuda``; several, comma-separated, when its
models ran on different devices) and ``"stack"`` (its Python, torch and NumPy versions,
:func:`twirls.train.outputs.stack`) into ``metrics/<kind>/<name>.json``. The report lists, per
kind of stage, how many stages ran on which device and with which stack.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

NOT_RECORDED = "not recorded"


def _counts(metrics_files: dict[str, list[Path]], key) -> dict[str, Counter]:
    """``{stage group: Counter(key(metrics) -> stages)}`` over the metrics files that exist
    and hold results (``no-data`` stages ran nothing and are left out)."""
    out: dict[str, Counter] = {}
    for kind, paths in metrics_files.items():
        counts: Counter = Counter()
        for path in paths:
            if not path.exists():
                continue
            metrics = json.loads(path.read_text())
            if stage_device(metrics) is not None:
                counts[key(metrics)] += 1
        if counts:
            out[kind] = counts
    return out


def device_counts(metrics_files: dict[str, list[Path]]) -> dict[str, Counter]:
    """``{stage group (e.g. "train@…"): Counter(device -> stages)}`` over the metrics files
    that exist and hold results (``no-data`` stages ran nothing and are left out)."""
    return _counts(metrics_files, stage_device)


def stack_counts(metrics_files: dict[str, list[Path]]) -> dict[str, Counter]:
    """``{stage group: Counter("python …, torch …, numpy …" -> stages)}`` over the same files;
    a file from before stacks were recorded counts as :data:`NOT_RECORDED`."""
    return _counts(metrics_files, stage_stack)


def stage_stack(metrics: dict) -> str:
    """The software stack a stage's metrics file records, as one label."""
    stack = metrics.get("stack")
    if not isinstance(stack, dict):
        return NOT_RECORDED
    return ", ".join(f"{k} {stack[k]}" for k in ("python", "torch", "numpy"))


def stage_device(metrics: dict) -> str | None:
    """The device a stage's metrics file records; None when the stage ran nothing (``no-data``).

    A stage with several parts (the graphs of ``table4-twirls-base@``, the truncations of
    ``table9@``) records one entry per part, each with its device: their devices,
    comma-separated."""
    if metrics.get("status", "ok") != "ok":
        return None
    if "device" in metrics:
        return str(metrics["device"])
    parts = [v for v in metrics.values() if isinstance(v, dict) and "status" in v]
    ran = [part for part in parts if part.get("status", "ok") == "ok"]
    if parts and not ran:
        return None
    devices = sorted({d.strip() for part in ran for d in str(part.get("device", "")).split(",")
                      if d.strip()})
    return ", ".join(devices) if devices else NOT_RECORDED


def device_lines(counts: dict[str, Counter],
                 stacks: dict[str, Counter] | None = None) -> list[str]:
    """Markdown section for ``reports/README.md``: devices and, per stage group, the stacks
    (``stacks``, from :func:`stack_counts`)."""
    stacks = stacks or {}
    lines = ["## Where the numbers were computed", "",
             "Device and software stack per stage as recorded in its `metrics/` file "
             "(`device: auto` in `params.yaml` uses CUDA whenever PyTorch sees a GPU that its "
             "build has kernels for; the stack is Python, torch and NumPy; `not recorded`: "
             "a metrics file from before stacks were recorded).", "",
             "| stages | devices | stacks |", "|---|---|---|"]
    for kind, counter in counts.items():
        lines.append(f"| `{kind}` | " + ", ".join(f"{device}: {n}" for device, n in
                                                sorted(counter.items())) + " | "
                     + "; ".join(f"{stack}: {n}" for stack, n in
                                 sorted(stacks.get(kind, {}).items())) + " |")
    return [*lines, ""]
