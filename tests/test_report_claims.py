"""The scannable report: paper order, deduplicated notes, Table 11 ratios, stand-in cells,
claims with computed verdicts, the headline metrics file and the sweep figure."""

from __future__ import annotations

import json

import pytest

from twirls.cells import Cell, write_cells
from twirls.reports.claims import Values, close_calls, evaluate, read_claims, verdict
from twirls.reports.claims_section import verdict_counts, verdicts
from twirls.reports.headline import headline, write_headline
from twirls.reports.render import table_frame, write_index
from twirls.reports.results import build_results, read_cells, read_paper
from twirls.reports.scorecard import scorecard, totals
from twirls.reports.sweep_points import paper_points

ATTACK_CLAIM = {"id": "attack", "claim": "c", "source": "s", "test": "t", "checks": [
    {"rule": "at_least_best_of", "table": "table4", "subject": "TWIRLS",
     "others": ["GNNGuard", "GCN-Jaccard", "GCN-SVD"],
     "datasets": ["nettack-cora", "nettack-citeseer"], "tolerance": 1.0}]}


def attack_cells(twirls_cora: float, twirls_citeseer: float) -> list[Cell]:
    cells = [Cell("table4", ds, m, "accuracy", 70.0, 1.0, 5)
             for ds in ("nettack-cora", "nettack-citeseer")
             for m in ("GNNGuard", "GCN-Jaccard", "GCN-SVD")]
    return cells + [Cell("table4", "nettack-cora", "TWIRLS", "accuracy", twirls_cora, 1.0, 5),
                    Cell("table4", "nettack-citeseer", "TWIRLS", "accuracy", twirls_citeseer,
                         1.0, 5)]


@pytest.mark.parametrize("cora,citeseer,expected", [
    (70.5, 69.5, "holds"),
    (60.0, 65.0, "does not hold"),
    (60.0, 71.0, "partly: holds on nettack-citeseer; not on nettack-cora"),
])
def test_a_claim_verdict_is_computed_from_the_cells(cora, citeseer, expected):
    results = build_results(attack_cells(cora, citeseer), read_paper())
    assert verdict(evaluate(ATTACK_CLAIM, Values(results))) == expected


HETEROPHILY_CLAIM = {"id": "h", "claim": "c", "source": "s", "test": "t", "checks": [
    {"rule": "at_least_best_of", "table": "table3", "subject": "TWIRLS", "others": ["GCN"],
     "datasets": ["texas"], "tolerance": 1.0}]}


def split_runs(table3_rows: dict[str, list[float]]):
    """Cells of Table 3 on Texas and a lookup of their runs, one run on each split."""
    from statistics import fmean, pstdev
    cells = [Cell("table3", "texas", m, "accuracy", fmean(v), pstdev(v), len(v))
             for m, v in table3_rows.items()]

    def runs(table, dataset, model, metric):
        v = table3_rows.get(model) if (table, dataset) == ("table3", "texas") else None
        return None if v is None else {(str(i), "0"): x for i, x in enumerate(v)}
    return build_results(cells, read_paper()), runs


def test_cells_on_the_same_splits_are_compared_split_by_split():
    """The split sets most of a run's score: TWIRLS beats GCN by 0.4-0.6 points on every split,
    while the splits spread each model over 20 points. Unpaired, the -1-point threshold is well
    inside the noise (a close call); split by split the difference is sure."""
    twirls = [60.5, 70.4, 80.6, 65.5, 75.4]
    gcn = [60.0, 70.0, 80.0, 65.0, 75.0]
    results, runs = split_runs({"TWIRLS": twirls, "GCN": gcn})
    unpaired = evaluate(HETEROPHILY_CLAIM, Values(results))
    assert close_calls(unpaired) == ["texas"]
    assert "a close call (standard error of the difference 4.4" in unpaired[0].detail
    paired = Values(results, runs=runs)
    assert paired.difference_error("table3", "texas", "accuracy", ("TWIRLS", "GCN")) == (
        pytest.approx(0.0335, abs=1e-4),  # differences 0.5, 0.4, 0.6, 0.5, 0.4: std 0.075
        "standard error of the per-split difference")
    outcomes = evaluate(HETEROPHILY_CLAIM, paired)
    assert outcomes[0].ok and close_calls(outcomes) == []
    assert outcomes[0].detail.endswith("; standard error of the per-split difference 0.03")
    # the same margin with differences spread over splits: a close call, named as paired
    results, runs = split_runs({"TWIRLS": [64.0, 65.0, 84.0, 62.0, 77.0], "GCN": gcn})
    outcomes = evaluate(HETEROPHILY_CLAIM, Values(results, runs=runs))
    assert "a close call (standard error of the per-split difference" in outcomes[0].detail


