"""Where dropout masks come from: one random stream per seed (:class:`Masks`).

The batched trainer draws every seed's masks from its own stream (``BatchConfig.masks``). A run
trained alone draws them from torch's global generator through ``F.dropout`` (``masks: torch``
in its training config, the default), or, with ``masks: fast`` on the CPU, from the very
stream that seed's batched run draws from: :func:`twirls.train.loop.train_run` makes it the
run's :func:`active` stream (:func:`drawing_from`) and every model's dropout
(:func:`twirls.models.layers.dropout`) draws from it, in forward order, as the batched models
draw for that seed. So a seed trained alone and in a batch gets the same masks, and a mask costs
~1 ns an entry instead of ``bernoulli_``'s ~12 ns.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
from torch import Tensor

MASKS = ("fast", "torch")  # BatchConfig.masks, TrainConfig.masks


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
    (0.2 → 0.199997; 0.5 exact). On CUDA both modes draw with per-seed CUDA generators.
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
            self.streams = [np.random.PCG64(int(s)) for s in seeds]

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
        kept = np.empty(math.prod(shape), dtype=bool)
        self._kept(k, keep, kept)
        return self._scaled(kept, keep).view(shape)

    def _scaled(self, kept: np.ndarray, keep: float) -> Tensor:
        """``kept / keep`` as a tensor of ``dtype``: the bits of ``kept.to(dtype).div_(keep)``
        (``1 / keep`` is that very quotient, ``0 · s = 0``), converted from the bytes of
        ``kept`` (~0.1 ns an entry) instead of from ``bool`` (~0.6 ns)."""
        scale = float(torch.ones((), dtype=self.dtype).div_(keep))
        return torch.from_numpy(kept.view(np.uint8)).to(self.dtype).mul_(scale)

    def _kept(self, k: int, keep: float, out: np.ndarray) -> None:
        """``out[i]``: entry ``i`` is kept (a 16-bit draw of stream ``k`` below the threshold)."""
        threshold = round(keep * 2**16)
        words = self.streams[k].random_raw((out.size + 3) // 4).view(np.uint16)[:out.size]
        if threshold >= 2**16:
            out[:] = True
        else:
            np.less(words, np.uint16(threshold), out=out)


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
