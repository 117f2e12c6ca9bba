"""Every stage's code deps are the import closure of the module its ``cmd`` runs
(``python -m twirls.dag deps``): DVC reruns a stage when any code it runs changes, and only then."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from twirls import dag

from e2e import copy_repo, run_dvc

REPO = Path(__file__).resolve().parents[1]


def test_every_stage_names_exactly_the_code_it_runs():
    proc = subprocess.run([sys.executable, "-m", "twirls.dag", "deps"], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    families = {s.family for s in dag.stage_deps()}
    assert {"table2", "table4", "table4-twirls", "table12", "report", "fetch"} <= families


def test_the_closure_follows_imports_in_functions_packages_and_dynamic_loaders():
    table4 = dag.closure("twirls.stages.table4")
    assert Path("src/twirls/attack/io.py") in table4  # the two holes of issue 26
    assert Path("src/twirls/defenses/gnnguard.py") in table4
    table12 = dag.closure("twirls.stages.table12")
    assert {Path("src/twirls/train/loop.py"), Path("src/twirls/train/device.py")} <= table12
    fetch = dag.closure("twirls.stages.fetch")
    assert Path("src/twirls/__init__.py") in fetch and Path("src/twirls/data/__init__.py") in fetch
    assert Path("src/twirls/data/manifest.tsv") in fetch  # read beside fetch.py
    # registry.py loads `twirls.data.<loader>` by name: every loader is in
    assert {Path("src/twirls/data/planetoid.py"), Path("src/twirls/data/pku.py")} <= fetch
    assert not any("bench" in p.parts or "rehearsal" in p.parts for p in table4 | table12)


def test_no_stage_runs_the_tooling():
    """bench/, rehearsal/ and dag.py measure and check the pipeline; the science never imports
    them, so a change there reruns no stage."""
    tooling = [Path("src/twirls/bench"), Path("src/twirls/rehearsal"), Path("src/twirls/dag.py")]
    for stage in dag.stage_deps():
        used = [str(p) for p in stage.needed if any(p == t or t in p.parents for t in tooling)]
        assert used == [], f"{stage.family} runs {used}"


def test_training_runs_neither_the_report_nor_the_taggers():
    """A stage that trains writes its cells and runs with twirls/cells.py alone: a change to the
    report's code or to the paper's numbers reruns the report (and the stages that draw the
    paper beside their own numbers), not the training; Table 12's taggers are checked and run
    by check-params and table12 only."""
    reports, cws = Path("src/twirls/reports"), Path("src/twirls/cws")
    stages = {stage.family: stage for stage in dag.stage_deps()}
    for family in ("table2", "table3", "table4", "table4-twirls", "table9", "variants",
                   "variants-attacked", "table10", "table11"):
        needed = stages[family].needed
        assert Path("src/twirls/cells.py") in needed, family
        assert not [str(p) for p in needed if reports in p.parents or cws in p.parents], family


def test_only_the_attacked_tables_run_the_defenses():
    """Table 4's defenses (GNNGuard, GCN-SVD, ...) are code of the stages on attacked graphs
    alone: a change there reruns none of the other tables (the schema names the defenses
    without importing them)."""
    defenses = Path("src/twirls/defenses")
    stages = {stage.family: stage for stage in dag.stage_deps()}
    for family in ("table2", "table3", "table10", "variants", "table8", "figure2", "chains",
                   "table12", "check-params", "report"):
        assert not [p for p in stages[family].needed if defenses in p.parents], family
    assert any(defenses in p.parents for p in stages["table4"].needed)


def test_attacked_graph_readers_do_not_run_the_attack():
    """The stages that train on an attacked graph read it with twirls/attack/io.py alone: a
    change to the Mettack code reruns the `attack` stages, and the readers only when the graph
    it writes (data/attacked/<dataset>.npz) changes."""
    stages = {stage.family: stage for stage in dag.stage_deps()}
    attack = {Path("src/twirls/attack/metattack.py"), Path("src/twirls/attack/normalize.py")}
    for family in ("table4", "table4-twirls", "table4-twirls-base", "table4-twirls-extra",
                   "table9", "variants-attacked"):
        needed = stages[family].needed
        assert Path("src/twirls/attack/io.py") in needed, family
        assert not attack & set(needed), family
    assert attack <= set(stages["attack"].needed)
    # and the attack runs none of the models nor the training loop (twirls.train imports
    # nothing): a change there does not rerun it
    assert not [p for p in stages["attack"].needed
                if Path("src/twirls/models") in p.parents or p.name == "loop.py"]


def test_minimal_deps_names_a_folder_only_when_it_runs_all_of_it():
    models = dag.tracked_files(Path("src/twirls/models"))
    assert dag.minimal_deps(models) == ["src/twirls/models"]
    one_less = models - {Path("src/twirls/models/energy.py")}
    deps = dag.minimal_deps(one_less)
    assert "src/twirls/models" not in deps and "src/twirls/models/baselines" in deps
    assert "src/twirls/models/graph_ops.py" in deps


def test_a_missing_or_broad_dependency_is_named(tmp_path):
    dvc_yaml = tmp_path / "dvc.yaml"
    text = (REPO / "dvc.yaml").read_text()
    start = text.index("  table12:")
    block = text[start:text.index("\n\n", start)]
    broken = block.replace("      - src/twirls/train/loop.py\n", "      - src/twirls/bench\n", 1)
    broken = broken.replace("      - src/twirls/params.py\n",
                            "      - src/twirls/params.py\n      - src/twirls/dag.py\n", 1)
    assert broken != block
    dvc_yaml.write_text(text.replace(block, broken))
    (table12,) = [s for s in dag.stage_deps(dvc_yaml) if s.family == "table12"]
    assert table12.missing == ["src/twirls/train/loop.py"]
    assert table12.broad == ["src/twirls/bench", "src/twirls/dag.py"]  # a folder, a file
    assert dag.write_deps(dvc_yaml) == ["table12"]
    assert dvc_yaml.read_text() == text  # the generator puts back what the check wants


def test_dvc_reruns_the_stages_whose_imported_code_changed(tmp_path):
    """The two holes of issue 26: appending to gnnguard.py (imported by stages/table4.py via
    twirls.defenses) and to train/loop.py (used by Table 12's trainer) now changes them."""
    repo = copy_repo(tmp_path / "repo", {})
    for rel in ("src/twirls/defenses/gnnguard.py", "src/twirls/train/loop.py"):
        with open(repo / rel, "a") as f:
            f.write("# changed\n")
    proc = run_dvc(repo, "status", "table4@nettack-cora-fast-gnnguard", "table12")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    gnnguard, table12 = out.split("table12:")[0], out.split("table12:")[1]
    assert "modified:" in gnnguard and "src/twirls/defenses" in gnnguard
    assert "src/twirls/train/loop.py" in table12
    shutil.rmtree(repo, ignore_errors=True)


def test_the_package_has_no_import_cycle():
    assert dag.import_cycles() == []
    proc = subprocess.run([sys.executable, "-m", "twirls.dag", "cycles"], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr


def test_an_import_cycle_through_a_function_is_found(tmp_path, monkeypatch):
    package = tmp_path / "src" / "twirls"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from twirls.sub import leaf\n")  # not a cycle
    (package / "sub" / "leaf.py").write_text("import math\n")
    (package / "a.py").write_text("from twirls.b import g\n")
    (package / "b.py").write_text("def g():\n    from twirls import c\n")
    (package / "c.py").write_text("from twirls.a import f\nfrom twirls.sub import leaf\n")
    monkeypatch.setattr(dag, "SRC", tmp_path / "src")
    assert dag.import_cycles() == [["twirls.a", "twirls.b", "twirls.c"]]