def test_several_seeds_of_a_split_are_averaged_before_the_splits_are_compared():
    """Two seeds a split: each model's seeds of a split differ by 4 points, their means by
    exactly 1 on every split, so the per-split difference has no spread. Pairing seed with seed
    (seed ``s`` of two models shares nothing) would see a spread of 4 points and report 1.63."""
    twirls = {("0", "0"): 62.0, ("0", "1"): 58.0, ("1", "0"): 72.0, ("1", "1"): 68.0,
              ("2", "0"): 82.0, ("2", "1"): 78.0}
    gcn = {("0", "0"): 57.0, ("0", "1"): 61.0, ("1", "0"): 67.0, ("1", "1"): 71.0,
           ("2", "0"): 77.0, ("2", "1"): 81.0}
    results, _ = split_runs({"TWIRLS": list(twirls.values()), "GCN": list(gcn.values())})
    values = Values(results, runs=lambda t, d, model, m: twirls if model == "TWIRLS" else gcn)
    assert values.paired_error("table3", "texas", "accuracy", ("TWIRLS", "GCN")) == 0.0
    # a split where the means differ by 4 instead: the spread of three per-split means (1, 1,
    # 4): pstdev 1.414 over sqrt(3) splits, not over sqrt(6) runs
    gcn = {**gcn, ("2", "0"): 74.0, ("2", "1"): 78.0}
    values = Values(results, runs=lambda t, d, model, m: twirls if model == "TWIRLS" else gcn)
    assert values.paired_error("table3", "texas", "accuracy", ("TWIRLS", "GCN")) == (
        pytest.approx(2 ** 0.5 / 3 ** 0.5))


def test_cells_with_other_seed_counts_on_the_same_splits_pair_by_split():
    """Two seeds a split against one (Geom-GCN keeps its authors' one run a split): the split
    means pair all the same; a cell with more seeds on one split than another does not pair."""
    from twirls.reports.claims import per_split_error

    two = {("0", "0"): 62.0, ("0", "1"): 58.0, ("1", "0"): 72.0, ("1", "1"): 68.0}
    one = {("0", "0"): 59.0, ("1", "0"): 66.0}
    assert per_split_error(two, one) == pytest.approx(1.5 / 2 ** 0.5)  # differences 1, 4
    assert per_split_error(one, two) == pytest.approx(1.5 / 2 ** 0.5)
    uneven = {**one, ("1", "1"): 70.0}
    assert per_split_error(two, uneven) is None
    assert per_split_error(two, {("0", "0"): 59.0, ("2", "0"): 66.0}) is None  # other splits


@pytest.mark.parametrize("case", ["one split", "other runs", "unknown"])
def test_cells_that_do_not_share_several_splits_are_compared_unpaired(case):
    results, _ = split_runs({"TWIRLS": [60.5, 70.4], "GCN": [60.0, 70.0]})
    keys = {"one split": ([("0", "0"), ("0", "1")], [("0", "0"), ("0", "1")]),
            "other runs": ([("0", "0"), ("1", "0")], [("0", "0"), ("2", "0")]),
            "unknown": ([("0", "0"), ("1", "0")], None)}[case]

    def runs(table, dataset, model, metric):
        k = keys[0] if model == "TWIRLS" else keys[1]
        return None if k is None else dict(zip(k, [60.5, 70.4] if model == "TWIRLS"
                                                 else [60.0, 70.0], strict=True))
    values = Values(results, runs=runs)
    assert values.paired_error("table3", "texas", "accuracy", ("TWIRLS", "GCN")) is None
    assert values.difference_error("table3", "texas", "accuracy", ("TWIRLS", "GCN"))[1] == (
        "standard error of the difference")


