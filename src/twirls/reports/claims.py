"""The paper's claims and their verdicts, computed from the results (``claims.yaml``).

Each claim has checks; a check (one rule of :data:`RULES` with its cells) yields outcomes, one
per group it compares (a dataset, a pair of models, a curve): True, False, or None (untested:
a cell without our number). The claim's verdict: ``holds`` (every group holds), ``does not
hold`` (every tested group fails), ``partly`` (naming the groups that hold, fail, are untested)
or ``untested``. Cells from a stand-in protocol are used and the verdict says so. The same
checks run on the paper's own numbers, as a check of the rule itself.

A comparison of two means is a *close call* when its distance from the rule's threshold is
below the standard error of their difference (our runs' spread): more runs, or another
machine's rounding, could turn it either way. The report names those groups beside the verdict.
Two cells that ran on the same several splits (Table 3: the ten splits of the
heterophily sets, one run each) are compared split by split, as the split decides much of a
run's score (its test nodes): the error is that of the mean of their per-split differences,
``pstdev(d_i) / sqrt(n)`` (:func:`per_split_error`; a split's seeds averaged first). Any other
two cells (the seeds of one split, as on the citation and attacked graphs, share nothing but
the split) give ``sqrt(std_a² / runs_a + std_b² / runs_b)``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

CLAIMS = Path(__file__).with_name("claims.yaml")
#: one cell's runs: ``(split, seed)`` -> score
RunScores = dict[tuple[str, str], float]
#: how a close call names the error of a paired comparison (:meth:`Values.difference_error`)
PAIRED = "standard error of the per-split difference"
UNPAIRED = "standard error of the difference"
#: statuses whose number is ours (paper-only and no-data cells have none).
OURS = {"reproduced", "differs", "stand-in", "not-in-paper"}


@dataclass
class Outcome:
    """One compared group of a check."""

    group: str
    ok: bool | None
    detail: str
    stand_in: bool = False
    gap: float | None = None  # subject minus the best other, where the rule compares so
    error: float | None = None  # standard error of the compared difference (our runs)
    close: bool = False  # decided within one standard error of the rule's threshold
    error_words: str = UNPAIRED  # how that error was computed (Values.difference_error)
    summary: str = ""  # the verdict's words for an outcome that counts over groups


@dataclass
class Values:
    """Where checks read numbers: results.csv rows (``column``: ``mean`` for ours, ``paper_mean``
    for the paper's) and the sweeps' points (ours only; the paper's figures have no numbers)."""

    results: pd.DataFrame
    sweeps: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    column: str = "mean"
    #: a cell's runs by ``(table, dataset, model, metric)`` (None where not known)
    runs: Callable[[str, str, str, str], RunScores | None] | None = None

    def _row(self, table: str, dataset: str, model: str, metric: str) -> pd.Series | None:
        """The results.csv row of one cell, or None."""
        r = self.results
        hit = r[(r["table"] == table) & (r["dataset"] == dataset) & (r["model"] == model)
                & (r["metric"] == metric)]
        return hit.iloc[0] if len(hit) else None

    def cell(self, table: str, dataset: str, model: str, metric: str) -> tuple[float | None, bool]:
        """``(value, from a stand-in protocol)``; value None when the cell has no number."""
        row = self._row(table, dataset, model, metric)
        if row is None:
            return None, False
        if self.column == "mean" and row["status"] not in OURS:
            return None, False
        value = row[self.column]
        stand_in = self.column == "mean" and row["status"] == "stand-in"
        return (None if pd.isna(value) else float(value)), stand_in

    def error(self, table: str, dataset: str, model: str, metric: str) -> float | None:
        """Standard error of our mean, ``std / sqrt(runs)``; None for the paper's numbers (their
        runs are not known) and for a cell without a spread."""
        if self.column != "mean":
            return None
        row = self._row(table, dataset, model, metric)
        if row is None or pd.isna(row["std"]) or not row["runs"]:
            return None
        return float(row["std"]) / math.sqrt(float(row["runs"]))

    def difference_error(self, table: str, dataset: str, metric: str,
                         models: tuple[str, str]) -> tuple[float | None, str]:
        """Standard error of the difference of two models' means and its name: of the mean
        per-split difference when both ran the same several splits (:meth:`paired_error`),
        else from each mean's own error (None if either lacks one)."""
        paired = self.paired_error(table, dataset, metric, models)
        if paired is not None:
            return paired, PAIRED
        errors = [self.error(table, dataset, m, metric) for m in models]
        return (None if None in errors else math.hypot(*errors)), UNPAIRED

    def paired_error(self, table: str, dataset: str, metric: str,
                     models: tuple[str, str]) -> float | None:
        """:func:`per_split_error` of two cells' runs; None without a way to read them."""
        if self.column != "mean" or self.runs is None:
            return None
        a, b = (self.runs(table, dataset, m, metric) for m in models)
        return per_split_error(a, b) if a and b else None

    def curve(self, sweep: str, curve: str, x: str) -> list[tuple[Any, float]]:
        """``[(x value, mean)]`` of one curve, by x; a curve without x gives ``[(None, mean)]``."""
        if self.column != "mean":
            return []
        pts = [p for p in self.sweeps.get(sweep, []) if p["curve"] == curve]
        return sorted(((p["point"].get(x), p["mean"]) for p in pts),
                      key=lambda t: (t[0] is not None, t[0] if t[0] is not None else 0))


def by_split(scores: RunScores) -> dict[str, list[float]]:
    """A cell's scores split by split: ``{split: [its seeds' scores]}``."""
    out: dict[str, list[float]] = {}
    for (split, _), value in scores.items():
        out.setdefault(split, []).append(value)
    return out


def per_split_error(a: RunScores, b: RunScores) -> float | None:
    """``pstdev(d_i) / sqrt(n)`` over the ``n`` splits of two cells that ran on the same splits,
    more than one, ``d_i`` the difference of their means on split ``i``; None otherwise, and
    when a cell ran more seeds on one split than on another (its mean would then weigh the
    splits unequally, and no longer be the mean of its split means). Seeds of one split are
    averaged, not paired: seed ``s`` of two models shares nothing, and what a model gains or
    loses on a split it does on each of that split's seeds, so their differences are not
    independent. The two cells may run other numbers of seeds a split."""
    means = []
    for scores in (a, b):
        splits = by_split(scores)
        if len({len(v) for v in splits.values()}) != 1:
            return None
        means.append({split: statistics.fmean(v) for split, v in splits.items()})
    if means[0].keys() != means[1].keys() or len(means[0]) < 2:
        return None
    differences = [means[0][split] - means[1][split] for split in means[0]]
    return statistics.pstdev(differences) / math.sqrt(len(differences))


def _missing(group: str, what: str) -> Outcome:
    return Outcome(group, None, f"{group}: untested ({what} has no number)")


def _judged(group: str, value: float, threshold: float, detail: str, stand_in: bool,
            spread: tuple[float | None, str], gap: float | None = None) -> Outcome:
    """``value >= threshold``, a close call when they are less than the standard error apart
    (``spread``: that error and its name, :meth:`Values.difference_error`); the detail names
    the error either way."""
    error, words = spread
    close = error is not None and abs(value - threshold) < error
    if close:
        detail += f"; a close call ({words} {error:.2f})"
    elif error is not None:
        detail += f"; {words} {error:.2f}"
    return Outcome(group, value >= threshold - 1e-9, detail, stand_in, gap, error,
                   error_words=words, close=close)


def at_least_best_of(v: Values, c: dict) -> list[Outcome]:
    """``subject`` >= max(``others``) - ``tolerance`` on each dataset (others without a number
    are left out and named)."""
    out, metric = [], c.get("metric", "accuracy")
    for ds in c["datasets"]:
        s, s_in = v.cell(c["table"], ds, c["subject"], metric)
        got = {m: v.cell(c["table"], ds, m, metric) for m in c["others"]}
        present = {m: x for m, (x, _) in got.items() if x is not None}
        group = f"{ds} ({c['name']})" if c.get("name") else ds
        if s is None or not present:
            out.append(_missing(group, c["subject"] if s is None else "every other model"))
            continue
        best = max(present, key=present.get)
        skipped = [m for m in c["others"] if m not in present]
        detail = (f"{group}: {c['subject']} {s:.2f} vs best {best} {present[best]:.2f} "
                  f"({s - present[best]:+.2f})" + (f"; not run: {', '.join(skipped)}"
                                                   if skipped else ""))
        stand_in = s_in or any(got[m][1] for m in present)
        gap = s - present[best]
        error = v.difference_error(c["table"], ds, metric, (c["subject"], best))
        out.append(_judged(group, gap, -float(c["tolerance"]), detail, stand_in, error, gap))
    return out


def best_on_at_least(v: Values, c: dict) -> list[Outcome]:
    """``subject`` within ``near`` of the best on each dataset, and the best (ties count) on at
    least ``count`` of them (one more outcome)."""
    per = at_least_best_of(v, {**c, "tolerance": c["near"]})
    best = [o for o in per if o.gap is not None and o.gap >= -1e-9]
    tested = [o for o in per if o.ok is not None]
    n = len(best)
    enough = True if n >= int(c["count"]) else (None if len(tested) < len(per) else False)
    detail = (f"best on {n} of {len(per)} datasets "
              f"({', '.join(o.group for o in best) or 'none'})")
    # the count is a close call when leads or deficits within one standard error decide it
    narrow = [o for o in per if o.gap is not None and o.error is not None
              and abs(o.gap) < o.error]
    if enough is True:  # would it still hold without the narrow leads?
        close = sum(o not in narrow for o in best) < int(c["count"])
    else:  # would it hold if the narrow deficits turned into leads?
        close = enough is False and n + sum(o not in best for o in narrow) >= int(c["count"])
    if narrow:
        detail += ("; within one standard error of the runner-up on "
                   f"{', '.join(o.group for o in narrow)}")
    for o in narrow:  # its own line says so too: "the best" is decided within the noise
        if not o.close:
            o.close = True
            error = f"{o.error_words} {o.error:.2f}"
            o.detail = (o.detail.removesuffix(f"; {error}")
                        + f"; a close call for the best ({error})")
    names = f" ({', '.join(o.group for o in best)})" if best else ""
    summary = (f"the best on {n} of {len(per)} datasets{names}"
               + ("" if enough else f", {'untested for' if enough is None else 'not'} "
                  f">= {c['count']}"))
    per.append(Outcome(f"the best on >= {c['count']} datasets", enough, detail, close=close,
                       summary=summary))
    return per


def margin_over(v: Values, c: dict) -> list[Outcome]:
    """``subject`` - ``other`` >= ``margin`` on each dataset (a negative margin: at most that
    far below)."""
    out, metric = [], c.get("metric", "accuracy")
    for ds in c["datasets"]:
        s, s_in = v.cell(c["table"], ds, c["subject"], metric)
        o, o_in = v.cell(c["table"], ds, c["other"], metric)
        group = f"{ds} ({c.get('name') or c['subject'] + ' vs ' + c['other']})"
        if s is None or o is None:
            out.append(_missing(group, c["subject"] if s is None else c["other"]))
            continue
        error = v.difference_error(c["table"], ds, metric, (c["subject"], c["other"]))
        out.append(_judged(group, s - o, float(c["margin"]),
                           f"{group}: {s:.2f} - {o:.2f} = {s - o:+.2f}", s_in or o_in, error))
    return out


def ratio_at_most(v: Values, c: dict) -> list[Outcome]:
    """time(subject) / time(reference) <= ``max_ratio`` for each pair (same run)."""
    out = []
    for subject, ref in c["pairs"]:
        s, s_in = v.cell(c["table"], c["dataset"], subject, c["metric"])
        r, r_in = v.cell(c["table"], c["dataset"], ref, c["metric"])
        group = f"{subject} ÷ {ref}"
        if s is None or not r:
            out.append(_missing(group, subject if s is None else ref))
            continue
        out.append(Outcome(group, s / r <= float(c["max_ratio"]) + 1e-9,
                           f"{group}: {s / r:.2f}", s_in or r_in))
    return out


def _curve(v: Values, c: dict, curve: str | None = None) -> list[tuple[Any, float]]:
    return [p for p in v.curve(c["sweep"], curve or c["curve"], c["x"]) if p[0] is not None]


def curve_keeps_level(v: Values, c: dict) -> list[Outcome]:
    """The curve at its largest x is within ``tolerance`` of its best."""
    pts, group = _curve(v, c), f"{c['curve']} keeps its level"
    if not pts:
        return [_missing(group, f"{c['sweep']} {c['curve']}")]
    best, last = max(m for _, m in pts), pts[-1]
    return [Outcome(group, last[1] >= best - float(c["tolerance"]) - 1e-9,
                    f"{group}: {last[1]:.2f} at {c['x']}={last[0]}, best {best:.2f}")]


def curve_drops(v: Values, c: dict) -> list[Outcome]:
    """The curve at its largest x is at least ``margin`` below its best."""
    pts, group = _curve(v, c), f"{c['curve']} drops"
    if not pts:
        return [_missing(group, f"{c['sweep']} {c['curve']}")]
    best, last = max(m for _, m in pts), pts[-1]
    return [Outcome(group, last[1] <= best - float(c["margin"]) + 1e-9,
                    f"{group}: {last[1]:.2f} at {c['x']}={last[0]}, best {best:.2f}")]


def curve_end_near(v: Values, c: dict) -> list[Outcome]:
    """The curve at its largest x is within ``tolerance`` of ``reference`` (a level, or the
    reference curve's value at the same x)."""
    pts, group = _curve(v, c), f"{c['curve']} meets {c['reference']}"
    ref_pts = v.curve(c["sweep"], c["reference"], c["x"])
    if not pts or not ref_pts:
        return [_missing(group, f"{c['sweep']} {c['curve'] if not pts else c['reference']}")]
    x, last = pts[-1]
    ref = next((m for rx, m in ref_pts if rx in (None, x)), None)
    if ref is None:
        return [_missing(group, f"{c['reference']} at {c['x']}={x}")]
    return [Outcome(group, abs(last - ref) <= float(c["tolerance"]) + 1e-9,
                    f"{group}: {last:.2f} at {c['x']}={x} vs {ref:.2f}")]


def curve_min_at_least(v: Values, c: dict) -> list[Outcome]:
    """Every point of the curve is at least ``level``."""
    pts, group = _curve(v, c), f"{c['curve']} >= {c['level']}"
    if not pts:
        return [_missing(group, f"{c['sweep']} {c['curve']}")]
    low = min(pts, key=lambda p: p[1])
    return [Outcome(group, low[1] >= float(c["level"]) - 1e-9,
                    f"{group}: lowest {low[1]:.2f} at {c['x']}={low[0]}")]


RULES: dict[str, Callable[[Values, dict], list[Outcome]]] = {
    f.__name__: f for f in (at_least_best_of, best_on_at_least, margin_over, ratio_at_most,
                            curve_keeps_level, curve_drops, curve_end_near, curve_min_at_least)}


def verdict(outcomes: list[Outcome]) -> str:
    """``holds`` / ``does not hold`` / ``partly: ...`` / ``untested``; an outcome that counts
    over groups (``the best on >= 3 datasets``) is told in its own words."""
    groups = [o for o in outcomes if not o.summary]
    held = [o.group for o in groups if o.ok is True]
    failed = [o.group for o in groups if o.ok is False]
    untested = [o.group for o in groups if o.ok is None]
    if all(o.ok is None for o in outcomes):
        return "untested"
    if all(o.ok is True for o in outcomes):
        text = "holds"
    elif all(o.ok is False for o in outcomes):
        text = "does not hold"
    else:
        parts = [f"holds on {', '.join(held)}" if held else "",
                 f"not on {', '.join(failed)}" if failed else "",
                 f"untested on {', '.join(untested)}" if untested else ""]
        parts += [o.summary for o in outcomes if o.summary]
        text = "partly: " + "; ".join(p for p in parts if p)
    if any(o.stand_in for o in outcomes if o.ok is not None):
        text += " (on stand-in cells)"
    return text


def close_calls(outcomes: list[Outcome]) -> list[str]:
    """The groups decided within one standard error (see the module docstring)."""
    return [o.group for o in outcomes if o.ok is not None and o.close]


def read_claims(path: Path = CLAIMS) -> list[dict[str, Any]]:
    """The claims, each checked for a known rule and its fields (one clear error if not)."""
    claims = yaml.safe_load(path.read_text()) or []
    for i, claim in enumerate(claims):
        for key in ("id", "claim", "source", "test", "checks"):
            if key not in claim:
                raise ValueError(f"{path}: claim {i + 1} has no {key!r}")
        for check in claim["checks"]:
            if check.get("rule") not in RULES:
                raise ValueError(f"{path}: claim {claim['id']!r}: unknown rule "
                                 f"{check.get('rule')!r}; known: {sorted(RULES)}")
    return claims


def evaluate(claim: dict[str, Any], values: Values) -> list[Outcome]:
    """Every outcome of every check of ``claim``."""
    out = []
    for check in claim["checks"]:
        try:
            out += RULES[check["rule"]](values, check)
        except KeyError as exc:
            raise ValueError(f"claim {claim['id']!r}: rule {check['rule']} needs {exc}") from None
    return out
