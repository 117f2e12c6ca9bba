"""The reports contract: paper numbers file, results.csv columns and statuses, rendered tables."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from twirls.cells import Cell, write_cells
from twirls.reports.explanations import read_explanations
from twirls.reports.figures_index import FIGURES
from twirls.reports.render import (
    TABLES,
    cell_text,
    runs_line,
    table_frame,
    write_index,
    write_table,
)
from twirls.reports.results import (
    COLUMNS,
    build_results,
    read_cells,
    read_paper,
    status_of,
)
from twirls.stages.report import figures_present, sweeps_without_data


def test_paper_numbers_cover_every_table_and_cite_it():
    paper = read_paper()
    assert set(paper["table"]) == set(TABLES)
    assert paper["source"].str.match(r"Table \d+ \(").all()
    assert not paper.duplicated(["table", "dataset", "model", "metric"]).any()
    # spot checks against the LaTeX source
    row = paper.query("table == 'table2' and dataset == 'citeseer' "
                      "and model == 'TWIRLS-base'").iloc[0]
    assert (row["mean"], row["std"]) == (74.2, 0.45)
    row = paper.query("table == 'table4' and dataset == 'nettack-citeseer' "
                      "and model == 'TWIRLS'").iloc[0]
    assert (row["mean"], row["std"]) == (70.63, 0.93)
    assert len(paper.query("table == 'table8'")) == 16


@pytest.mark.parametrize("delta,std,expected", [
    (0.99, 0.1, "reproduced"), (-1.0, 0.2, "reproduced"), (1.01, 0.3, "differs"),
    (2.9, 1.5, "reproduced"), (-3.1, 1.5, "differs"), (0.5, math.nan, "reproduced"),
])
def test_status_rule_for_scores(delta, std, expected):
    assert status_of("accuracy", delta, std) == expected


def test_counts_must_match_exactly():
    assert status_of("nodes", 0.0, math.nan) == "reproduced"
    assert status_of("edges", -151.0, math.nan) == "differs"


def test_results_join_statuses_and_exact_columns(tmp_path):
    cells = [
        Cell("table2", "cora", "TWIRLS-base", "accuracy", 83.7, 0.6, 10),
        Cell("table2", "pubmed", "TWIRLS-base", "accuracy", status="no-data",
             note="pubmed: cannot download ind.pubmed.allx"),
        Cell("table2", "citeseer", "TWIRLS-base", "accuracy", 70.0, 1.0, 10),
        Cell("table4", "cora", "TWIRLS", "accuracy", 80.0, 1.0, 10, note="clean graph"),
    ]
    path = tmp_path / "cells.json"
    write_cells(path, cells)
    assert read_cells(path) == cells
    df = build_results(read_cells(path), read_paper())
    assert df.columns.tolist()[: len(COLUMNS)] == COLUMNS

    def status(ds: str, model: str, table: str = "table2") -> str:
        hit = df[(df.table == table) & (df.dataset == ds) & (df.model == model)]
        assert len(hit) == 1
        return hit.iloc[0]["status"]

    assert status("cora", "TWIRLS-base") == "reproduced"  # |83.7 - 84.1| <= 1
    assert status("citeseer", "TWIRLS-base") == "differs"  # |70 - 74.2| > max(1, 0.9)
    assert status("pubmed", "TWIRLS-base") == "no-data"
    assert status("cora", "GCNII") == "paper-only"
    assert status("cora", "TWIRLS", "table4") == "not-in-paper"
    row = df[(df.dataset == "cora") & (df.model == "TWIRLS-base")
             & (df.table == "table2")].iloc[0]
    assert row["delta"] == pytest.approx(83.7 - 84.1)
    assert len(df) == len(read_paper()) + 1  # every paper cell, plus our extra one


def test_the_same_cell_from_two_stages_is_an_error():
    cell = Cell("table12", "pku", "MLP", "macro_f1", 50.0, 1.0, 3)
    with pytest.raises(ValueError, match="same cell"):
        build_results([cell, cell], read_paper())


def test_missing_cells_file_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="report.cells"):
        read_cells(tmp_path / "nope.json")


def test_cell_text_shows_ours_and_paper():
    row = pd.Series({"mean": 83.71, "std": 0.5, "runs": 10, "paper_mean": 84.1,
                     "paper_std": 0.5, "status": "reproduced"})
    assert cell_text(row) == "83.71 ± 0.50 (84.10 ± 0.50)"
    row = pd.Series({"mean": math.nan, "std": math.nan, "runs": 0, "paper_mean": 81.5,
                     "paper_std": math.nan, "status": "paper-only"})
    assert cell_text(row) == "not run (81.50)"


def test_index_lists_every_table_and_figure(tmp_path):
    cells = [Cell("table12", "pku", "MLP", "macro_f1", status="no-data", note="pku: missing")]
    results = build_results(cells, read_paper())
    write_index(results, tmp_path, figures_made={"cosine-rho"})
    index = (tmp_path / "README.md").read_text()
    for table, title in TABLES.items():
        assert title in index
        for ext in ("md", "csv", "tex"):
            assert (tmp_path / "tables" / f"{table}.{ext}").exists()
    for title in FIGURES.values():
        assert title in index
    # every curve the paper draws is run (SSE was the last missing one): said so
    assert "Curves the paper draws that no stage runs: none.\n" in index
    assert "[cosine-rho.png](figures/cosine-rho.png)" in index
    cws = (tmp_path / "tables" / "table12.md").read_text()
    assert "no data (56.68 ± 2.81)" in cws and "- pku (MLP): missing" in cws
    tex = (tmp_path / "tables" / "table12.tex").read_text()
    assert r"\begin{tabular}" in tex and r"$\pm$" in tex


def test_index_names_a_curve_no_stage_runs_with_why(tmp_path, monkeypatch):
    from twirls.reports import render

    monkeypatch.setattr(render, "NOT_BUILT", {"figure3": [("XYZ", "not built: no code")]})
    write_index(build_results([], read_paper()), tmp_path, figures_made=set())
    index = (tmp_path / "README.md").read_text()
    assert ("Curves the paper draws that no stage runs:\n\n- XYZ (Figure 3 and appendix "
            "figure): not built: no code.\n") in index


def test_index_claims_only_figures_that_exist(tmp_path):
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "cosine-rho.png").write_bytes(b"png")
    assert figures_present(tmp_path, {"cosine-rho", "figure2"}) == {"cosine-rho"}


def test_index_says_when_a_sweep_figure_had_no_data(tmp_path):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "figure3.json").write_text('{"status": "no-data", "points": {}}')
    (metrics / "chains.json").write_text('{"status": "ok", "points": {"a": 1.0}}')
    empty = sweeps_without_data(metrics, {"figure3", "chains", "not-run-yet"})
    assert empty == {"figure3"}
    write_index(build_results([], read_paper()), tmp_path, {"figure3", "chains"}, None, empty)
    lines = (tmp_path / "README.md").read_text().splitlines()
    assert any("[figure3.png]" in ln and "no data (the figure says why)" in ln for ln in lines)
    assert any("[chains.png]" in ln and ln.endswith("| generated |") for ln in lines)


def test_explanations_are_rendered_under_their_table_with_the_status(tmp_path):
    cells = [Cell("table10", "cora", "TWIRLS-base[K=1]", "accuracy", 80.0, 0.5, 10)]
    results = build_results(cells, read_paper())
    path = tmp_path / "ex.csv"
    path.write_text("table,dataset,model,explanation\n"
                    "table10,cora,TWIRLS-base[K=1],the appendix config is not the README's\n"
                    "table10,*,*,one K=2 model for the whole table\n")
    ex = read_explanations(results, path)
    write_index(results, tmp_path, set(), ex)
    md = (tmp_path / "tables" / "table10.md").read_text()
    assert ("- TWIRLS-base[K=1] / cora (differs): the appendix config is not the README's"
            in md)
    assert "- all cells: one K=2 model for the whole table" in md
    assert "Why cells differ" not in (tmp_path / "tables" / "table4.md").read_text()


def test_an_explanation_of_an_unknown_cell_is_one_clear_error(tmp_path):
    results = build_results([], read_paper())
    path = tmp_path / "ex.csv"
    path.write_text("table,dataset,model,explanation\ntable10,cora,TWIRLS-base[K=9],x\n")
    with pytest.raises(ValueError, match=r"line 2: no cell .*TWIRLS-base\[K=9\]"):
        read_explanations(results, path)


@pytest.mark.parametrize("text", ["at 10 seeds it lands inside", "the same 1,000 Runs",
                                  "over 3\tsplits", "Three seeds only"])
def test_an_explanation_that_states_a_run_count_is_one_clear_error(tmp_path, text):
    results = build_results([Cell("table10", "cora", "TWIRLS-base[K=1]", "accuracy", 80.0, 0.5,
                                  10)], read_paper())
    path = tmp_path / "ex.csv"
    path.write_text("table,dataset,model,explanation\n"
                    "table10,cora,TWIRLS-base[K=1],Table 9 runs 5 at a time; a K = 1 run\n"
                    f"table10,*,*,\"{text}\"\n")
    with pytest.raises(ValueError, match=r"line 3: '.*' states a run count"):
        read_explanations(results, path)
    path.write_text("table,dataset,model,explanation\n"
                    "table10,cora,TWIRLS-base[K=1],Table 9 runs 5 at a time; a K = 1 run\n")
    assert len(read_explanations(results, path)) == 1


def test_the_committed_explanations_name_existing_cells():
    results = pd.read_csv(Path(__file__).parents[1] / "reports" / "results.csv")
    read_explanations(results)  # raises on a stale row


def test_a_two_parameter_sweep_renders_as_the_papers_grid():
    cells = [Cell("table8", "citeseer", f"TWIRLS-base[S={s},alpha={a}]",
                  "accuracy", 70.0 + s / 100 + a, 0.1, 3)
             for s in (8, 16) for a in (0.1, 1.0)]
    results = build_results(cells, read_paper())
    rows = results[results["table"] == "table8"]
    wide = table_frame(rows)
    assert list(wide.columns) == ["TWIRLS-base (citeseer): S", "alpha=0.1", "alpha=0.25",
                                  "alpha=0.5", "alpha=1"]
    assert list(wide.iloc[:, 0]) == ["8", "16", "32", "64"]  # paper-only rows stay, in order
    assert wide.iloc[0, 4] == "71.08 ± 0.10 (72.35)"  # S=8, alpha=1.0
    assert wide.iloc[2, 1] == "not run (68.71)"
    mixed = results[results["table"] == "table10"]  # one-parameter labels: the usual layout
    assert list(table_frame(mixed).columns)[0] == "model"


def test_a_note_shared_by_every_cell_is_printed_once(tmp_path):
    cells = [Cell("table4-clean", "nettack-cora", m, "accuracy", 80.0, 1.0, 5, note="graph: clean")
             for m in ("GCN (surrogate)", "TWIRLS")]
    cells.append(Cell("table4-prognn", "nettack-cora", "TWIRLS", "accuracy", 60.0, 1.0, 5,
                      note="graph: prognn"))
    cells.append(Cell("table4-prognn", "nettack-cora", "GCN (surrogate)", "accuracy", 55.0, 1.0,
                      5))
    write_index(build_results(cells, read_paper()), tmp_path, set())
    clean = (tmp_path / "tables" / "table4-clean.md").read_text()
    assert "- all cells: graph: clean" in clean and "TWIRLS / nettack-cora: graph" not in clean
    prognn = (tmp_path / "tables" / "table4-prognn.md").read_text()
    no_data = [Cell("table10", "pubmed", f"TWIRLS-base[K={k}]", "accuracy", status="no-data",
                    note="pubmed: missing") for k in (1, 2)]
    ran = [Cell("table10", "cora", f"TWIRLS-base[K={k}]", "accuracy", 83.0, 0.5, 10)
           for k in (1, 2)]
    write_index(build_results(no_data + ran, read_paper()), tmp_path, set())
    mlp = (tmp_path / "tables" / "table10.md").read_text()
    # one line per distinct note, naming its dataset once
    assert "- pubmed (every model): missing" in mlp and "all cells" not in mlp
    assert mlp.count("missing") == 1 and "pubmed: missing" not in mlp
    assert "- nettack-cora (TWIRLS): graph: prognn" in prognn and "all cells" not in prognn


def test_device_section_counts_stages_per_device(tmp_path):
    from twirls.reports.devices import device_counts, device_lines, stack_counts

    def write(name, payload):
        path = tmp_path / name
        path.write_text(json.dumps(payload))
        return path

    stack = {"python": "3.13.0", "torch": "2.15.0", "numpy": "2.4.6"}
    files = {"train@…": [write("a.json", {"status": "ok", "device": "cuda", "stack": stack}),
                       write("b.json", {"status": "ok", "device": "cpu"}),
                       write("c.json", {"status": "ok", "device": "cuda"}),
                       write("d.json", {"status": "no-data", "reason": "missing"}),
                       tmp_path / "never-run.json"],
             "sweep@…": [write("e.json", {"status": "ok"})],
             # one entry per graph (table4-twirls@, table9@): the devices of the parts that ran
             "attn@…": [write("f.json", {"clean": {"status": "ok", "device": "cuda"},
                                         "fast": {"status": "ok", "device": "cpu, cuda"},
                                         "prognn": {"status": "no-data"}}),
                        write("g.json", {"clean": {"status": "no-data"}})]}
    counts = device_counts(files)
    assert counts["train@…"] == {"cuda": 2, "cpu": 1}
    assert counts["sweep@…"] == {"not recorded": 1}
    assert counts["attn@…"] == {"cpu, cuda": 1}
    stacks = stack_counts(files)
    assert stacks["train@…"] == {"python 3.13.0, torch 2.15.0, numpy 2.4.6": 1,
                                 "not recorded": 2}
    text = "\n".join(device_lines(counts, stacks))
    assert ("| `train@…` | cpu: 1, cuda: 2 | not recorded: 2; "
            "python 3.13.0, torch 2.15.0, numpy 2.4.6: 1 |") in text
    assert "| `sweep@…` | not recorded: 1 | not recorded: 1 |" in text


def test_a_protocol_rerun_is_judged_against_the_table_it_reruns_but_not_scored():
    from twirls.reports.render import TABLES
    from twirls.reports.scorecard import scorecard, totals

    paper = read_paper()
    label = "TWIRLS-base[S=8,alpha=0.1]"
    ref = paper[(paper.table == "table8") & (paper.model == label)].iloc[0]
    cell = Cell("table8-paper-k2", "citeseer", label, "accuracy",
                ref["mean"] + 0.5, 1.0, 10)
    df = build_results([cell], paper)
    row = df[df.table == "table8-paper-k2"]
    assert len(row) == 1 and row.iloc[0]["paper_mean"] == ref["mean"]
    assert row.iloc[0]["status"] == "reproduced"
    assert len(df) == len(paper) + 1  # no paper-only copies of the rerun table
    assert totals(scorecard(df, list(TABLES)))["reproduced"] == 0


def test_stage_graph_collapses_to_families_for_mermaid():
    from twirls.dag import collapse, mermaid

    dot = "\n".join(['strict digraph {', '"fetch@cora";', '"fetch@texas";', '"table2@cora-gcn";',
                     '"report";', '"fetch@cora" -> "table2@cora-gcn";',
                     '"fetch@texas" -> "report";', '"table2@cora-gcn" -> "report";', '}'])
    sizes, edges = collapse(dot)
    assert sizes == {"fetch": 2, "table2": 1, "report": 1}
    assert edges == {("fetch", "table2"), ("fetch", "report"), ("table2", "report")}
    text = mermaid(sizes, edges)
    assert text.startswith("flowchart LR\n") and '["fetch@ x 2"]' in text
    assert text.count("-->") == 3


def test_table9s_primary_variant_fills_the_table_and_the_other_sits_beside_it():
    """The table9 stage writes the paper variant's cells to table9(-prognn) and the
    reference's to ...-reference; the report moves them by `table9.primary`."""
    from twirls.reports.results import with_primary

    paper = Cell("table9", "nettack-cora", "TWIRLS[T=2]", "accuracy", 70.0,
                 extra={"variant": "paper"})
    ref = Cell("table9-prognn-reference", "nettack-cora", "TWIRLS[T=2]", "accuracy", 71.0,
               extra={"variant": "reference"})
    other = Cell("table4", "nettack-cora", "TWIRLS", "accuracy", 1.0, extra={"variant": "paper"})
    assert [with_primary(c, "paper").table for c in (paper, ref, other)] == [
        "table9", "table9-prognn-reference", "table4"]
    assert [with_primary(c, "reference").table for c in (paper, ref, other)] == [
        "table9-paper", "table9-prognn", "table4"]