def test_cell_runs_reads_a_cells_runs_by_split_and_seed(tmp_path):
    from twirls.reports.cell_runs import CellRuns
    path = tmp_path / "texas.csv"
    path.write_text("table,dataset,model,split,seed,metric,value\n"
                    "table3,texas,TWIRLS,0,0,accuracy,60.5\n"
                    "table3,texas,TWIRLS,1,0,accuracy,70.5\n"
                    "table3,texas,GCN,0,0,accuracy,60.0\n"
                    "table3,texas,GCN,0,0,accuracy,61.0\n")
    runs = CellRuns()
    for model in ("TWIRLS", "GCN"):
        runs.add(("table3", "texas", model, "accuracy"), path,
                 {"table": "table3", "dataset": "texas", "metric": "accuracy",
                  "extra": {"rows": {"model": model}}})
    assert runs("table3", "texas", "TWIRLS", "accuracy") == {("0", "0"): 60.5, ("1", "0"): 70.5}
    assert runs("table3", "texas", "GCN", "accuracy") is None  # two runs on one split and seed
    assert runs("table3", "texas", "MLP", "accuracy") is None  # not added


def test_a_comparison_within_one_standard_error_is_a_close_call():
    """Others at 70 ± 1 (5 runs): the standard error of a difference is sqrt(2 / 5) = 0.63. Cora's
    TWIRLS at 69.5 sits 0.5 above the -1 threshold (close), Citeseer's at 71.5 2.5 above it."""
    results = build_results(attack_cells(69.5, 71.5), read_paper())
    outcomes = evaluate(ATTACK_CLAIM, Values(results))
    assert verdict(outcomes) == "holds" and close_calls(outcomes) == ["nettack-cora"]
    assert "a close call (standard error of the difference 0.63)" in outcomes[0].detail
    assert "close call" not in outcomes[1].detail  # its error is shown all the same
    assert outcomes[1].detail.endswith("; standard error of the difference 0.63")
    # the paper's numbers have no runs to weigh: never a close call
    assert close_calls(evaluate(ATTACK_CLAIM, Values(results, column="paper_mean"))) == []
    margin = {"id": "m", "claim": "c", "source": "s", "test": "t", "checks": [
        {"rule": "margin_over", "table": "table4", "subject": "TWIRLS", "other": "GNNGuard",
         "datasets": ["nettack-cora", "nettack-citeseer"], "margin": 2.0}]}
    outcomes = evaluate(margin, Values(results))  # -0.5 and +1.5 against a margin of 2
    assert [o.ok for o in outcomes] == [False, False]
    assert close_calls(outcomes) == ["nettack-citeseer (TWIRLS vs GNNGuard)"]


@pytest.mark.parametrize("leads,close", [
    ((0.3, 0.4, 3.0, 3.0), True),  # best on 4, but only 2 leads are clear of the noise
    ((0.3, 3.0, 3.0, 3.0), False),  # best on 4, 3 clear leads
    ((-0.3, -0.4, 3.0, -3.0), True),  # best on 1, on 3 if the two narrow deficits turned
    ((-3.0, -3.0, 3.0, -3.0), False),
])
def test_the_best_on_count_is_a_close_call_when_narrow_leads_decide_it(leads, close):
    claim = next(c for c in read_claims() if c["id"] == "heterophily")
    datasets = claim["checks"][0]["datasets"]
    cells = [Cell("table3", ds, m, "accuracy", 60.0, 1.0, 10)
             for ds in datasets for m in claim["checks"][0]["others"]]
    cells += [Cell("table3", ds, "TWIRLS", "accuracy", 60.0 + lead, 1.0, 10)
              for ds, lead in zip(datasets, leads, strict=True)]
    outcomes = evaluate(claim, Values(build_results(cells, read_paper())))
    count = outcomes[-1]
    assert count.ok == (sum(lead > 0 for lead in leads) >= 3) and count.close == close
    narrow = [ds for ds, lead in zip(datasets, leads, strict=True) if abs(lead) < (0.2 ** 0.5)]
    assert count.detail.endswith(f"runner-up on {', '.join(narrow)}") == bool(narrow)
    # each narrow dataset's own line is a close call too: the summary and the lines agree
    assert [o.group for o in outcomes[:-1] if o.close] == narrow
    assert all("close call" in o.detail for o in outcomes[:-1] if o.group in narrow)
    assert all(o.detail.count("standard error") == 1 for o in outcomes[:-1])  # named once


