"""Opening the project's C kernels (``csr_kernel.c``, ``masks_kernel.c``; ``make`` builds each
into the environment as ``$(VENV)/lib/libtwirls_<name>.so``).

A library built from another version of its source (a ``git pull`` without ``make``) takes
other arguments, and one that computes otherwise would change results: either is refused with
one warning, and its caller goes on without it (the same results, slower)."""

from __future__ import annotations

import ctypes
import hashlib
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

Functions = TypeVar("Functions")


def open_library(library: Path, source: Path, version: tuple[str, int],
                 bind: Callable[[ctypes.CDLL], tuple[Functions | None, str]], instead: str,
                 unversioned: int | None = None) -> tuple[Functions | None, str]:
    """``(functions, "sha256:<library's first 12 hex digits>")``, or ``(None, "rejected:
    <why>")`` with a warning. ``version``: the library's function that returns its version and
    the version expected (a library without that function is version ``unversioned``);
    ``bind(lib)``: the library's functions, typed, and ``""``, or what failed its check;
    ``instead``: what goes on without it (for the warning, e.g. "the masks stay NumPy's")."""
    try:
        lib = ctypes.CDLL(str(library))
    except OSError as err:
        return None, f"rejected: {err}"
    symbol, expected = version
    function = getattr(lib, symbol, None)
    if function is not None:
        function.restype = ctypes.c_int
    built = unversioned if function is None else function()
    functions = None
    if built != expected:
        problem = f"it was built from version {built} of the kernel, not {expected}"
    else:
        functions, problem = bind(lib)
    if problem:
        warnings.warn(f"twirls: {library} is not used ({problem}); {instead} until `make` "
                      f"rebuilds it from {source}", RuntimeWarning, stacklevel=4)
        return None, f"rejected: {problem}"
    return functions, "sha256:" + hashlib.sha256(library.read_bytes()).hexdigest()[:12]


class Switch:
    """Whether a kernel is used (``on``); :meth:`off` turns it off within a block (for
    comparisons)."""

    def __init__(self) -> None:
        self.on = True

    @contextmanager
    def off(self) -> Iterator[None]:
        before, self.on = self.on, False
        try:
            yield
        finally:
            self.on = before