def test_sources_section_names_each_tables_params_stages_and_script_from_dvc_yaml(tmp_path):
    from twirls.reports.sources import sources_lines

    repo = Path(__file__).resolve().parents[1]
    lines = sources_lines(repo / "dvc.yaml", TABLES, FIGURES)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| ")}
    assert {f"Table {n}" for n in (2, 3, 4, 5, 8, 9, 10, 11, 12)} <= set(rows)
    table4 = rows["Table 4"]
    assert "`params/table4.yaml`" in table4 and "`table4-twirls@…`" in table4
    assert "`twirls.stages.table4`" in table4 and "tables/table4.md)" in table4
    for script in re.findall(r"`(twirls\.stages\.\w+)`", "\n".join(lines)):
        assert (repo / "src" / Path(*script.split("."))).with_suffix(".py").is_file(), script
    # another script in dvc.yaml shows at once: the section is read, not written by hand
    moved = (repo / "dvc.yaml").read_text().replace("twirls.stages.table4 ", "twirls.stages.t4 ")
    (tmp_path / "dvc.yaml").write_text(moved)
    lines = sources_lines(tmp_path / "dvc.yaml", TABLES, FIGURES)
    assert any("Table 4" in line and "`twirls.stages.t4`" in line for line in lines)
    proc = subprocess.run([sys.executable, "-m", "twirls.dag", "sources"], cwd=repo,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # docs/sources.md is current


def test_each_table_says_how_many_runs_are_behind_its_cells(tmp_path):
    cells = [Cell("table2", ds, m, "accuracy", 80.0, 1.0, 3 if m == "GCNII" else 10)
             for ds in ("cora", "citeseer") for m in ("GCN", "GCNII", "SGC")]
    cells.append(Cell("table2", "pubmed", "GCN", "accuracy", status="no-data", note="missing"))
    results = build_results(cells, read_paper())
    assert runs_line(results[results["table"] == "table2"], ["cora", "citeseer"]) == (
        "Runs per cell: 10; 3 for GCNII (cora, citeseer).")
    write_table(results, "table2", tmp_path)
    assert "Runs per cell: 10; 3 for GCNII" in (tmp_path / "table2.md").read_text()
    stats = build_results([Cell("table5", "cora", "dataset", "nodes", 2708.0, None, 1)],
                          read_paper())
    assert runs_line(stats[stats["table"] == "table5"]) == ""  # counts are no runs


def test_every_table_is_named_after_the_paper_table_it_belongs_to():
    """One name per paper table: Table N's cells are ``tableN``, our tables laid out like it or
    rerunning it ``tableN-<what differs>``; the one table of ours that spans several is
    ``variants``. The paper's title names the same N."""
    from twirls.reports.render import EXTRA_TABLES

    for table, title in TABLES.items():
        assert title.startswith(f"Table {table.removeprefix('table')}:"), (table, title)
    paper_ids = set(read_paper()["table"])
    assert paper_ids <= set(TABLES)
    for table in EXTRA_TABLES:
        base = table.split("-")[0]
        assert table == "variants" or (base in TABLES and table.startswith(f"{base}-")), table


def test_the_report_shows_where_each_table_comes_from(tmp_path):
    """reports/README.md holds docs/sources.md's table (params files, stages, script, output of
    each paper table and figure), its links relative to reports/."""
    from twirls.stages.report import SOURCES, sources_section

    lines = sources_section(Path(__file__).parents[1] / SOURCES)
    table4 = next(line for line in lines if line.startswith("| Table 4 |"))
    assert "`params/table4.yaml`" in table4 and "`table4-twirls@…`" in table4
    assert "[table4.md](tables/table4.md)" in table4
    assert not any("../reports/" in line for line in lines)
    write_index(build_results([], read_paper()), tmp_path, set(), sources_section=lines)
    assert table4 in (tmp_path / "README.md").read_text()


def test_the_report_reads_the_results_file_of_every_stage_in_dvc_yaml():
    """``stage_outputs`` (the report's list, never a glob) names exactly the ``results/*.json``
    that ``dvc.yaml``'s stages write, ``table8-extra@…`` included: a stage whose cells the
    report never read would be a table missing from it; and each entry names (``.stage``) the
    stage that writes its files."""
    from dvc.dvcfile import PROJECT_FILE, ProjectFile
    from dvc.repo import Repo

    from twirls.params import read_all
    from twirls.reports.stage_outputs import results_files, stage_outputs

    repo_root = Path(__file__).resolve().parents[1]
    with Repo(str(repo_root)) as repo:
        dvcfile = ProjectFile(repo, repo.fs.join(repo.root_dir, PROJECT_FILE))
        writer = {str(Path(out.def_path)): name for name, stage in dvcfile.stages.items()
                  for out in stage.outs}
    outs = {o for o in writer if o.startswith("results/") and o.endswith(".json")}
    params = read_all(repo_root)
    listed = {str(p) for p in results_files(params)} | set(params["report"]["cells"])
    not_cells = {o for o in outs  # no table's cells: the params check, the energy curves
                 if o == "results/params-check.json" or o.startswith("results/energy/")}
    assert listed == outs - not_cells
    assert "results/table8-extra/table8-paper-k1.json" in listed
    # and each StageOutputs names the stage that writes its files
    for family, stages in stage_outputs(params).items():
        for outputs in stages:
            assert writer[str(outputs.results)] == outputs.stage, family
