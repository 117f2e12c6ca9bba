"""``params.yaml`` against the one schema: the committed file is valid (every model entry builds
with its settings), and each kind of mistake a user makes with ``-S`` or an editor is one line
naming the key, the value and what is allowed, before anything expensive runs."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml

from twirls.config.entries import (
    TABLE4_GRAPH,
    attacked_twirls_entry,
    table4_entry,
    table4_graphs,
    table9_entry,
    train_entry,
)
from twirls.config.schema import (
    ATTACKED_GROUPS,
    DEFENSES,
    TRAIN_GROUPS,
    VARIANTS,
    ConfigError,
    check_params,
)
from twirls.data.defaults import DATASET_DEFAULTS
from twirls.data.registry import LOADERS
from twirls.params import load_params, params_file, read_all, write_all
from twirls.reports.render import EXTRA_TABLES
from twirls.reports.results import read_paper

from fixtures import REPO
from requires import needs

PARAMS = read_all(REPO)


def test_committed_params_pass_the_schema():
    check_params(PARAMS)  # builds every model entry with its settings on a toy graph


def test_the_schema_names_what_the_library_runs():
    # the schema names the defenses and TWIRLS' variants without importing their code (every
    # stage checks its params, and would then depend on that code): the same names
    from twirls.defenses import NAMES
    from twirls.models.propagation import VARIANTS as PROPAGATIONS

    assert DEFENSES == NAMES and VARIANTS == PROPAGATIONS


def test_every_dataset_has_its_defaults_stated_once():
    assert set(DATASET_DEFAULTS) == set(LOADERS)
    for group in TRAIN_GROUPS:
        for name, entry in PARAMS[group].items():
            for key, value in DATASET_DEFAULTS[entry["dataset"]].items():
                assert entry.get(key, object()) != value, f"{group}.{name}.{key}: a default"


def all_entries() -> list[tuple[str, dict]]:
    out = [(f"{g}.{k}", train_entry(e)) for g in TRAIN_GROUPS for k, e in PARAMS[g].items()]
    t4 = PARAMS["table4"]
    for d in t4["datasets"]:
        for g in t4["graphs"]:
            out += [(f"table4[{d},{g},{m}]", table4_entry(t4, d, g, m))
                    for m in [*t4["defenses"], "twirls-base", "twirls"]]
    out += [(f"{g}.{k}", attacked_twirls_entry(e, t4))
            for g in ATTACKED_GROUPS for k, e in PARAMS[g].items()]
    t9 = PARAMS["table9"]
    out += [(f"table9[{d},{g},T={t}]", table9_entry(t9, t4, d, g, t))
            for d in t9["datasets"] for g in t9["graphs"] for t in t9["truncations"]]
    return out


def test_every_cell_names_a_table_of_the_report_and_no_cell_is_claimed_twice():
    tables = set(read_paper()["table"]) | set(EXTRA_TABLES)
    seen: dict[tuple[str, str, str], str] = {}
    for where, entry in all_entries():
        assert set(entry["cells"]) <= tables, where
        for table, label in entry["cells"].items():
            key = (table, entry["dataset"], label)
            assert key not in seen, f"{where} and {seen.get(key)} both fill {key}"
            seen[key] = where


def test_table4_grid_composes_complete_entries():
    t4 = PARAMS["table4"]
    gcn = table4_entry(t4, "nettack-cora", "clean", "gcn-svd")
    assert gcn == {"dataset": "nettack-cora", "graph": "clean", "seeds": t4["seeds"]["gcn-svd"],
                   "cells": {"table4-clean": "GCN-SVD"}, "defense": "gcn-svd",
                   "feature_norm": "none"}
    twirls = table4_entry(t4, "nettack-citeseer", "fast", "twirls")
    assert twirls["model"] == "twirls" and twirls["model_cfg"]["steps"] == 64
    assert twirls["cells"] == {"table4": "TWIRLS", **t4["also"]["fast"]}
    base = table4_entry(t4, "nettack-citeseer", "fast", "twirls-base")
    assert base["cells"] == {"table4": "TWIRLS-base"}  # `also` is the attention row's only
    ref = attacked_twirls_entry(PARAMS["variants-attacked"]["nettack-cora-ref"], t4)
    assert ref["model_cfg"] == {**t4["twirls"]["nettack-cora"]["model_cfg"],
                                "variant": "reference"}


def test_table4s_twirls_stages_split_the_graphs_so_attention_reruns_table4s_cells_only():
    """`table4-twirls@` runs Table 4's own graph (global `attention`), `table4-twirls-extra@`
    every other graph of `table4.graphs` (`table4.extra_attention`), TWIRLS-base all of them;
    the two TWIRLS stages cover each graph once, none when the list has no other."""
    graphs = PARAMS["table4"]["graphs"]
    assert table4_graphs(graphs, "twirls-base") == graphs == ["fast", "clean", "prognn"]
    assert table4_graphs(graphs, "twirls") == [TABLE4_GRAPH] == ["fast"]
    assert table4_graphs(graphs, "twirls", extras=True) == ["clean", "prognn"]
    assert table4_graphs(["prognn", "fast"], "twirls", extras=True) == ["prognn"]
    assert table4_graphs(["fast"], "twirls", extras=True) == []


def with_value(path: str, value) -> dict:
    params = copy.deepcopy(PARAMS)
    *parents, last = path.split(".")
    node = params
    for key in parents:
        node = node[key]
    node[last] = value
    return params


@needs("dvc", "DVC resolves the stages of dvc.yaml")
@pytest.mark.parametrize("stage", ["report", "table4-twirls@nettack-cora", "table8",
                                   "table8-extra@table8-paper-k1"])
def test_a_stage_reads_exactly_what_dvc_params_show_gives_it(stage, monkeypatch):
    """``load_params`` reads a stage's declared params through DVC without building the whole
    index: the same nested values as ``dvc.api.params_show(stages=[stage])``."""
    import dvc.api

    monkeypatch.chdir(REPO)
    assert load_params(stage) == dvc.api.params_show(stages=[stage])


@needs("dvc", "DVC resolves the stages of dvc.yaml")
def test_a_stage_reads_its_params_without_parsing_the_lock(monkeypatch):
    """Every stage's process reads its params: from dvc.yaml and the params files alone, never
    the ~450 kB dvc.lock (~0.5 s a stage); an unknown stage is one line naming it."""
    import dvc.api
    from dvc.dvcfile import Lockfile

    monkeypatch.chdir(REPO)
    want = dvc.api.params_show(stages=["table2@cora-gcn"])

    def no_lock(self, *args, **kwargs):
        raise AssertionError("load_params parsed dvc.lock")

    monkeypatch.setattr(Lockfile, "load", no_lock)
    assert load_params("table2@cora-gcn") == want
    with pytest.raises(SystemExit, match="cannot read params of stage 'table2@nope': Stage "
                                         "'table2@nope' not found"):
        load_params("table2@nope")


def test_every_group_lives_in_its_own_file_and_the_files_merge(tmp_path):
    assert params_file("attention") == "params.yaml"
    assert params_file("table4") == "params/table4.yaml"
    assert (REPO / "params" / "table4.yaml").is_file() and "table4" not in yaml.safe_load(
        (REPO / "params.yaml").read_text())
    (tmp_path / "params").mkdir()
    (tmp_path / "params.yaml").write_text("device: cpu\n")
    (tmp_path / "params" / "table2.yaml").write_text("table2: {a: 1}\n")
    assert read_all(tmp_path) == {"device": "cpu", "table2": {"a": 1}}
    (tmp_path / "params" / "table2.yaml").write_text("table3: {}\n")
    with pytest.raises(ValueError, match="params/table2.yaml: top-level key 'table3' belongs in "
                                         "params/table3.yaml"):
        read_all(tmp_path)


@pytest.mark.parametrize(("path", "value", "message"), [
    ("attention.p", "abc", "attention.p = 'abc': expected a number >= 0 and <= 2"),
    ("attention.p", -1, "attention.p = -1: expected a number >= 0 and <= 2"),
    ("attention.tau", 0, "attention.tau = 0: expected a number > 0"),
    ("attention.T", 0.1, "params.yaml: attention: attention config: T must be >= tau"),
    ("train.seeds", 0, "train.seeds = 0: expected an integer >= 1"),
    ("threads", 1.5, "threads = 1.5: expected an integer >= 1"),
    ("device", "gpu", "device = 'gpu': unknown device (did you mean 'cpu'?); allowed: auto, "
                      "cpu, cuda"),
    ("attack.rate", 1.2, "attack.rate = 1.2: expected a number > 0 and < 1"),
    ("attack.implementation", "fats", "unknown implementation (did you mean 'fast'?)"),
    ("attack.device", "gpu", "attack.device = 'gpu': unknown device"),
    ("table2.cora-gcn.model", "gcnn", "table2.cora-gcn.model = 'gcnn': unknown model "
                                     "(did you mean 'gcn'?)"),
    ("table3.texas-twirls-base.model", "twirlz", "unknown model (did you mean 'twirls'?)"),
    ("table2.cora-gcn.dataset", "coro", "unknown dataset (did you mean 'cora'?)"),
    ("table2.cora-gcn.train_cfg.lr", "1e-3", "expected a number > 0 (PyYAML reads 1e-3 as a "
                                             "string: write 1.0e-3)"),
    ("table2.cora-gcn.train_cfg.epohcs", 10, "unknown key (did you mean 'epochs'?)"),
    ("table3.texas-geom-gcn.train_cfg.selection", "geomgcn",
     "unknown selection (did you mean 'geom-gcn'?); allowed: best-val, geom-gcn"),
    ("table3.texas-gcn.train_cfg.masks", "fats",
     "unknown masks (did you mean 'fast'?); allowed: fast, torch"),
    ("table2.cora-gcn.model_cfg.hiden", 8, "GCN config: unknown key 'hiden'. Did you mean "
                                           "'hidden'?"),
    ("table2.cora-gcn.seeds", 0, "table2.cora-gcn.seeds = 0: expected an integer >= 1"),
    ("train.batch", 0, "train.batch = 0: expected an integer >= 1"),
    ("table2.citeseer-gcnii.batch", 0,
     "table2.citeseer-gcnii.batch = 0: expected an integer >= 1"),
    ("table8.batch", 0, "table8.batch = 0: expected an integer >= 1"),
    ("train.row_operator", "yes", "train.row_operator = 'yes': expected true or false"),
    ("figure2.row_operator", 1, "figure2.row_operator = 1: expected true or false"),
    ("train.components", "yes", "train.components = 'yes': expected true or false"),
    ("table8.components", 1, "table8.components = 1: expected true or false"),
    ("table4.batch", 2.5, "table4.batch = 2.5: expected an integer >= 1"),
    ("table4.extra_attention.p", 3, "table4.extra_attention.p = 3: expected a number >= 0 and "
                                    "<= 2"),
    ("energy.attention.tau", 0, "energy.attention.tau = 0: expected a number > 0"),
    ("table9.batch", "5", "table9.batch = '5': expected an integer >= 1"),
    ("figure2.seeds", None, "figure2.seeds = None: expected an integer >= 1"),  # a sweep's own
    ("table4.defenses", ["gcn", "gnnguar"], "unknown defense (did you mean 'gnnguard'?)"),
    ("table4.graphs", ["fast", "attacked"], "table4.graphs[1] = 'attacked': unknown graph"),
    ("table9.truncations.inf", -2, "expected a number > 0"),
    ("table9.graphs", ["fast", "prognnn"], "unknown graph (did you mean 'prognn'?)"),
    ("table8.curves.TWIRLS-base.grid.steps", [], "expected a non-empty list of values"),
    ("table8.curves.TWIRLS-base.seeds", 0, "table8.curves.TWIRLS-base.seeds = 0: expected an "
                                           "integer >= 1"),
    ("table8.extras.table8-paper-k2", "paper-k3",
     "table8.extras.table8-paper-k2 = 'paper-k3': unknown curve (did you mean 'paper-k2'?)"),
    ("table8.extras.table8-paper-k2", "paper-k1", "table8.curves.paper-k1.table = "
     "'table8-paper-k1': expected 'table8-paper-k2': the curve fills table 'table8-paper-k2' "
     "(stage table8-extra@table8-paper-k2 writes results/table8-extra/table8-paper-k2.json)"),
    ("table11.graph", "arxiv", "table11.graph = 'arxiv': unknown graph"),
    ("table5.datasets", ["cora", "citeser"], "unknown dataset (did you mean 'citeseer'?)"),
    ("tabel2", {}, "tabel2 = 'tabel2': unknown top-level key (did you mean 'table2'?)"),
])
def test_each_kind_of_mistake_is_one_line_naming_key_value_and_what_is_allowed(path, value,
                                                                               message):
    with pytest.raises(ConfigError) as err:
        check_params(with_value(path, value))
    text = str(err.value)
    top = path.split(".")[0]
    assert message in text and "\n" not in text
    assert text.startswith(f"{params_file(top)}: "), text  # the file to fix


def test_a_stage_run_as_dvc_runs_it_names_itself_in_its_one_line_error(tmp_path):
    """``python -m twirls.stages.train ...`` (dvc.yaml's command) with a bad shared value."""
    from twirls.rehearsal.run import child_env, make_workspace

    work = make_workspace(REPO, tmp_path / "work", git=False)
    write_all(work, with_value("device", "gpu"))
    proc = subprocess.run([sys.executable, "-m", "twirls.stages.train", "table2", "cora-gcn"],
                          cwd=work, env=child_env(REPO), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "error: train: params.yaml: device = 'gpu': unknown device (did you mean 'cpu'?); "
        "allowed: auto, cpu, cuda"]


def test_check_params_stage_fails_fast_with_one_line_and_no_traceback(tmp_path):
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(with_value("attention.p", "abc")))
    out = tmp_path / "check.json"
    proc = subprocess.run([sys.executable, "-m", "twirls.stages.check_params", "--params",
                           str(bad), "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 1 and not out.exists()
    assert proc.stderr.strip().splitlines() == [
        "error: params.yaml: attention.p = 'abc': expected a number >= 0 and <= 2 (fix the "
        "value, or undo the change: git checkout -- params.yaml params)"]
    good = tmp_path / "good.yaml"
    good.write_text((REPO / "params.yaml").read_text())
    proc = subprocess.run([sys.executable, "-m", "twirls.stages.check_params", "--params",
                           str(good), "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0 and out.exists(), proc.stderr


def test_check_params_stage_builds_table12s_models(tmp_path):
    """Table 12's models are checked by a trial build in the stages that read them
    (``check-params``, ``table12``), not in every stage's schema check."""
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(with_value("table12.models.bi-LSTM.model_cfg.hiden", 3)))
    out = tmp_path / "check.json"
    proc = subprocess.run([sys.executable, "-m", "twirls.stages.check_params", "--params",
                           str(bad), "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 1 and not out.exists()
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: params/table12.yaml: table12.models.bi-LSTM.model_cfg") \
        and "hiden" in line, line
    check_params(with_value("table12.models.bi-LSTM.model_cfg.hiden", 3))  # the schema alone


@needs("dvc", "DVC's own YAML dumper, which `dvc exp run -S` writes params files with")
@pytest.mark.parametrize("path", ["params.yaml", *sorted(
    f"params/{p.name}" for p in (REPO / "params").glob("*.yaml"))])
def test_params_files_are_written_as_dvc_writes_them(path):
    """`-S key=value` makes DVC load a params file and dump it back: a file not already in that
    form changes bytes (flow lists rewrapped) though no value changed, so `-S` with the current
    value still reruns stages and leaves params.yaml modified. Each file is a fixed point."""
    from dvc.utils.serialize._yaml import dumps_yaml, parse_yaml_for_update

    text = (REPO / path).read_text()
    assert dumps_yaml(parse_yaml_for_update(text, path)) == text, (
        f"{path} is not in DVC's YAML form; rewrite it with dvc.utils.serialize's "
        "dumps_yaml(parse_yaml_for_update(...))")
