"""Writing a matplotlib figure atomically (temp file + rename: never half a PNG)."""

from __future__ import annotations

from pathlib import Path

from twirls.files import replacing


def save_figure(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    try:
        with replacing(path, keep_suffix=True) as tmp:
            fig.savefig(tmp, dpi=150, bbox_inches="tight")
    finally:
        plt.close(fig)
