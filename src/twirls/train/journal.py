"""The runs a stage has finished, kept on disk until the stage ends, so that a stage stopped
part-way (Ctrl-C, a session that ends, a killed process) goes on from them.

A stage's runs are independent and seed everything they use (:mod:`twirls.train.parallel`): a
run's result is a function of its inputs and of the code and machine that compute it. So
:func:`twirls.train.parallel.run_all` keeps each result, while the stage runs, under a key made
of exactly those:

* the run itself: its function and every argument (tensors by their bytes, dtype, shape and
  layout; dataclasses, dicts, lists and closures by their contents, recursively; functions and
  classes by their module and name);
* the code: the bytes of every ``.py`` file of the ``twirls`` package;
* the machine's arithmetic: Python, torch and numpy versions, the CPU model and instruction
  flags, torch's thread count, denormal flushing, MKL's kernels (the library of ``make
  mkl-intel-path`` switches them; another CPU rounds differently, see ``docs/fidelity.md``,
  "Same code, another CPU") and the CSR kernel's library (:mod:`twirls.models.csr_kernel`: on
  an Intel CPU its products are not MKL's).

A run whose key is in the journal is not trained again; its result is read back. Anything that
cannot be keyed (an argument of a type not listed above) turns the journal off for that pool:
it never guesses. The stage's entry (:func:`twirls.stages.skeleton.entry`) opens the journal
under ``$TWIRLS_JOURNAL`` (default ``.twirls/journal``), one folder per stage command, and
removes that folder when the stage ends without an error; an interrupted stage leaves it for
the next ``dvc repro``. Each result is a pickle written under a temporary name and renamed, so
a half-written file is never read (a damaged one counts as missing).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import os
import pickle
import platform
import shutil
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from twirls.models import csr_kernel
from twirls.train.cpu import flushes_denormals, mkl_code_path

#: the folder of the journals when ``$TWIRLS_JOURNAL`` is not set (relative: the stage's cwd)
DEFAULT_ROOT = Path(".twirls/journal")
#: bumped when the format of a key or a record changes
FORMAT = "twirls-journal/1"
#: environment variables of the math libraries (threads, instruction sets, reproducibility
#: modes such as ``MKL_CBWR``): part of every key
TUNING_ENV = ("OMP_", "MKL_", "KMP_", "ONEDNN_", "DNNL_", "OPENBLAS_", "ATEN_", "TORCH_")


class Unkeyable(TypeError):
    """An argument of a run the journal cannot key (the journal is then off for its pool)."""


class _Digest:
    """Feeds values into one sha256, recursively; shared objects are hashed once."""

    def __init__(self) -> None:
        self._memo: dict[int, bytes] = {}
        self._busy: set[int] = set()
        self._keep: list[Any] = []  # keeps memoised objects alive, so no id is reused

    def of(self, value: Any) -> bytes:
        key = id(value)
        if key in self._memo:
            return self._memo[key]
        if key in self._busy:  # a cycle: its start stands for itself
            return b"cycle"
        self._busy.add(key)
        try:
            h = hashlib.sha256()
            self._feed(h, value)
            digest = h.digest()
        finally:
            self._busy.discard(key)
        self._memo[key] = digest
        self._keep.append(value)
        return digest

    def _feed(self, h: Any, value: Any) -> None:  # noqa: C901 (one branch per kind)
        def part(tag: str, *children: Any) -> None:
            h.update(tag.encode() + b"\0")
            for child in children:
                h.update(self.of(child))

        if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
            h.update(f"{type(value).__name__}:{value!r}".encode())
        elif isinstance(value, enum.Enum):
            part(f"enum:{_name(type(value))}", value.name)
        elif isinstance(value, torch.Tensor):
            self._tensor(h, value)
        elif isinstance(value, np.ndarray) and value.dtype.hasobject:
            part(f"objects:{value.shape}", value.ravel().tolist())
        elif isinstance(value, np.ndarray):
            h.update(f"ndarray:{value.dtype}:{value.shape}".encode())
            h.update(np.ascontiguousarray(value).tobytes())
        elif isinstance(value, (np.generic,)):
            h.update(f"npscalar:{value.dtype}:{value!r}".encode())
        elif isinstance(value, (torch.device, torch.dtype, torch.layout, Path)):
            h.update(f"{type(value).__name__}:{value}".encode())
        elif isinstance(value, (list, tuple)):
            part(f"{type(value).__name__}:{len(value)}", *value)
        elif isinstance(value, (set, frozenset)):
            items = sorted(self.of(v) for v in value)
            h.update(f"set:{len(items)}".encode() + b"".join(items))
        elif isinstance(value, dict):
            part(f"dict:{_name(type(value))}:{len(value)}",
                 *[x for item in value.items() for x in item])
        elif isinstance(value, functools.partial):
            part("partial", value.func, value.args, value.keywords)
        elif isinstance(value, types.MethodType):
            part("method", value.__func__, value.__self__)
        elif isinstance(value, types.FunctionType):
            cells = [c.cell_contents for c in value.__closure__ or ()]
            part(f"function:{_name(value)}", value.__defaults__, value.__kwdefaults__, cells)
        elif isinstance(value, (types.BuiltinFunctionType, type, types.ModuleType)):
            h.update(f"named:{_name(value)}".encode())
        elif dataclasses.is_dataclass(value):
            fields = dataclasses.fields(value)
            part(f"dataclass:{_name(type(value))}",
                 *[x for f in fields for x in (f.name, getattr(value, f.name))])
        elif isinstance(value, torch.nn.Module) or hasattr(value, "__dict__"):
            part(f"object:{_name(type(value))}", vars(value))
        else:
            raise Unkeyable(f"cannot key a {_name(type(value))}")

    @staticmethod
    def _tensor(h: Any, t: Any) -> None:
        h.update(f"tensor:{t.dtype}:{tuple(t.shape)}:{t.layout}:{t.device.type}".encode())
        if t.layout == torch.strided:
            parts = [t]
        elif t.layout == torch.sparse_coo:
            t = t.coalesce() if not t.is_coalesced() else t
            parts = [t._indices(), t._values()]
        elif t.layout == torch.sparse_csr:
            parts = [t.crow_indices(), t.col_indices(), t.values()]
        else:
            raise Unkeyable(f"cannot key a tensor of layout {t.layout}")
        for p in parts:
            p = p.detach().cpu().contiguous()
            h.update(f"{p.dtype}:{tuple(p.shape)}".encode())
            h.update(p.view(-1).view(torch.uint8).numpy().tobytes() if p.numel() else b"")


def _name(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or ""
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if qualname is None:
        raise Unkeyable(f"cannot name {type(obj).__name__}")
    self = getattr(obj, "__self__", None)  # a builtin method: name its owner too
    owner = "" if self is None or isinstance(self, types.ModuleType) else _name(type(self)) + "."
    return f"{module}:{owner}{qualname}"


@functools.cache
def _code_digest() -> str:
    """The bytes of every ``.py`` file of the ``twirls`` package (path and contents)."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@functools.cache
