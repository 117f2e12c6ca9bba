"""Numbers to text without a Python loop over values, for the multi-million-token raw files.

The rehearsal writes files of the real sizes (ogbn-arxiv: 21.7M feature values, Amazon: 4.4M
adjacency tokens); formatting them one by one in Python would take minutes. Here every token is
a row of a fixed-width byte matrix (sign, digits, separator), and a mask drops the unused
leading bytes, so a whole chunk is formatted by a few numpy operations. Output is deterministic
(gzip with ``mtime=0``).
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np

#: tokens formatted per numpy pass (bounds the temporary byte matrices to ~100 MB)
CHUNK = 2_000_000
_ZERO = ord("0")


def _digits(values: np.ndarray, min_digits: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``(N, W)`` ASCII digits of nonnegative ints and the mask of bytes to keep (no leading
    zeros, but at least ``min_digits`` digits)."""
    values = np.asarray(values, dtype=np.int64)
    top = int(values.max()) if values.size else 0
    width = max(min_digits, len(str(top)))
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    digits = (values[:, None] // powers) % 10
    count = np.maximum((values[:, None] >= powers).sum(axis=1), min_digits)
    keep = np.arange(width) >= (width - count)[:, None]
    return (digits + _ZERO).astype(np.uint8), keep


def _column(byte: int | np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A one-byte-wide column (the same byte, or one per token) with its keep mask."""
    data = np.broadcast_to(np.asarray(byte, dtype=np.uint8), keep.shape).reshape(-1, 1)
    return data, keep.reshape(-1, 1)


def _join(blocks: list[tuple[np.ndarray, np.ndarray]]) -> bytes:
    data = np.hstack([b for b, _ in blocks])
    keep = np.hstack([k for _, k in blocks])
    return data[keep].tobytes()


def format_ints(values: np.ndarray, seps: np.ndarray) -> bytes:
    """Signed ints, each followed by its separator byte (``seps[i]``, e.g. ``,`` or ``\\n``)."""
    values = np.asarray(values, dtype=np.int64).reshape(-1)
    seps = np.asarray(seps, dtype=np.uint8).reshape(-1)
    out = []
    for lo in range(0, len(values), CHUNK):
        v, s = values[lo:lo + CHUNK], seps[lo:lo + CHUNK]
        negative = v < 0
        digits = _digits(np.abs(v))
        out.append(_join([_column(ord("-"), negative), digits, _column(s, np.ones_like(negative))]))
    return b"".join(out)


def format_floats(values: np.ndarray, seps: np.ndarray, decimals: int = 6) -> bytes:
    """Floats as ``[-]I.FFFFFF`` (``decimals`` digits, as OGB's csv files), each followed by its
    separator byte."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    seps = np.asarray(seps, dtype=np.uint8).reshape(-1)
    scale = 10 ** decimals
    out = []
    for lo in range(0, len(values), CHUNK):
        v, s = values[lo:lo + CHUNK], seps[lo:lo + CHUNK]
        fixed = np.rint(np.abs(v) * scale).astype(np.int64)
        negative = (v < 0) & (fixed > 0)
        ones = np.ones(len(v), dtype=bool)
        out.append(_join([_column(ord("-"), negative), _digits(fixed // scale),
                          _column(ord("."), ones), _digits(fixed % scale, decimals),
                          _column(s, ones)]))
    return b"".join(out)


def row_seps(rows: int, cols: int, sep: bytes = b",") -> np.ndarray:
    """Separators of a ``rows x cols`` table: ``sep`` between columns, ``\\n`` after each row."""
    seps = np.full((rows, cols), sep[0], dtype=np.uint8)
    seps[:, -1] = ord("\n")
    return seps.reshape(-1)


def table_text(values: np.ndarray, sep: bytes = b",", decimals: int | None = None) -> bytes:
    """A 1-D (one value per line) or 2-D array as delimited text, ints or fixed-point floats."""
    values = np.asarray(values)
    table = values.reshape(len(values), -1)
    seps = row_seps(table.shape[0], table.shape[1], sep)
    if decimals is None:
        return format_ints(table, seps)
    return format_floats(table, seps, decimals)


def gzip_bytes(data: bytes, level: int = 6) -> bytes:
    """``data`` gzip-compressed reproducibly (no file name, ``mtime=0``)."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=level) as f:
        f.write(data)
    return buf.getvalue()


def write_bytes(path: Path, data: bytes) -> int:
    """Write ``data`` to ``path`` (parents created) and return its size."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return len(data)