def test_a_claim_without_our_numbers_is_untested_and_partly_when_some_are_missing():
    results = build_results([], read_paper())
    assert verdict(evaluate(ATTACK_CLAIM, Values(results))) == "untested"
    # the same rule on the paper's own numbers: TWIRLS 70.23 vs GNNGuard 70.46 on Cora
    assert verdict(evaluate(ATTACK_CLAIM, Values(results, column="paper_mean"))) == "holds"
    cells = [c for c in attack_cells(70.0, 70.0) if c.dataset == "nettack-cora"]
    partly = verdict(evaluate(ATTACK_CLAIM, Values(build_results(cells, read_paper()))))
    assert partly == "partly: holds on nettack-cora; untested on nettack-citeseer"


def test_stand_in_cells_are_used_but_say_so_and_never_count_as_reproduced():
    cells = [Cell("table12", "pku", m, "macro_f1", v, 0.5, 3, status="stand-in",
                  note="trained on part of the test gold")
             for m, v in (("TWIRLS-base", 84.9), ("GCN", 60.0), ("MLP", 55.0))]
    results = build_results(cells, read_paper())
    assert set(results[results["table"] == "table12"].dropna(subset=["mean"])["status"]) == {
        "stand-in"}
    claim = next(c for c in read_claims() if c["id"] == "cws")
    assert verdict(evaluate(claim, Values(results))) == "holds (on stand-in cells)"
    wide = table_frame(results[results["table"] == "table12"])
    assert "84.90 ± 0.50 [stand-in] (84.86 ± 0.39)" in wide["pku"].tolist()
    assert totals(scorecard(results, ["table12"]))["reproduced"] == 0


def test_a_stage_cannot_set_a_computed_status(tmp_path):
    path = tmp_path / "cells.json"
    write_cells(path, [Cell("table12", "pku", "MLP", "macro_f1", 50.0, status="reproduced")])
    with pytest.raises(ValueError, match="may only set"):
        read_cells(path)


def test_curve_claims_read_the_sweep_points():
    claim = next(c for c in read_claims() if c["id"] == "no-oversmoothing")
    flat = [{"curve": "TWIRLS-base", "point": {"steps": s}, "mean": 83.0} for s in (1, 64, 128)]
    sgc = [{"curve": "SGC", "point": {"steps": s}, "mean": m}
           for s, m in ((1, 80.0), (64, 60.0), (128, 40.0))]
    closed = [{"curve": "closed form (eq. 2)", "point": {}, "mean": 83.4}]
    results = build_results([], read_paper())
    assert verdict(evaluate(claim, Values(results, {"figure2": flat + sgc + closed}))) == "holds"
    falling = [{**p, "mean": 90.0 - p["point"]["steps"] / 4} for p in flat]
    got = verdict(evaluate(claim, Values(results, {"figure2": falling + sgc + closed})))
    assert got.startswith("partly: holds on SGC drops; not on TWIRLS-base keeps its level")


def test_every_committed_claim_has_a_known_rule_and_verdicts_are_counted():
    results = build_results([], read_paper())
    judged = verdicts(read_claims(), Values(results), Values(results, column="paper_mean"))
    assert 5 <= len(judged) <= 12
    assert verdict_counts(judged)["untested"] == len(judged)
    assert all(j["paper_verdict"] in ("holds", "—") for j in judged)  # rules match the paper


def test_table2_is_in_the_papers_order_with_one_note_per_reason(tmp_path):
    cells = [Cell("table2", "pubmed", m, "accuracy", status="no-data",
                  note="pubmed: cannot download") for m in ("TWIRLS-base", "SGC", "GCN")]
    cells.append(Cell("table2", "cora", "MyModel", "accuracy", 80.0, 1.0, 3))
    results = build_results(cells, read_paper())
    wide = table_frame(results[results["table"] == "table2"])
    assert list(wide.columns) == ["model", "cora", "citeseer", "pubmed", "ogbn-arxiv"]
    assert list(wide["model"]) == ["SGC", "GCN", "APPNP", "JKNet", "GCNII", "DAGNN",
                                   "TWIRLS-base", "MyModel"]
    write_index(results, tmp_path, set())
    md = (tmp_path / "tables" / "table2.md").read_text()
    assert md.count("cannot download") == 1
    assert "- pubmed (SGC, GCN, TWIRLS-base): cannot download" in md