def _cpu() -> str:
    """The CPU's model and instruction flags (``/proc/cpuinfo``), or what Python knows."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    keep = [line for line in lines if line.split(":")[0].strip() in ("model name", "flags")]
    return "\n".join(sorted(set(keep)))


def machine() -> str:
    """What decides the arithmetic of a run besides its inputs and the code."""
    tuning = sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith(TUNING_ENV))
    return "\n".join([FORMAT, sys.version, torch.__version__, np.__version__, _cpu(),
                      f"threads={torch.get_num_threads()}", _code_digest(),
                      f"flush_denormal={flushes_denormals()}",
                      f"mkl={mkl_code_path()}", f"csr_kernel={csr_kernel.status()}",
                      f"default_dtype={torch.get_default_dtype()}", *tuning])


class Journal:
    """The finished runs of one stage command, one file per run in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def keys(self, runs: Sequence[Callable[[], Any]]) -> list[str] | None:
        """Each run's key, or ``None`` when one of them cannot be keyed."""
        digest = _Digest()
        head = hashlib.sha256(machine().encode()).digest()
        try:
            return [hashlib.sha256(head + digest.of(run)).hexdigest() for run in runs]
        except Unkeyable:
            return None

    def load(self, key: str) -> tuple[bool, Any]:
        """``(True, result)`` for a kept run, else ``(False, None)``."""
        path = self.folder / f"{key}.pkl"
        try:
            return True, pickle.loads(path.read_bytes())
        except FileNotFoundError:
            return False, None
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
                ImportError):  # damaged, or from code that is gone: train it again
            return False, None

    def save(self, key: str, result: Any) -> None:
        """Keep ``result`` (not kept when it cannot be pickled: that run trains again)."""
        try:
            data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        part = self.folder / f"{key}.{os.getpid()}.part"  # two writers never share one
        part.write_bytes(data)
        os.replace(part, self.folder / f"{key}.pkl")

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


_CURRENT: Journal | None = None


def current() -> Journal | None:
    """The journal of the stage running in this process, if its entry opened one."""
    return _CURRENT


def folder_for(stage: str, argv: Sequence[str]) -> Path:
    """The journal folder of one stage command (its module and arguments)."""
    root = Path(os.environ.get("TWIRLS_JOURNAL") or DEFAULT_ROOT)
    tag = hashlib.sha256("\0".join([stage, *argv]).encode()).hexdigest()[:16]
    return root / f"{stage}-{tag}"


@contextmanager
def opened(folder: Path) -> Iterator[Journal]:
    """The journal in ``folder``, used by every :func:`twirls.train.parallel.run_all` of this
    block (the caller clears it once the stage has written its outputs)."""
    global _CURRENT
    previous, _CURRENT = _CURRENT, Journal(folder)
    try:
        yield _CURRENT
    finally:
        _CURRENT = previous
