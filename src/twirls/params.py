"""Where the params live, and reading exactly the params a stage declares in ``dvc.yaml``.

``params.yaml`` holds the knobs every stage shares (:data:`SHARED`: threads, jobs, device, the
seed count, the attention, the attack, the datasets to fetch, the report); each paper table or
figure has its own file, ``params/<group>.yaml``, whose one top-level key is ``<group>`` (e.g.
``params/table4.yaml`` holds ``table4``). A stage parses only the files it declares, which keeps
``dvc status`` fast, and ``dvc exp run -S attention.p=0.1`` /
``-S params/table2.yaml:table2.cora-gcn.train_cfg.lr=0.05`` change one value.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from twirls.files import write_text

#: top-level keys that live in params.yaml; every other key ``k`` lives in params/<k>.yaml
SHARED = ("threads", "jobs", "budget_hours", "device", "train", "attention", "attack", "fetch",
          "report")
PARAMS_DIR = "params"


def params_file(key: str) -> str:
    """The file, relative to the repository root, that holds the top-level key ``key``."""
    return "params.yaml" if key in SHARED else f"{PARAMS_DIR}/{key}.yaml"


def read_all(root: Path = Path(".")) -> dict[str, Any]:
    """Every param of the repository at ``root``: params.yaml and params/*.yaml, merged. A file
    that is not YAML, or a params/<group>.yaml whose top-level key is not ``<group>``, is a
    ``ValueError`` naming the file."""
    files = [root / "params.yaml", *sorted((root / PARAMS_DIR).glob("*.yaml"))]
    merged: dict[str, Any] = {}
    for path in files:
        rel = path.relative_to(root).as_posix()
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"cannot read {rel}: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{rel}: expected a mapping of keys to values")
        for key, value in data.items():
            if params_file(str(key)) != rel:
                raise ValueError(f"{rel}: top-level key {key!r} belongs in {params_file(str(key))}"
                                 f" (params.yaml: {', '.join(SHARED)}; params/<group>.yaml: "
                                 "the one key <group>)")
            merged[key] = value
    return merged


def write_all(root: Path, params: dict[str, Any]) -> None:
    """Write ``params`` back into params.yaml and params/<group>.yaml (each via a temp file);
    a params/*.yaml whose group is gone is removed."""
    by_file: dict[str, dict[str, Any]] = {"params.yaml": {}}
    for key, value in params.items():
        by_file.setdefault(params_file(key), {})[key] = value
    (root / PARAMS_DIR).mkdir(exist_ok=True)
    for stale in (root / PARAMS_DIR).glob("*.yaml"):
        if f"{PARAMS_DIR}/{stale.name}" not in by_file:
            stale.unlink()
    for rel, data in by_file.items():
        write_text(root / rel, yaml.safe_dump(data, sort_keys=False))


def load_params(stage: str) -> dict[str, Any]:
    """The params declared by ``stage`` (e.g. ``"report"``, ``"table2@cora-gcn"``), nested and
    merged over their files.

    Only the declared keys, as DVC resolves the stage and reads its params files (what
    ``dvc.api.params_show(stages=[stage])`` returns, without building the repository's whole
    index: ~2.5 s less in every stage's process on a slow day): a stage that reads a key it did
    not declare gets a ``KeyError`` instead of a silent stale result. The stage is loaded from
    ``dvc.yaml`` alone, without ``dvc.lock`` (whose hashes DVC would merge into the stage's deps
    and outs, which reading params does not look at): ~0.5 s less in every stage's process.
    """
    from dvc.dependency.param import ParamsDependency
    from dvc.dvcfile import PROJECT_FILE, ProjectFile
    from dvc.exceptions import DvcException
    from dvc.repo import Repo
    from dvc.stage.loader import StageLoader

    try:
        with Repo() as repo:
            dvcfile = ProjectFile(repo, repo.fs.join(repo.root_dir, PROJECT_FILE))
            resolved = StageLoader(dvcfile, dvcfile.contents)[stage]
            params: dict[str, Any] = {}
            for dep in resolved.deps:
                if isinstance(dep, ParamsDependency):
                    params |= dep.read_params(flatten=False)
            return params
    except DvcException as exc:
        sys.exit(f"cannot read params of stage {stage!r}: {exc}. Run from the repository root.")
