"""Pickles as Python 2 wrote them: the Planetoid ``ind.*`` files' exact encoding.

The real ``ind.pubmed.*`` files were written by Python 2 (protocol 2), where numpy's raw array
bytes are a ``str`` (opcodes ``SHORT_BINSTRING`` / ``BINSTRING``). Python 3's protocol 2 writes
``bytes`` instead as ``_codecs.encode(<latin-1 text>, 'latin1')``, UTF-8 inside the pickle, which
is ~25% larger and takes another code path on loading. This pickler writes ``bytes`` as Python 2
``str``, so the loader (``pickle.load(f, encoding="latin1")``) reads ours exactly as the real
ones: the strings come back as latin-1 text, which numpy's unpickling turns back into bytes.
"""

from __future__ import annotations

import io
import pickle
import struct
from typing import Any


class Py2Pickler(pickle._Pickler):  # the pure-Python pickler: its dispatch table is editable
    """Protocol-2 pickler writing ``bytes`` as Python 2 ``str`` opcodes."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_py2_str(self, obj: bytes) -> None:
        n = len(obj)
        if n < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([n]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", n) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str


def dumps_py2(obj: Any) -> bytes:
    """``obj`` pickled with protocol 2 as Python 2 would write it."""
    buf = io.BytesIO()
    Py2Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue()
