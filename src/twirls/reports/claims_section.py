"""The claims section of ``reports/README.md``: a verdict table, then each claim's cells."""

from __future__ import annotations

from collections import Counter
from typing import Any

from twirls.reports.claims import Values, close_calls, evaluate, verdict


def verdicts(claims: list[dict[str, Any]], ours: Values, paper: Values) -> list[dict[str, Any]]:
    """Per claim: its fields, ``outcomes`` and ``verdict`` on our runs, ``paper_verdict`` on
    the paper's own numbers (``—`` where the paper gives a figure without numbers)."""
    out = []
    for claim in claims:
        mine = evaluate(claim, ours)
        theirs = verdict(evaluate(claim, paper))
        out.append({**claim, "outcomes": mine, "verdict": verdict(mine),
                    "paper_verdict": "—" if theirs == "untested" else theirs})
    return out


def verdict_counts(judged: list[dict[str, Any]]) -> dict[str, int]:
    """``holds`` / ``partly`` / ``does not hold`` / ``untested`` -> number of claims."""
    kinds = Counter(j["verdict"].split(":")[0].removesuffix(" (on stand-in cells)")
                    for j in judged)
    return {k: kinds.get(k, 0) for k in ("holds", "partly", "does not hold", "untested")}


def claims_lines(judged: list[dict[str, Any]]) -> list[str]:
    """Markdown: the verdict table, then per claim the rule and every compared group."""
    lines = ["## The paper's claims", "",
             "Each verdict is computed from the cells named below by the rule in "
             "`src/twirls/reports/claims.yaml` (holds / does not hold / partly / untested: no "
             "data). *Close calls* are the comparisons decided by less than the standard error "
             "of the difference of the two means (our runs' std / sqrt(runs); for two cells "
             "on the same splits, one run each, as in Table 3, the standard error of their "
             "per-split differences): more runs, or another CPU's rounding, could turn them "
             "either way. The last column applies the "
             "same rule to the paper's own numbers.", "",
             "| # | claim (paper) | source | verdict | close calls | on the paper's numbers |",
             "|---|---|---|---|---|---|"]
    for i, j in enumerate(judged, start=1):
        close = ", ".join(close_calls(j["outcomes"])) or "—"
        lines.append(f"| {i} | “{j['claim']}” | {j['source']} | **{j['verdict']}** | {close} | "
                     f"{j['paper_verdict']} |")
    lines += ["", "### How each claim was tested", ""]
    for i, j in enumerate(judged, start=1):
        lines.append(f"{i}. **{j['id']}** — {j['test']}:")
        mark = {True: "holds", False: "fails", None: "untested"}
        lines += [f"   - {o.detail} — {mark[o.ok]}" + (" (stand-in)" if o.stand_in else "")
                  for o in j["outcomes"]]
    return [*lines, ""]
