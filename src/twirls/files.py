"""Writing a file whole: into a ``.part`` file beside it, then renamed over it (:func:`os.replace`,
atomic within one file system), so that a crash or Ctrl-C leaves the old file or the new one,
never half of one. Every JSON, CSV, text, checkpoint, figure and graph the project writes goes
through :func:`replacing`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def replacing(path: Path, keep_suffix: bool = False) -> Iterator[Path]:
    """The temporary path to write ``path``'s new content to (``<name>.part``, or
    ``<stem>.part<suffix>`` with ``keep_suffix`` for writers that go by the suffix, such as
    matplotlib); renamed over ``path`` when the block ends, removed if it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.part{path.suffix}" if keep_suffix else f"{path.name}.part")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    with replacing(path) as tmp:
        tmp.write_text(text)


def write_bytes(path: Path, data: bytes) -> None:
    with replacing(path) as tmp:
        tmp.write_bytes(data)


def write_json(path: Path, data: Any, sort_keys: bool = False) -> None:
    """``data`` as JSON with one-space indents and a final newline (every JSON output's form)."""
    write_text(path, json.dumps(data, indent=1, sort_keys=sort_keys) + "\n")
