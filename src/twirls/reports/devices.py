"""Where the numbers were computed: the device each stage recorded in its metrics file.

Every experiment stage writes ``"device"`` (``cpu``, ``cuda``; several, comma-separated, when its
models ran on different devices, e.g. GAT on the CPU beside a GPU) into ``metrics/<kind>/<name>
.json``. The report lists, per kind of stage, how many stages ran on which device.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

NOT_RECORDED = "not recorded"


def device_counts(metrics_files: dict[str, list[Path]]) -> dict[str, Counter]:
    """``{stage group (e.g. "train@…"): Counter(device -> stages)}`` over the metrics files
    that exist and hold results (``no-data`` stages ran nothing and are left out)."""
    out: dict[str, Counter] = {}
    for kind, paths in metrics_files.items():
        counts: Counter = Counter()
        for path in paths:
            if not path.exists():
                continue
            metrics = json.loads(path.read_text())
            if metrics.get("status", "ok") != "ok":
                continue
            counts[str(metrics.get("device", NOT_RECORDED))] += 1
        if counts:
            out[kind] = counts
    return out


def device_lines(counts: dict[str, Counter]) -> list[str]:
    """Markdown section for ``reports/README.md``."""
    lines = ["## Where the numbers were computed", "",
             "Device per stage as recorded in its `metrics/` file (`device: auto` in "
             "`params.yaml` uses CUDA whenever PyTorch sees a GPU; GAT and GraphSAGE need a "
             "CUDA build of DGL for it).", "", "| stages | devices |", "|---|---|"]
    for kind, counter in counts.items():
        lines.append(f"| `{kind}` | " + ", ".join(f"{device}: {n}" for device, n in
                                                sorted(counter.items())) + " |")
    return [*lines, ""]
