"""Choosing where to train: CUDA only when both torch and the installed DGL can use it."""

from __future__ import annotations

import torch

CHOICES = ("auto", "cpu", "cuda")


def cuda_status() -> tuple[bool, str]:
    """``(True, "")`` if CUDA is usable, else ``(False, reason)``."""
    if not torch.cuda.is_available():
        return False, "torch sees no CUDA GPU (torch.cuda.is_available() is False)"
    import dgl

    try:
        dgl.graph(([0], [0])).to("cuda")
    except Exception as err:  # DGL CPU builds raise DGLError("... CUDA is not enabled ...")
        return False, f"the installed DGL {dgl.__version__} was built without CUDA ({err})"
    return True, ""


def pick_device(preference: str = "auto") -> torch.device:
    """``"auto"``: CUDA if usable (see :func:`cuda_status`), else CPU; ``"cpu"``; ``"cuda"``
    (or ``"cuda:1"``): CUDA, with a clear error if it is not usable."""
    if preference not in CHOICES and not str(preference).startswith("cuda:"):
        raise ValueError(f"device must be one of {CHOICES} (or 'cuda:<index>'), "
                         f"got {preference!r}")
    if preference == "cpu":
        return torch.device("cpu")
    ok, reason = cuda_status()
    if preference == "auto":
        return torch.device("cuda" if ok else "cpu")
    if not ok:
        raise RuntimeError(f"device {preference!r} was requested but {reason}. "
                           "Set `device: cpu` (or `auto`) in params.yaml, or install a CUDA "
                           "build of torch and DGL.")
    return torch.device(preference)
