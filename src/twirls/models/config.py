"""Model hyperparameters: one frozen dataclass per model (:class:`ModelConfig`), built from a
plain-dict config (a ``params.yaml`` section) after checking its keys."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

C = TypeVar("C", bound="ModelConfig")


def resolve_config(
    model: str,
    cfg: Mapping[str, Any] | None,
    defaults: Mapping[str, Any],
    required: tuple[str, ...] = (),
) -> dict[str, Any]:
    """``defaults`` updated with ``cfg``, after rejecting keys that ``defaults`` does not know.

    Args:
        model: model name for the error message (``"TWIRLS"``, ``"GCN"``, ...).
        cfg: the user's hyperparameters (``None`` means all defaults).
        defaults: every accepted optional key with its default value.
        required: keys without a default, which ``cfg`` must give.

    Raises:
        ValueError: naming the unknown (or missing) key, the closest known one, and every
            accepted key.
    """
    cfg = dict(cfg or {})
    defaults = {**dict.fromkeys(required), **defaults}
    missing = [key for key in required if key not in cfg]
    if missing:
        raise ValueError(
            f"{model} config: missing key {missing[0]!r} (required: {', '.join(required)}). "
            "Add it to the model's section in params.yaml."
        )
    unknown = [key for key in cfg if key not in defaults]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), list(defaults), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"{model} config: unknown key {key!r}.{hint} Accepted keys: "
            f"{', '.join(sorted(defaults))}. Fix the model's section in params.yaml."
        )
    return {**defaults, **cfg}


def check(condition: bool, model: str, message: str) -> None:
    """Raise ``ValueError("<model> config: <message>")`` unless ``condition`` holds."""
    if not condition:
        raise ValueError(f"{model} config: {message}")


def check_rates(model: str, **rates: float | None) -> None:
    """Every given dropout rate lies in ``[0, 1)`` (``None``: "use another rate", accepted)."""
    for key, rate in rates.items():
        check(rate is None or 0.0 <= rate < 1.0, model, f"{key} must be in [0, 1), got {rate}")


def field_defaults(cls: type) -> dict[str, Any]:
    """``{name: default}`` of the dataclass ``cls``'s fields that have a default."""
    return {f.name: f.default for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING}


class ModelConfig:
    """Base of the models' hyperparameter dataclasses (``GCNConfig``, ``TWIRLSConfig``, ...).

    A subclass is a ``@dataclass(frozen=True)`` whose fields are the config keys, each with its
    default (a field without one is a required key), and sets ``MODEL``, the name its error
    messages start with::

        @dataclass(frozen=True)
        class GCNConfig(ModelConfig):
            MODEL: ClassVar[str] = "GCN"
            layers: int = 2
            hidden: int = 16
    """

    MODEL: ClassVar[str] = "model"

    @classmethod
    def from_mapping(cls: type[C], cfg: Mapping[str, Any] | None) -> C:
        """``cfg`` (``None``: all defaults) as this dataclass; an unknown key (with "did you
        mean") or a missing required one is a ``ValueError`` (:func:`resolve_config`)."""
        required = tuple(f.name for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                         if f.default is dataclasses.MISSING
                         and f.default_factory is dataclasses.MISSING)
        return cls(**resolve_config(cls.MODEL, cfg, field_defaults(cls), required))
