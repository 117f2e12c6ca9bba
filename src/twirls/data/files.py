"""Locating raw files inside a dataset folder, with one clear message when one is missing."""

from __future__ import annotations

from pathlib import Path


def raw_file(root: Path, relative: str, origin: str = "") -> Path:
    """``root/relative`` if it is a file, else ``FileNotFoundError`` saying how to get it."""
    path = Path(root) / relative
    if not path.is_file():
        how = origin or "rerun `dvc repro` for the fetch stage, or copy the file into that folder"
        raise FileNotFoundError(
            f"Missing raw file {relative!r} in {Path(root)}; the fetch stage should have put it "
            f"there ({how}).")
    return path
