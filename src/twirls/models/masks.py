"""Where dropout masks come from: one random stream per seed (:class:`Masks`).

The batched trainer draws every seed's masks from its own stream (``BatchConfig.masks``). A run
trained alone draws them from torch's global generator through ``F.dropout`` (``masks: torch``
in its training config, the default), or, with ``masks: fast`` on the CPU, from the very
stream that seed's batched run draws from: :func:`twirls.train.loop.train_run` makes it the
run's :func:`active` stream (:func:`drawing_from`) and every model's dropout
(:func:`twirls.models.layers.dropout`) draws from it, in forward order, as the batched models
draw for that seed. So a seed trained alone and in a batch gets the same masks, and a mask costs
~1 ns an entry instead of ``bernoulli_``'s ~12 ns, ~0.6 ns where ``masks_kernel.c`` (built by
``make`` into the environment, ``$(VENV)/lib/libtwirls_masks_kernel.so``) draws the same words
as NumPy's PCG64 four steps at a time and makes a float32 mask in the same pass.
"""

from __future__ import annotations

import ctypes
import functools
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from twirls.models.c_library import Switch, open_library

MASKS = ("fast", "torch")  # BatchConfig.masks, TrainConfig.masks
SOURCE = Path(__file__).with_name("masks_kernel.c")  # what `make` compiles into LIBRARY
LIBRARY = Path(sys.prefix) / "lib" / "libtwirls_masks_kernel.so"
VERSION = 1  # twirls_masks_version() of masks_kernel.c: a library built from another is not used


