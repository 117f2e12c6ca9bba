"""Where each paper table and figure comes from, read from ``dvc.yaml``: its params files, its
stages with the script they run, and the report's file. ``python -m twirls.dag sources --write``
writes it to ``docs/sources.md`` (a test keeps that file equal to what ``dvc.yaml`` gives; no
stage may read ``dvc.yaml``, which DVC refuses as a dependency)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

#: the stage families behind each figure (a figure's own family is found by its name)
FIGURE_FAMILIES = {"cosine-rho": "attention-figures", "attention-functions": "attention-figures",
                   "energy-per-step-cora": "energy"}
#: the stage families that make the inputs of the attacked tables (Tables 4 and 9)
ATTACKED_INPUTS = ("attack",)


#: params every stage reads (where to run, how many workers): left out of the table
RUNTIME = {"device", "threads", "jobs", "budget_hours"}


@dataclass
class Family:
    """A stage family of ``dvc.yaml``: the module its ``cmd`` runs, whether it is a
    ``foreach``/``matrix`` family (stages ``family@item``) and the params it declares (file ->
    top-level keys)."""

    script: str
    many: bool
    params: dict[str, set[str]]


def stage_families(dvc_yaml: Path) -> dict[str, Family]:
    families = {}
    for name, stage in yaml.safe_load(dvc_yaml.read_text())["stages"].items():
        body = stage.get("do", stage)
        found = re.search(r"python -m (\S+)", " ".join(str(body.get("cmd", "")).split()))
        params: dict[str, set[str]] = {}
        for item in body.get("params") or []:
            for file, keys in (item.items() if isinstance(item, dict)
                               else [("params.yaml", [item])]):
                top = {str(k).split(".")[0] for k in keys} - RUNTIME
                if top:  # an interpolated file name as its key: params/<energy.group>.yaml
                    file = re.sub(r"\$\{([^}]+)\}", r"<\1>", file)
                    params.setdefault(file, set()).update(top)
        families[name] = Family(found.group(1) if found else "",
                                "foreach" in stage or "matrix" in stage, params)
    return families


def family_cells(names: list[str], families: dict[str, Family]) -> tuple[str, str, str]:
    """The params, the stages and the scripts of ``names``, as Markdown."""
    files: dict[str, set[str]] = {}
    for name in names:
        for file, keys in families[name].params.items():
            files.setdefault(file, set()).update(keys)
    params = ", ".join(f"`{f}`" if f != "params.yaml" else f"`params.yaml` ({', '.join(sorted(k))})"
                       for f, k in sorted(files.items(), key=lambda fk: fk[0] == "params.yaml"))
    stages = ", ".join(f"`{n}@…`" if families[n].many else f"`{n}`" for n in names)
    scripts = ", ".join(dict.fromkeys(f"`{families[n].script}`" for n in names))
    return params, stages, scripts


def sources_lines(dvc_yaml: Path, tables: dict[str, str], figures: dict[str, str]) -> list[str]:
    """The section: one row per paper table (``tables``: id -> title) and figure."""
    families = stage_families(dvc_yaml)
    lines = ["# Where each table and figure comes from", "",
             "Generated from `dvc.yaml` by `python -m twirls.dag sources --write`; do not edit. "
             "Change a value in a params file and `dvc repro` reruns those stages "
             "(`dvc repro <stage>` for one); the outputs are under `reports/`.", "",
             "| paper | params | stages | script | output |", "|---|---|---|---|---|"]
    for table, title in tables.items():
        number = re.match(r"Table (\d+)", title).group(1)
        names = [f for f in families if re.fullmatch(rf"table{number}(-.+)?", f)]
        if not names:
            continue
        if number in ("4", "9"):
            names += [f for f in ATTACKED_INPUTS if f in families]
        params, stages, scripts = family_cells(names, families)
        lines.append(f"| {title.split(':')[0]} | {params} | {stages} | {scripts} | "
                     f"[{table}.md](../reports/tables/{table}.md) |")
    for figure, title in figures.items():
        family = FIGURE_FAMILIES.get(figure, figure)
        if family not in families:
            continue
        params, stages, scripts = family_cells([family], families)
        lines.append(f"| {title.split(':')[0]} ({figure}) | {params} | {stages} | {scripts} | "
                     f"[{figure}.png](../reports/figures/{figure}.png) |")
    return lines + [""]
