"""Choosing where to train: CUDA whenever torch sees a GPU, except for models on DGL's kernels.

Every model whose kernels are torch's (TWIRLS, MLP, SGC, GCN, APPNP, JKNet, GCNII, DAGNN, H2GCN,
the closed form), the fast Mettack, GNNGuard and the DeepRobust defenses run on CUDA whenever
``torch.cuda.is_available()``. GAT and GraphSAGE call DGL's layers, so they need a DGL built with
CUDA as well; PyPI's DGL (2.1.0) is CPU-only, and with it those two run on the CPU, with one
log line saying so, while the rest of the pipeline uses the GPU.
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


def cuda_status(needs_dgl: bool = False) -> tuple[bool, str]:
    """``(True, "")`` if CUDA is usable (for a model on DGL's kernels if ``needs_dgl``), else
    ``(False, reason)``."""
    if not torch.cuda.is_available():
        return False, "torch sees no CUDA GPU (torch.cuda.is_available() is False)"
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
            print(f"{who or 'model'}: runs on the CPU although a GPU is present: {reason}. "
                  "DGL's CUDA wheel fixes this (README, 'Device and GPUs').", file=sys.stderr)
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