class Masks:
    """One random stream per seed for dropout masks; ``noise(shape, p)`` is ``(K, *shape)``
    with entries ``Bernoulli(1 - p) / (1 - p)``, seed ``k``'s drawn from stream ``k``.

    ``mode="torch"``: stream ``k`` is a ``torch.Generator`` seeded with seed ``k`` and the masks
    are drawn as ``F.dropout`` draws them on the CPU (``bernoulli_(1 - p)``, then ``/(1 - p)``),
    in the order the unbatched model draws them: seed ``k``'s masks are those of today's
    single-seed run of seed ``k`` (:func:`twirls.train.loop.train_run` seeds torch with the seed
    just before training; nothing else draws from it). ``bernoulli_`` costs ~14 ns an entry on
    the CPU, the largest single cost of TWIRLS-base's epoch.

    ``mode="fast"``: stream ``k`` is NumPy's PCG64 seeded with seed ``k``; an entry is kept when
    a 16-bit draw is below ``round((1 - p) 2¹⁶)`` (~1 ns an entry): other masks than today's,
    from the same distribution but for the keep probability, rounded to a multiple of 2⁻¹⁶
    (0.2 → 0.199997; 0.5 exact). Where the masks kernel is loaded (:func:`kernel_status`), it
    draws the words and makes a float32 mask in one pass: the same masks. On CUDA both modes
    draw with per-seed CUDA generators.
    """

    def __init__(self, seeds: Sequence[int], mode: str = "fast",
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> None:
        if mode not in MASKS:
            raise ValueError(f"masks must be one of {MASKS}, got {mode!r}")
        self.device, self.dtype = torch.device(device), dtype
        self.mode = "torch" if self.device.type != "cpu" else mode
        if self.mode == "torch":
            self.streams = [torch.Generator(self.device).manual_seed(int(s)) for s in seeds]
        else:
            self.streams = [_pcg64(int(s)) for s in seeds]

    def __len__(self) -> int:
        return len(self.streams)

    def keep(self, positions: Sequence[int]) -> None:
        """Keep the streams at ``positions`` (the seeds left in a batch), in that order."""
        self.streams = [self.streams[k] for k in positions]

    def noise(self, shape: Sequence[int], p: float) -> Tensor:
        keep, shape = 1.0 - p, tuple(int(s) for s in shape)
        if self.mode == "torch":
            out = torch.empty((len(self), *shape), dtype=self.dtype, device=self.device)
            for k, gen in enumerate(self.streams):
                out[k].bernoulli_(keep, generator=gen)
            return out.div_(keep)
        if self._in_kernel():
            out = torch.empty((len(self), math.prod(shape)), dtype=self.dtype)
            for k in range(len(self)):
                self.streams[k].mask(_threshold(keep), _scale(keep, self.dtype), out[k])
            return out.view(len(self), *shape)
        kept = np.empty((len(self), math.prod(shape)), dtype=bool)
        for k in range(len(self)):
            self._kept(k, keep, kept[k])
        return self._scaled(kept, keep).view(len(self), *shape)

    def seed_noise(self, k: int, shape: Sequence[int], p: float) -> Tensor:
        """Seed ``k``'s next mask alone, ``shape`` (the draws ``noise`` would make for it)."""
        keep, shape = 1.0 - p, tuple(int(s) for s in shape)
        if self.mode == "torch":
            out = torch.empty(shape, dtype=self.dtype, device=self.device)
            return out.bernoulli_(keep, generator=self.streams[k]).div_(keep)
        if self._in_kernel():
            out = torch.empty(shape, dtype=self.dtype)
            self.streams[k].mask(_threshold(keep), _scale(keep, self.dtype), out)
            return out
        kept = np.empty(math.prod(shape), dtype=bool)
        self._kept(k, keep, kept)
        return self._scaled(kept, keep).view(shape)

    def _in_kernel(self) -> bool:
        """Whether the masks kernel makes the masks (float32 ones of its streams)."""
        return self.dtype == torch.float32 and all(isinstance(s, _Stream) for s in self.streams)

    def _scaled(self, kept: np.ndarray, keep: float) -> Tensor:
        """``kept / keep`` as a tensor of ``dtype``: the bits of ``kept.to(dtype).div_(keep)``
        (``1 / keep`` is that very quotient, ``0 · s = 0``), converted from the bytes of
        ``kept`` (~0.1 ns an entry) instead of from ``bool`` (~0.6 ns)."""
        return torch.from_numpy(kept.view(np.uint8)).to(self.dtype).mul_(_scale(keep, self.dtype))

    def _kept(self, k: int, keep: float, out: np.ndarray) -> None:
        """``out[i]``: entry ``i`` is kept (a 16-bit draw of stream ``k`` below the threshold)."""
        threshold = _threshold(keep)
        words = self.streams[k].random_raw((out.size + 3) // 4).view(np.uint16)[:out.size]
        if threshold >= 2**16:
            out[:] = True
        else:
            np.less(words, np.uint16(threshold), out=out)


def _scale(keep: float, dtype: torch.dtype) -> float:
    """``1 / keep`` rounded to ``dtype``: what a kept entry becomes."""
    return float(torch.ones((), dtype=dtype).div_(keep))


def _threshold(keep: float) -> int:
    """An entry is kept when its 16-bit draw is below this."""
    return round(keep * 2**16)


# ---------------------------------------------------------------------------- the masks kernel
class _Kernel(NamedTuple):
    """The library's functions (``masks_kernel.c``)."""

    words: Callable[..., None]  # twirls_pcg64_words
    mask: Callable[..., None]  # twirls_pcg64_mask


class _Stream:
    """NumPy's ``PCG64(seed)`` with its words drawn by the masks kernel: :meth:`random_raw`
    gives ``PCG64.random_raw``'s words, :meth:`mask` a float32 mask in the same pass. The
    state (``[state >> 64, state mod 2⁶⁴, inc >> 64, inc mod 2⁶⁴]``) advances in place."""

    def __init__(self, seed: int, kernel: _Kernel) -> None:
        state = np.random.PCG64(seed).state["state"]
        low = (1 << 64) - 1
        self.kernel = kernel
        self.state = np.array([state["state"] >> 64, state["state"] & low, state["inc"] >> 64,
                               state["inc"] & low], dtype=np.uint64)

    def random_raw(self, size: int) -> np.ndarray:
        out = np.empty(size, dtype=np.uint64)
        self.kernel.words(self.state.ctypes.data, size, out.ctypes.data)
        return out

    def mask(self, threshold: int, scale: float, out: Tensor) -> None:
        """``out`` (contiguous float32) ``= scale`` where the entry's draw is below
        ``threshold``, else ``+0``: the next ``(out.numel() + 3) // 4`` words' 16-bit lanes."""
        self.kernel.mask(self.state.ctypes.data, out.numel(), threshold, scale, out.data_ptr())


_kernel_use = Switch()  # off within kernel_disabled()


def kernel_disabled() -> AbstractContextManager[None]:
    """Within it, new :class:`Masks` draw with NumPy's generator (for comparisons)."""
    return _kernel_use.off()


def _pcg64(seed: int) -> np.random.PCG64 | _Stream:
    """Stream ``seed`` of ``masks="fast"``: drawn by the masks kernel where it is loaded (and
    not :func:`kernel_disabled`)."""
    kernel = _kernel()[0] if _kernel_use.on else None
    return np.random.PCG64(seed) if kernel is None else _Stream(seed, kernel)


def kernel_status() -> str:
    """Whether the fast masks come from the masks kernel: ``"none"`` (not built),
    ``"rejected: ..."`` or ``"sha256:<library's first 12 hex digits>"``."""
    return _kernel()[1]


@functools.cache
def _kernel() -> tuple[_Kernel | None, str]:
    return _open(LIBRARY) if LIBRARY.is_file() else (None, "none")


def _open(library: Path) -> tuple[_Kernel | None, str]:
    """:func:`_kernel` from ``library``: refused (with a warning) when it was built from another
    version of :data:`SOURCE` or its streams are not NumPy's (:func:`_self_check`)."""
    return open_library(library, SOURCE, ("twirls_masks_version", VERSION), _bind,
                        "the masks stay NumPy's")


def _bind(lib: ctypes.CDLL) -> tuple[_Kernel, str]:
    words, mask = lib.twirls_pcg64_words, lib.twirls_pcg64_mask
    words.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    mask.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float,
                     ctypes.c_void_p]
    words.restype = mask.restype = None
    kernel = _Kernel(words, mask)
    return kernel, _self_check(kernel)


def _self_check(kernel: _Kernel) -> str:
    """``""`` when the kernel's words and masks are NumPy's (a few seeds and lengths, masks of
    one to several blocks of words at three keep probabilities); else what differed."""
    for seed in (0, 1, 2**40 + 3):
        ours, numpys = _Stream(seed, kernel), np.random.PCG64(seed)
        for size in (1, 2, 3, 4, 5, 9, 1027):
            if not np.array_equal(ours.random_raw(size), numpys.random_raw(size)):
                return f"its words differ from NumPy's PCG64 (seed {seed}, {size} words)"
        for size in (1, 7, 4 * 256 + 3, 3 * 4 * 256):
            for keep in (0.5, 0.2, 1.0):
                out = torch.empty(size)
                ours.mask(_threshold(keep), _scale(keep, torch.float32), out)
                words = numpys.random_raw((size + 3) // 4).view(np.uint16)[:size]
                kept = torch.from_numpy(words < _threshold(keep)) if keep < 1 else \
                    torch.ones(size, dtype=torch.bool)
                if not torch.equal(out, kept.float().div_(keep)):
                    return f"its masks differ from NumPy's draws (seed {seed}, {size} entries)"
    return ""


_active: Masks | None = None  # the running run's stream (one per process: runs do not overlap)


def active() -> Masks | None:
    """The one-seed :class:`Masks` the running run draws its dropout masks from, if any."""
    return _active


@contextmanager
def drawing_from(masks: Masks | None) -> Iterator[None]:
    """Make ``masks`` (one seed's stream, or ``None``: torch's generator) the :func:`active`
    stream while the block runs."""
    global _active
    if masks is not None and len(masks) != 1:
        raise ValueError(f"drawing_from: a run draws from one seed's stream, got {len(masks)}")
    previous, _active = _active, masks
    try:
        yield
    finally:
        _active = previous
