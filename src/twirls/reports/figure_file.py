"""Writing a matplotlib figure atomically (temp file + rename: never half a PNG)."""

from __future__ import annotations

from pathlib import Path


def save_figure(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".part.png")
    fig.savefig(tmp, dpi=150, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(path)