def test_table3_homophily_is_a_row_and_table5_is_datasets_by_statistics():
    cells = [Cell("table3", ds, "dataset", "homophily", 0.2, None, 1)
             for ds in ("texas", "cornell")]
    cells.append(Cell("table3", "texas", "TWIRLS", "accuracy", 84.0, 4.0, 10))
    cells.append(Cell("table5", "cora", "dataset", "nodes", 2708.0, None, 1))
    results = build_results(cells, read_paper())
    het = table_frame(results[results["table"] == "table3"])
    assert list(het.columns) == ["model", "texas", "wisconsin", "actor", "cornell"]
    assert het.iloc[0]["model"] == "homophily" and het.iloc[0]["texas"] == "0.20 (0.11)"
    stats = table_frame(results[results["table"] == "table5"])
    assert list(stats.columns) == ["dataset", "nodes", "edges", "features", "classes"]
    assert stats.iloc[0].tolist()[:2] == ["cora", "2,708 (2,708)"]


def test_extra_tables_do_not_claim_paper_numbers(tmp_path):
    cells = [Cell("table4-clean", "nettack-cora", "TWIRLS", "accuracy", 80.0, 1.0, 5)]
    write_index(build_results(cells, read_paper()), tmp_path, set())
    md = (tmp_path / "tables" / "table4-clean.md").read_text()
    assert "(paper" not in md and "no numbers here" in md
    assert "Ours (paper)" not in (tmp_path / "tables" / "table4-clean.tex").read_text()
    readme = (tmp_path / "README.md").read_text()
    assert readme.index("## Scorecard") < readme.index("## Tables")
    assert readme.index("Table 2:") < readme.index("Table 12:") < readme.index("Extra:")


def test_table11_is_judged_on_ratios_to_mlp_and_gcn():
    # ten times slower than the paper everywhere: same ratios -> reproduced
    paper = read_paper().query("table == 'table11' and metric == 'train_seconds'")
    cells = [Cell("table11", "ogbn-arxiv", r.model, "train_seconds", 10 * r.mean, 0.1, 3)
             for r in paper.itertuples()]
    cells[-1].mean *= 2  # TWIRLS* twice as slow relative to the others
    results = build_results(cells, read_paper())
    status = results.set_index("model").query("table == 'table11' and "
                                              "metric == 'train_seconds'")["status"]
    assert status.drop("TWIRLS*").eq("reproduced").all()
    assert status["TWIRLS*"] == "differs"
    wide = table_frame(results[results["table"] == "table11"])
    row = wide.set_index("model").loc["GCN"]
    assert row["train ÷ MLP: ours (paper)"] == "1.15 (1.15)"
    assert row["train s/epoch (this hardware)"] == "7.75 ± 0.10"


def test_headline_is_flat_rounded_and_atomic(tmp_path):
    results = build_results(attack_cells(72.346, 71.0), read_paper())
    values = headline(results, totals(scorecard(results, ["table4"])))
    assert values["atk_cora"] == 72.35 and "cora" not in values  # no number of ours: left out
    assert values["reproduced"] + values["differs"] == 8
    assert all(isinstance(v, (int, float)) for v in values.values())
    assert sum(max(len(k), 6) + 2 for k in values) + 24 <= 120  # `dvc metrics show` fits
    path = tmp_path / "metrics" / "headline.json"
    write_headline(path, values)
    assert json.loads(path.read_text()) == values and not list(path.parent.glob("*.part"))


def test_grid_values_come_from_the_cells_extra_when_present():
    cells = [Cell("table8", "citeseer", f"TWIRLS-base[S={s},alpha={a}]",
                  "accuracy", 70.0, 0.1, 3, extra={"grid": {"alpha": a, "steps": s}})
             for s in (8, 16, 32, 64) for a in (0.1, 0.25, 0.5, 1.0)]
    wide = table_frame(build_results(cells, read_paper()).query(
        "table == 'table8'"))
    assert list(wide.columns)[0] == "TWIRLS-base (citeseer): steps"  # the grid's key names
    assert list(wide.iloc[:, 0]) == ["8", "16", "32", "64"]
    assert wide.iloc[0, 4] == "70.00 ± 0.10 (72.35)"


