"""Choosing where to train: CUDA whenever torch sees a GPU, except for models on DGL's kernels.

Every model whose kernels are torch's (TWIRLS, MLP, SGC, GCN, APPNP, JKNet, GCNII, DAGNN, H2GCN,
the closed form), the fast Mettack, GNNGuard and the DeepRobust defenses run on CUDA whenever
``torch.cuda.is_available()``. GAT and GraphSAGE call DGL's layers, so they need a DGL built with
CUDA as well; PyPI's DGL (2.1.0) is CPU-only, and with it those two run on the CPU, with one
log line saying so, while the rest of the pipeline uses the GPU. A GPU that the installed
torch has no kernels for (e.g. a Blackwell GPU under the pinned torch 2.2.1) counts as no GPU,
with one line saying why, instead of failing at the first kernel launch.
"""

from __future__ import annotations

import sys
from functools import cache

import torch

CHOICES = ("auto", "cpu", "cuda")


@cache
def dgl_cuda_status() -> tuple[bool, str]:
    """``(True, "")`` if the installed DGL can put a graph on CUDA, else ``(False, reason)``."""
    try:
        import dgl
    except ImportError as exc:
        return False, f"DGL is not installed ({exc})"
    try:
        dgl.graph(([0], [0])).to("cuda")
    except Exception as err:  # DGL CPU builds raise DGLError("... CUDA is not enabled ...")
        return False, f"the installed DGL {dgl.__version__} was built without CUDA ({err})"
    return True, ""


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
    the pinned torch 2.2.1 (CUDA 12.1, up to sm_90) on a Blackwell GPU (sm_100, sm_120), where
    ``torch.cuda.is_available()`` is True but every kernel launch would fail."""
    capability = torch.cuda.get_device_capability(0)
    arches = torch.cuda.get_arch_list()
    if has_kernels_for(capability, arches):
        return True, ""
    return False, (f"this torch {torch.__version__} (CUDA {torch.version.cuda}) has no kernels "
                   f"for the GPU {torch.cuda.get_device_name(0)} (compute capability "
                   f"{capability[0]}.{capability[1]}; the build has {', '.join(arches)})")


def cuda_status(needs_dgl: bool = False) -> tuple[bool, str]:
    """``(True, "")`` if CUDA is usable (for a model on DGL's kernels if ``needs_dgl``), else
    ``(False, reason)``."""
    if not torch.cuda.is_available():
        return False, "torch sees no CUDA GPU (torch.cuda.is_available() is False)"
    ok, reason = gpu_arch_status()
    if not ok:
        return False, reason
    if needs_dgl:
        return dgl_cuda_status()
    return True, ""


def pick_device(preference: str = "auto", *, needs_dgl: bool = False,
                who: str = "") -> torch.device:
    """Where to run.

    Args:
        preference: ``"auto"`` (CUDA if usable, else the CPU), ``"cpu"``, ``"cuda"`` or
            ``"cuda:<index>"`` (CUDA, or a ``RuntimeError`` saying why it is not usable).
        needs_dgl: the model calls DGL's layers (``requires_dgl`` on its class), so CUDA also
            needs a CUDA build of DGL. With ``"auto"`` and a GPU that DGL cannot use, the
            model runs on the CPU and one line on stderr says so.
        who: what runs (a model or stage name), for that line and for errors.
    """
    if preference not in CHOICES and not str(preference).startswith("cuda:"):
        raise ValueError(f"device must be one of {CHOICES} (or 'cuda:<index>'), "
                         f"got {preference!r}")
    if preference == "cpu":
        return torch.device("cpu")
    ok, reason = cuda_status(needs_dgl)
    if preference == "auto":
        if not ok and torch.cuda.is_available():
            fix = ("DGL's CUDA wheel fixes this" if gpu_arch_status()[0]
                   else "a torch build with kernels for this GPU fixes this")
            print(f"{who or 'model'}: runs on the CPU although a GPU is present: {reason}. "
                  f"{fix} (README, 'Device and GPUs').", file=sys.stderr)
        return torch.device("cuda" if ok else "cpu")
    if not ok:
        what = f"{who}: device" if who else "device"
        raise RuntimeError(f"{what} {preference!r} was requested but {reason}. Set "
                           "`device: auto` (GPU where usable, else CPU) or `device: cpu` in "
                           "params.yaml, or install CUDA builds of torch (and of DGL for GAT/"
                           "GraphSAGE).")
    return torch.device(preference)


def stage_device(preference: str, *, needs_dgl: bool = False, who: str = "") -> torch.device:
    """:func:`pick_device` for a stage's entry point: a bad setting is one line and exit 1."""
    try:
        return pick_device(preference, needs_dgl=needs_dgl, who=who)
    except (ValueError, RuntimeError) as exc:
        raise SystemExit(f"error: {exc}") from None
