"""Which stages ``params.yaml`` defines and which files each writes, for the report stage (it
reads every result through this list, never by globbing, so a stale file is never reported)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twirls.config.entries import TABLE4_EXTRA, TWIRLS_ROWS
from twirls.config.schema import ATTACKED_GROUPS, SWEEP_GROUPS, TRAIN_GROUPS
from twirls.stages.skeleton import StageOutputs


def stage_outputs(params: dict[str, Any]) -> dict[str, list[StageOutputs]]:
    """Stage family (as ``dvc dag`` names it, e.g. ``"table4-twirls@…"``) -> the outputs of each
    of its stages, for the groups present in ``params``; the sweeps and ``table11`` always (a
    sweep's extra tables when ``params`` has its ``extras``)."""
    out: dict[str, list[StageOutputs]] = {}
    for group in (*TRAIN_GROUPS, *ATTACKED_GROUPS):
        if group in params:
            out[f"{group}@…"] = [StageOutputs(group, name) for name in params[group]]
    t4 = params.get("table4")
    if t4:
        cells = [(d, g) for d in t4["datasets"] for g in t4["graphs"]]
        out["table4@…"] = [StageOutputs("table4", f"{d}-{g}-{m}")
                           for d, g in cells for m in t4["defenses"]]
        # one stage per dataset, over its graphs (TWIRLS: Table 4's graph, then the others)
        for family in (*(f"table4-{model}" for model in TWIRLS_ROWS), TABLE4_EXTRA):
            out[f"{family}@…"] = [StageOutputs(family, d) for d in t4["datasets"]]
    t9 = params.get("table9")
    if t9:
        out["table9@…"] = [StageOutputs("table9", d) for d in t9["datasets"]]
    for group in SWEEP_GROUPS:
        out[group] = [StageOutputs(group)]
        extras = (params.get(group) or {}).get("extras") or {}
        if extras:  # the curves run by stages of their own (one per extra table)
            stages = [StageOutputs.extra(group, table) for table in extras]
            out[f"{stages[0].group}@…"] = stages
    out["table11"] = [StageOutputs("table11")]
    return out


def results_files(params: dict[str, Any]) -> list[Path]:
    """Every results file of the stages of :func:`stage_outputs`, in ``dvc.yaml``'s order."""
    return [o.results for outs in stage_outputs(params).values() for o in outs]