def test_sweep_points_parse_paper_labels():
    """The paper's points of Table 8 (ours come from the rows: test_runs)."""
    sweep = {"table": "table8", "dataset": "citeseer",
             "label": "TWIRLS-base[S={steps},alpha={alpha}]", "curves": {"TWIRLS-base": {}}}
    pts = paper_points("table8", sweep, read_paper())
    assert len(pts) == 16
    assert {"curve": "TWIRLS-base", "point": {"steps": 16, "alpha": 1.0}, "mean": 74.07} in pts


def test_the_sweep_figure_overlays_the_papers_points(tmp_path):
    from twirls.reports.sweep_figure import plot_sweep

    sweep = {"curves": {"TWIRLS-base": {}}, "figure": {"x": "steps", "title": "t"}}
    points = [{"curve": "TWIRLS-base", "point": {"steps": s, "alpha": a},
               "scores": {"accuracy": (70.0 + s / 64, 0.5)}}
              for s in (8, 16, 32, 64) for a in (0.1, 1.0)]
    paper = [{"curve": "TWIRLS-base", "point": {"steps": s, "alpha": a}, "mean": 72.0}
             for s in (8, 16, 32, 64) for a in (0.1, 1.0)]
    paper.append({"curve": "TWIRLS-base", "point": {}, "mean": 100.0})
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    captured = {}
    real_close = plt.close
    plt.close = lambda fig: captured.setdefault("fig", fig)
    try:
        plot_sweep("table8", sweep, points, tmp_path / "t.png", paper=paper)
    finally:
        plt.close = real_close
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
    ax = captured["fig"].axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert sum(label.startswith("paper: TWIRLS-base, alpha=") for label in labels) == 2
    assert "paper: TWIRLS-base" in labels  # the stated level, a horizontal line
    assert [t.get_text() for t in ax.get_xticklabels()] == ["8", "16", "32", "64"]


def test_the_no_data_figure_states_the_whole_reason_on_a_percent_axis(tmp_path):
    from twirls.reports.sweep_figure import plot_sweep

    reason = "amazon: cannot download " + "x" * 300 + " END-OF-REASON"
    plot_sweep("figure3", {"curves": {"T": {}}, "figure": {"x": "split"}}, [],
               tmp_path / "f.png", reason)
    assert (tmp_path / "f.png").exists()
    import matplotlib.pyplot as plt

    real_close, captured = plt.close, {}
    plt.close = lambda fig: captured.setdefault("fig", fig)
    try:
        plot_sweep("figure3", {"curves": {"T": {}}, "figure": {"x": "split"}}, [],
                   tmp_path / "f.png", reason)
    finally:
        plt.close = real_close
    ax = captured["fig"].axes[0]
    assert "END-OF-REASON" in ax.texts[0].get_text() and ax.get_ylim() == (0, 100)


@pytest.mark.parametrize("leads,expected", [
    ((-0.5, -0.5, 3.0, -0.5), "partly: holds on texas, wisconsin, actor, cornell; "
                              "the best on 1 of 4 datasets (actor), not >= 3"),
    ((-0.5, -2.0, 3.0, 3.0), "partly: holds on texas, actor, cornell; not on wisconsin; "
                             "the best on 2 of 4 datasets (actor, cornell), not >= 3"),
    ((-2.0, 3.0, 3.0, 3.0), "partly: holds on wisconsin, actor, cornell; not on texas; "
                            "the best on 3 of 4 datasets (wisconsin, actor, cornell)"),
    ((3.0, 3.0, 3.0, 3.0), "holds"),
])
def test_the_verdict_words_the_count_as_a_count(leads, expected):
    claim = next(c for c in read_claims() if c["id"] == "heterophily")
    check = claim["checks"][0]
    cells = [Cell("table3", ds, m, "accuracy", 60.0, 1.0, 10)
             for ds in check["datasets"] for m in check["others"]]
    cells += [Cell("table3", ds, "TWIRLS", "accuracy", 60.0 + lead, 1.0, 10)
              for ds, lead in zip(check["datasets"], leads, strict=True)]
    assert verdict(evaluate(claim, Values(build_results(cells, read_paper())))) == expected
