"""Choosing where to train: CUDA whenever torch sees a GPU it has kernels for.

Every model (all torch-native, GAT and GraphSAGE included), the fast Mettack, GNNGuard and the
DeepRobust defenses run on CUDA whenever ``torch.cuda.is_available()``. A GPU that the
installed torch has no kernels for (e.g. a Blackwell GPU under the old torch 2.2.1 of the
reference stack) counts as no GPU, with one line saying why, instead of failing at the first
kernel launch.
"""

from __future__ import annotations

import sys
from functools import cache

import torch

CHOICES = ("auto", "cpu", "cuda")


def has_kernels_for(capability: tuple[int, int], arches: list[str]) -> bool:
    """Whether a torch built for ``arches`` (``torch.cuda.get_arch_list()``, e.g. ``sm_86``,
    ``compute_90``) runs on a GPU of compute ``capability``: a binary for the same major and a
    minor not above the GPU's (CUDA's binary compatibility), or PTX for an architecture not
    above it (compiled for the GPU when first loaded). An empty list says nothing: True."""
    major, minor = capability
    for arch in arches:
        kind, _, digits = arch.partition("_")
        if not digits.isdigit():
            continue
        a_major, a_minor = int(digits[:-1]), int(digits[-1])
        if kind == "sm" and a_major == major and a_minor <= minor:
            return True
        if kind == "compute" and (a_major, a_minor) <= (major, minor):
            return True
    return not arches


@cache
def gpu_arch_status() -> tuple[bool, str]:
    """``(True, "")`` if this torch build has kernels for GPU 0, else ``(False, reason)``: e.g.
    the reference stack's torch 2.2.1 (CUDA 12.1, up to sm_90) on a Blackwell GPU (sm_100,
    sm_120), where ``torch.cuda.is_available()`` is True but every kernel launch would fail."""
    capability = torch.cuda.get_device_capability(0)
    arches = torch.cuda.get_arch_list()
    if has_kernels_for(capability, arches):
        return True, ""
    return False, (f"this torch {torch.__version__} (CUDA {torch.version.cuda}) has no kernels "
                   f"for the GPU {torch.cuda.get_device_name(0)} (compute capability "
                   f"{capability[0]}.{capability[1]}; the build has {', '.join(arches)})")


def cuda_status() -> tuple[bool, str]:
    """``(True, "")`` if CUDA is usable, else ``(False, reason)``."""
    if not torch.cuda.is_available():
        return False, "torch sees no CUDA GPU (torch.cuda.is_available() is False)"
    return gpu_arch_status()


def pick_device(preference: str = "auto", *, who: str = "") -> torch.device:
    """Where to run.

    Args:
        preference: ``"auto"`` (CUDA if usable, else the CPU), ``"cpu"``, ``"cuda"`` or
            ``"cuda:<index>"`` (CUDA, or a ``RuntimeError`` saying why it is not usable).
        who: what runs (a model or stage name), for the line on stderr when ``"auto"`` finds a
            GPU it cannot use, and for errors.
    """
    if preference not in CHOICES and not str(preference).startswith("cuda:"):
        raise ValueError(f"device must be one of {CHOICES} (or 'cuda:<index>'), "
                         f"got {preference!r}")
    if preference == "cpu":
        return torch.device("cpu")
    ok, reason = cuda_status()
    if preference == "auto":
        if not ok and torch.cuda.is_available():
            print(f"{who or 'model'}: runs on the CPU although a GPU is present: {reason}. "
                  "A torch build with kernels for this GPU fixes this (README, 'Device and "
                  "GPUs').", file=sys.stderr)
        return torch.device("cuda" if ok else "cpu")
    if not ok:
        what = f"{who}: device" if who else "device"
        raise RuntimeError(f"{what} {preference!r} was requested but {reason}. Set "
                           "`device: auto` (GPU where usable, else CPU) or `device: cpu` in "
                           "params.yaml, or install a CUDA build of torch.")
    return torch.device(preference)


def stage_device(preference: str, *, who: str = "") -> torch.device:
    """:func:`pick_device` for a stage's entry point: a bad setting is one line and exit 1."""
    try:
        return pick_device(preference, who=who)
    except (ValueError, RuntimeError) as exc:
        raise SystemExit(f"error: {exc}") from None
