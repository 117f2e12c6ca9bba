"""The stage graph by stage family, as a Mermaid flowchart for the README (a tool, used by no
stage).

``dvc dag`` draws every one of the ~120 stages (4,645 characters wide); collapsing each
``family@item`` to its family keeps the shape readable. ``python -m twirls.dag`` reads
``dvc dag --dot`` in the current repository and prints the Mermaid text.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter

EDGE = re.compile(r'^"(?P<src>[^"]+)" -> "(?P<dst>[^"]+)";?$')
NODE = re.compile(r'^"(?P<name>[^"]+)";?$')


def family(stage: str) -> str:
    """``table4@nettack-cora-fast-gcn`` -> ``table4``."""
    return stage.split("@", 1)[0]


def collapse(dot: str) -> tuple[Counter[str], set[tuple[str, str]]]:
    """Stages per family and the edges between families in a ``dvc dag --dot`` text."""
    sizes: Counter[str] = Counter()
    edges: set[tuple[str, str]] = set()
    for line in map(str.strip, dot.splitlines()):
        if m := EDGE.match(line):
            a, b = family(m["src"]), family(m["dst"])
            if a != b:
                edges.add((a, b))
        elif m := NODE.match(line):
            sizes[family(m["name"])] += 1
    return sizes, edges


def mermaid(sizes: Counter[str], edges: set[tuple[str, str]]) -> str:
    """A ``flowchart LR``: one node per family (``name@ x N`` when it has N > 1 stages)."""
    ids = {name: f"s{i}" for i, name in enumerate(sizes)}
    lines = ["flowchart LR"]
    for name, count in sizes.items():
        label = f"{name}@ x {count}" if count > 1 else name
        lines.append(f'  {ids[name]}["{label}"]')
    lines += [f"  {ids[a]} --> {ids[b]}" for a, b in sorted(edges) if a in ids and b in ids]
    return "\n".join(lines) + "\n"


def main() -> int:
    dot = subprocess.run(["dvc", "dag", "--dot"], capture_output=True, text=True, check=True)
    sys.stdout.write(mermaid(*collapse(dot.stdout)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
