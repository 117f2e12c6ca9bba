"""The one-line checks every params schema is built from (:mod:`twirls.config.schema`, and the
groups that check their own section, e.g. :mod:`twirls.config.table12`): each raises
:class:`ConfigError` naming the file, the key, the value and what is allowed."""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Any


class ConfigError(ValueError):
    """A value of ``params.yaml`` / ``params/<group>.yaml`` that the pipeline cannot use; the
    message is one line, naming the file."""


def locate(path: str) -> str:
    """``path`` (``group.key...``) with the params file that holds it."""
    from twirls.params import params_file

    top = path.split(".")[0]
    return f"{'params.yaml' if top.startswith('(') else params_file(top)}: {path}"


def fail(path: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{locate(path)} = {value!r}: {allowed}")


def choose(path: str, value: Any, choices: tuple[str, ...] | list[str], what: str = "") -> None:
    """``value`` must be one of ``choices``; a near miss gets "did you mean"."""
    if isinstance(value, str) and value in choices:
        return
    close = difflib.get_close_matches(str(value), list(choices), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    fail(path, value, f"unknown {what or 'value'}{hint}; allowed: {', '.join(choices)}")


def number(path: str, value: Any, *, integer: bool = False, lo: float | None = None,
           hi: float | None = None, lo_open: bool = False, hi_open: bool = False) -> None:
    """A number (an integer if ``integer``) within ``lo``..``hi`` (open ends if asked)."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    ok = is_int if integer else (is_int or isinstance(value, float))
    if ok and isinstance(value, float) and math.isnan(value):
        ok = False
    if ok and lo is not None:
        ok = value > lo if lo_open else value >= lo
    if ok and hi is not None:
        ok = value < hi if hi_open else value <= hi
    if not ok:
        kind = "an integer" if integer else "a number"
        left = "" if lo is None else f"{'>' if lo_open else '>='} {lo:g}"
        right = "" if hi is None else f"{'<' if hi_open else '<='} {hi:g}"
        bounds = " and ".join(b for b in (left, right) if b)
        note = (" (PyYAML reads 1e-3 as a string: write 1.0e-3)"
                if isinstance(value, str) and _is_float(value) else "")
        fail(path, value, f"expected {kind}{' ' + bounds if bounds else ''}{note}")


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def mapping(path: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        fail(path, value, "expected a mapping (key: value lines)")
    return value


def names(path: str, value: Any, choices: tuple[str, ...] | list[str], what: str) -> None:
    if not isinstance(value, list):
        fail(path, value, f"expected a list of {what}s")
    for i, item in enumerate(value):
        choose(f"{path}[{i}]", item, choices, what)


def keys(path: str, section: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    for key in section:
        choose(f"{path}.{key}", key, allowed, "key")
