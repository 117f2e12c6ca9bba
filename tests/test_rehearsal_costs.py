"""The cost table (twirls.rehearsal.costs): rows, sums and named stages from small rehearsal /
pipeline / GPU files written here; the GPU column; failed and missing stages; the generated
``reports/benchmarks/README.md`` written whole, ``--check``, and the one-line errors."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from twirls.rehearsal import costs
from twirls.rehearsal.costs import COMMAND, NOT_MEASURED, Inputs, document, main, render, table_rows

REPO = Path(__file__).resolve().parents[1]


def stage(name: str, seconds: float | None, *, dataset: str = "pubmed", rss: float = 1.0,
          device: str = "cpu", epochs: int = 100, runs: int = 10, spe: float = 1.0,
          status: str = "ok", **full: Any) -> dict[str, Any]:
    """A stage record as twirls.rehearsal.run writes it (the keys the table reads)."""
    record: dict[str, Any] = {
        "stage": name, "dataset": dataset, "status": status, "device": device,
        "peak_rss_gb": rss, "gpu_peak_gb": 2.5 if "cuda" in device else None,
        "seconds_per_epoch": spe, "runs": [{"returncode": 0}],
        "full_run": {"epochs": epochs, "seeds": runs, "grid_points": 1, "runs": runs,
                     "patience": None, **full}}
    if seconds is not None:
        record["full_run"]["estimated_seconds"] = seconds
    return record


def failed(name: str, error: str, returncode: int = 1, **kw: Any) -> dict[str, Any]:
    record = stage(name, None, status="failed", **kw)
    record["error"], record["runs"] = error, [{"returncode": returncode}]
    return record


def report(*stages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"machine": {"cpu_count": 2, "cpus_usable": 2, "cuda": {"usable": False}},
            "stages": list(stages), "not_run": [], **extra}


PUBMED = [stage("table2@pubmed-gcn", 1800.0, rss=1.5, epochs=500),
          stage("table2@pubmed-gcnii", 7200.0, rss=3.04, epochs=1500, runs=3, patience=100),
          stage("table10@pubmed-twirls-base-k2", 1080.0, rss=0.7)]
AMAZON = [stage(f"figure3[{m}]", h * 3600, dataset="amazon", epochs=e, runs=15, spe=spe,
                grid_points=5, seeds=3, rss=rss)
          for m, h, e, spe, rss in (("IGNN", 472.05, 5000, 22.66, 2.8), ("GAT", 36.51, 500, 17.5,
                                    3.87), ("TWIRLS-base", 47.67, 500, 22.9, 2.2),
                                    ("GCN", 9.84, 500, 4.7, 2.7), ("SGC", 8.15, 500, 3.9, 2.2),
                                    ("MLP", 1.5, 500, 0.7, 1.0))]
TABLE12 = stage("table12", 13839.5, dataset="pku", spe=69.18, epochs=20, runs=10, models=5,
                seeds=2, protocol="paper", rss=1.257)
PIPELINE = {"full_repro": {"complete": True, "seconds": 6333.98, "hours": 1.76,
                           "stages": {"table11": 386.94}}}


def rows_by_part(inputs: Inputs) -> dict[str, costs.Row]:
    return {r.part.split(":")[0].split(" ")[0]: r for r in table_rows(inputs)}


def test_rows_sum_their_stages_and_name_the_largest():
    rows = rows_by_part(Inputs(report(*PUBMED, *AMAZON, TABLE12), PIPELINE))
    pubmed = rows["Pubmed"]
    assert pubmed.part == "Pubmed: 3 `table2@pubmed-*` / `table10@pubmed-*` (Tables 2, 10)"
    # 1800 + 7200 + 1080 s = 2.8 h; GCNII alone is at least an hour: "of it"; its 1500 epochs
    # x 3 seeds are fewer than GCN's 500 x 10: its epochs are not the reason, not named
    assert pubmed.cpu == "~2.8 h, estimate (GCNII: 2.0 h of it, an upper bound with patience 100)"
    assert pubmed.peak_rss == "3.0 GB (`table2@pubmed-gcnii`)"
    assert pubmed.gpu == NOT_MEASURED
    amazon = rows["Amazon"]
    assert amazon.part == "Amazon: `figure3` (Figure 3; 5 ratios x 3 seeds)"
    # IGNN runs 10x the epochs of the others: named with them; five named at most (not MLP)
    assert amazon.cpu == ("~576 h, estimate (IGNN, 5000 epochs at 23 s: 472 h; TWIRLS-base 48 h; "
                          "GAT 37 h; GCN 10 h; SGC 8 h)")
    assert amazon.peak_rss == "3.9 GB (`figure3[GAT]`)"
    pku = rows["PKU"]
    assert pku.part == "PKU: `table12` with the paper's protocol (Table 12; 5 models x 2 seeds)"
    assert (pku.cpu, pku.peak_rss) == ("~3.8 h, estimate (69 s per model-epoch)", "1.3 GB")
    first = table_rows(Inputs(report(), PIPELINE))[0]
    assert (first.cpu, first.gpu) == ("1.76 h, measured", NOT_MEASURED)
    assert first.peak_rss == "see `docs/costs.md`"


def test_minutes_and_the_measured_runs_peak():
    table11 = stage("table11", 410.0, dataset="ogbn-arxiv", rss=7.782, epochs=4, runs=1)
    with_peak = {"full_repro": {**PIPELINE["full_repro"], "peak_rss_gb": 8.49}}
    rows = table_rows(Inputs(report(table11), with_peak))
    assert rows[0].peak_rss == "8.5 GB (largest process; which stage is not recorded)"
    assert (rows[4].part, rows[4].cpu, rows[4].peak_rss) == (
        "`table11` on the real ogbn-arxiv (Table 11)", "~7 min, estimate", "7.8 GB")
    stopped = {"full_repro": {"complete": False, "seconds_so_far": 1800.0,
                              "stages": {"a": 1.0, "b": 2.0}}}
    assert table_rows(Inputs(report(), stopped))[0].cpu == "incomplete run: 2 stages in 30 min, " \
                                                           "measured"
    assert table_rows(Inputs(report(), None))[0].cpu == "no `full_repro` in pipeline.json"
    # a run resumed in parts: the peak is the last part's, the time the stages' sum
    resumed = {"full_repro": {**with_peak["full_repro"], "parts": [{}, {}, {}]}}
    first = table_rows(Inputs(report(), resumed))[0]
    assert first.cpu == "1.76 h, measured (stage time, in 3 parts)"
    assert first.peak_rss == ("see `docs/costs.md` (resumed in 3 parts; the last one's largest: "
                              "8.5 GB)")
    scaled = {"full_repro": {**resumed["full_repro"],
                             "normalised": {"hours": {"python": 1.5, "torch": 1.61}}}}
    assert table_rows(Inputs(report(), scaled))[0].cpu == (
        "1.76 h, measured (stage time, in 3 parts); 1.50 / 1.61 h at the first part's speed "
        "(`reference_s`: python / torch)")


def test_failed_and_missing_stages_are_named_never_filled_in():
    rows = rows_by_part(Inputs(report(
        PUBMED[0], failed("table2@pubmed-gcnii", "exit status -9; log tail:", returncode=-9),
        failed("table12", "error: table12: needs DGL", dataset="pku"))))
    assert rows["Pubmed"].cpu == ("~30 min for 1 of 2 stages, estimate (failed "
                                  "in the rehearsal: `table2@pubmed-gcnii` (killed by signal 9))")
    assert rows["PKU"].cpu == "no estimate (failed in the rehearsal: `table12` (needs DGL))"
    assert rows["ogbn-arxiv"].cpu == "no stage `table2@ogbn-arxiv-*` in rehearsal.json"
    assert rows["ogbn-arxiv"].peak_rss == "not in rehearsal.json"
    assert rows["ogbn-arxiv"].part == "ogbn-arxiv: 0 `table2@ogbn-arxiv-*` (Table 2)"


def gpu_report(**extra: Any) -> dict[str, Any]:
    """A rehearsal-gpu.json: Pubmed's GCN and GCNII on CUDA, its TWIRLS stage missing; Amazon's
    GAT failed (no DGL), its IGNN on CUDA, its SGC on the CPU."""
    return report(
        stage("table2@pubmed-gcn", 60.0, device="cuda:0", epochs=500),
        stage("table2@pubmed-gcnii", 600.0, device="cuda:0", epochs=1500, runs=3, patience=100),
        stage("figure3[IGNN]", 36000.0, dataset="amazon", device="cuda:0", epochs=5000, runs=15),
        failed("figure3[GAT]", "error: figure3: GAT needs DGL (pip install dgl)",
               dataset="amazon"),
        stage("figure3[SGC]", 7200.0, dataset="amazon", device="cpu", runs=15), **extra)


def test_gpu_column_from_a_gpu_rehearsal():
    cpu = report(*PUBMED, *AMAZON[:3], TABLE12)
    bench = {"device": {"type": "cuda", "name": "NVIDIA H100 80GB HBM3"}, "quick": False}
    rows = rows_by_part(Inputs(cpu, PIPELINE, gpu_report(), bench))
    assert rows["Pubmed"].gpu == (
        "~11 min for 2 of 3 stages, estimate on NVIDIA H100 80GB HBM3 (GCNII: 10 min of it, an "
        "upper bound with patience 100; GPU memory up to 2.5 GB; not in rehearsal-gpu.json: "
        "`table10@pubmed-twirls-base-k2`)")
    assert rows["Amazon"].gpu == (
        "~10 h for 1 of 3 stages, estimate on NVIDIA H100 80GB HBM3 (GPU memory up to 2.5 GB; "
        "not in rehearsal-gpu.json: `figure3[TWIRLS-base]`; failed there: `figure3[GAT]` "
        "(needs DGL); ran on the CPU there: `figure3[SGC]`)")
    assert rows["PKU"].gpu == NOT_MEASURED
    assert table_rows(Inputs(cpu, PIPELINE, gpu_report()))[0].gpu == NOT_MEASURED
    # the GPU's name from the rehearsal's own machine record, else its stages' device
    named = gpu_report(machine={"gpu_name": "NVIDIA H200"})
    assert " on NVIDIA H200 (" in rows_by_part(Inputs(cpu, None, named, bench))["Pubmed"].gpu
    assert " on `cuda:0` (" in rows_by_part(Inputs(cpu, None, gpu_report()))["Pubmed"].gpu
    # a file merged from calls on two machines: each stage's own GPU, in the rows it fills
    merged = gpu_report(machine={"gpu": "NVIDIA H100"})
    for record in merged["stages"]:
        record["gpu"] = "NVIDIA H200" if record["stage"].endswith("-gcn") else "NVIDIA H100"
    assert " on NVIDIA H100 and NVIDIA H200 (" in rows_by_part(
        Inputs(cpu, None, merged, bench))["Pubmed"].gpu
    # the CPU columns do not move
    alone = rows_by_part(Inputs(cpu, PIPELINE))
    assert all(alone[k].cpu == rows[k].cpu and alone[k].gpu == NOT_MEASURED for k in alone)


def test_gpu_stages_sized_for_other_runs_than_todays_params_say_so():
    """A GPU rehearsal from before a change of seeds (Pubmed's GCN at 10 seeds; the CPU
    rehearsal, which follows today's params, at 100) is named with both counts, not silently
    summed as if it were today's run."""
    cpu = report(stage("table2@pubmed-gcn", 18000.0, epochs=500, runs=100), *PUBMED[1:])
    cell = rows_by_part(Inputs(cpu, PIPELINE, gpu_report()))["Pubmed"].gpu
    assert cell.endswith("sized for other runs than rehearsal.json (today's params): "
                         "`table2@pubmed-gcn` (10 of 100))")
    same = rows_by_part(Inputs(report(*PUBMED), PIPELINE, gpu_report()))["Pubmed"].gpu
    assert "sized for other runs" not in same


def test_gpu_rows_not_run_there_and_table11_from_the_gpu_benchmark():
    cpu = report(stage("table11", 410.0, dataset="ogbn-arxiv"), TABLE12)
    gpu = report(not_run=[{"stage": "table12", "reason": "out of time"}],
                 out_of_time=["table11"])
    bench = {"device": {"type": "cuda", "name": "NVIDIA H100"}, "quick": False,
             "epoch_time": {"models": [
                 {"model": "MLP", "status": "timed", "train_seconds": 0.004},
                 {"model": "GCN", "status": "timed", "train_seconds": 0.011},
                 {"model": "GAT", "status": "skipped", "reason": "needs DGL's layers"}]}}
    rows = rows_by_part(Inputs(cpu, None, gpu, bench))
    assert rows["PKU"].gpu == "not measured (not run there: `table12` (out of time))"
    assert rows["`table11`"].gpu == (
        "0.015 s per round of 2 models' training epochs, measured on NVIDIA H100 (gpu.json, "
        "an arxiv-sized random graph; not timed: GAT (skipped))")
    quick = {**bench, "quick": True}
    assert rows_by_part(Inputs(cpu, None, gpu, quick))["`table11`"].gpu == (
        "not measured (out of time: `table11`)")
    # a reason with a newline and a `|` stays inside its cell
    odd = report(not_run=[{"stage": "table12", "reason": "a | b\nc"}])
    line = next(x for x in render(Inputs(cpu, None, odd)).splitlines() if "| PKU" in x)
    assert "(not run there: `table12` (a \\| b c))" in line and line.count(" | ") == 3


def test_out_of_time_and_reduced_scale():
    cpu = report(*PUBMED[:2], out_of_time=["table10@pubmed-twirls-base-k2", "table12"])
    rows = rows_by_part(Inputs(cpu))
    assert rows["Pubmed"].cpu == (
        "~2.5 h for 2 of 3 stages, estimate (GCNII: 2.0 h of it, an upper bound with patience "
        "100; out of time: `table10@pubmed-twirls-base-k2`)")
    assert rows["PKU"].cpu == "no estimate (out of time: `table12`)"
    assert rows["PKU"].part.startswith("PKU: `table12` with ? protocol")
    gpu = report(stage("table2@pubmed-gcn", 60.0, device="cuda:0", epochs=500),
                 out_of_time=["table2@pubmed-gcnii"])
    assert rows_by_part(Inputs(cpu, None, gpu))["Pubmed"].gpu == (
        "~1 min for 1 of 3 stages, estimate on `cuda:0` (GPU memory up to 2.5 GB; not in "
        "rehearsal-gpu.json: `table10@pubmed-twirls-base-k2`; out of time: `table2@pubmed-gcnii`)")
    small = {**gpu, "scale": 0.01}
    assert rows_by_part(Inputs(cpu, None, small))["Pubmed"].gpu == (
        "not measured (rehearsal-gpu.json ran at --scale 0.01, not the real sizes)")


def write_files(folder: Path, rehearsal: dict[str, Any] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rehearsal.json").write_text(json.dumps(rehearsal or report(*PUBMED, TABLE12)))
    (folder / "pipeline.json").write_text(json.dumps(PIPELINE))
    return folder


def test_generated_file_written_whole_and_checked(tmp_path, capsys):
    bench = write_files(tmp_path / "bench")
    out = bench / "README.md"
    assert main(["--benchmarks", str(bench), "--check"]) == 1  # missing: --check fails
    assert not out.exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is missing" in err and "make cost-table" in err
    assert main(["--benchmarks", str(bench)]) == 0  # default: README.md beside the JSON files
    text = out.read_text()
    inputs = costs.read_inputs(bench)
    table = render(inputs)
    assert text == document(inputs) and table in text
    assert text.startswith("# What a full run costs\n\nGenerated by `make cost-table` "
                           f"(`{COMMAND}`) from the JSON files beside it")
    assert "| Pubmed: 3 `table2@pubmed-*`" in table
    assert "Every large-data stage stays under 16 GB of RAM." in " ".join(text.split())
    assert "The GPU column" not in text  # no rehearsal-gpu.json: no sentence about it
    assert not list(bench.glob("*.part"))  # no temporary file left
    assert main(["--benchmarks", str(bench), "--check"]) == 0
    assert main(["--benchmarks", str(bench)]) == 0 and out.read_text() == text
    outp = capsys.readouterr().out
    assert "cost table rewritten" in outp and "cost table unchanged" in outp


def test_explanations_follow_the_files():
    cpu = report(*PUBMED, TABLE12, budgets_epochs=[1, 2], rehearsal_wall_seconds=1193.2)
    text = document(Inputs(cpu, PIPELINE, report(budgets_epochs=[1, 5])))
    flat = " ".join(text.split())
    assert "real stage code with 1 and 2 epochs" in flat and "from one 20-minute run" in flat
    short = report(*PUBMED, TABLE12, budgets_epochs=[1, 2], rehearsal_wall_seconds=12.1)
    assert "from one 12-second run" in " ".join(document(Inputs(short, PIPELINE, None)).split())
    assert "whose budgets of 1 and 5 epochs sit beside" in flat
    assert "[`docs/gpu-session.md`](../../docs/gpu-session.md)" in flat
    big = report(stage("table2@ogbn-arxiv-gcnii", 10.0, rss=17.2), rss_limit_gb=16.0)
    assert ("Not every large-data stage stays under 16 GB of RAM: `table2@ogbn-arxiv-gcnii` "
            "peaks at 17.2 GB.") in " ".join(document(Inputs(big)).split())
    assert all(len(line) <= 99 for line in text.splitlines() if not line.startswith("|"))


def test_explicit_out_and_check_fails_on_a_stale_file(tmp_path, capsys):
    bench = write_files(tmp_path / "bench")
    out = tmp_path / "elsewhere" / "costs.md"
    args = ["--benchmarks", str(bench), "--out", str(out)]
    assert main(args) == 0 and out.is_file() and not (bench / "README.md").exists()
    capsys.readouterr()
    # new numbers in the rehearsal: the file is now stale
    write_files(bench, report(*PUBMED[:2], TABLE12))
    before = out.read_bytes()
    assert main([*args, "--check"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "differs from" in err and COMMAND in err
    assert out.read_bytes() == before
    # a hand edit is stale too
    out.write_text(before.decode().replace("# What a full run costs", "# Costs"))
    assert main([*args, "--check"]) == 1


def test_reduced_scale_rehearsal_refused(tmp_path, capsys):
    bench = write_files(tmp_path / "bench", report(*PUBMED, scale=0.01))
    out = bench / "README.md"
    out.write_text("kept\n")
    assert main(["--benchmarks", str(bench)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--scale 0.01" in err and out.read_text() == "kept\n"


def test_missing_rehearsal_one_line_exit_2_from_the_command(tmp_path):
    out = tmp_path / "README.md"
    proc = subprocess.run([sys.executable, "-m", "twirls.rehearsal.costs", "--benchmarks",
                           str(tmp_path / "none"), "--out", str(out)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "rehearsal.json is missing" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


def test_committed_cost_table_matches_the_committed_benchmarks():
    """reports/benchmarks/README.md is in step with the JSON files beside it (make cost-table)."""
    assert main(["--benchmarks", str(REPO / "reports" / "benchmarks"), "--check"]) == 0


def test_estimates_that_the_timing_could_not_resolve_say_so():
    """Seen on the H200: 1- and 5-epoch runs of ~15 s that differ only by noise give 0 s per
    epoch (start-up only: a lower bound); a stage with time for its first epoch only was timed
    on it, CUDA's warm-up included (likely high). Neither note on the CPU's single epochs."""
    cuda = {"device": "cuda", "dataset": "amazon", "grid_points": 5, "seeds": 3, "runs": 15}
    noisy = stage("figure3[GCN]", 15.2, spe=0.0, epochs_measured=[1, 5], **cuda)
    timed = stage("figure3[TWIRLS-base]", 4596.8, spe=0.61, epochs_measured=[1, 5], **cuda)
    first = stage("figure3[SGC]", 900.0, spe=0.12, epochs_measured=[1], **cuda)
    for record in (noisy, timed, first):
        record["epochs_measured"] = record["full_run"].pop("epochs_measured")
    cpu = {**copy.deepcopy(first), "device": "cpu"}
    gpu = rows_by_part(Inputs(report(*AMAZON), gpu_rehearsal=report(noisy, timed, first)))
    assert ("epochs below the timing noise, start-up only (a lower bound): `figure3[GCN]`"
            in gpu["Amazon"].gpu)
    assert ("timed on one first epoch, warm-up included (likely high): `figure3[SGC]`"
            in gpu["Amazon"].gpu)
    assert "`figure3[TWIRLS-base]`" not in gpu["Amazon"].gpu.split("(likely high)")[1]
    on_cpu = rows_by_part(Inputs(report(cpu)))["Amazon"].cpu
    assert "likely high" not in on_cpu and "timing noise" not in on_cpu


def test_the_measured_run_by_the_parts_of_issue_28s_protocol():
    """Each stage counts in the first part of the protocol it fits; its seconds scale by its own
    part's ``reference_s`` to the first part's day; the first row is held against 2 h."""
    run = {"complete": True, "seconds": 9100.0, "stages": {
        "table2@cora-gcn": 3600.0, "table8": 1800.0, "table8-extra@table8-paper-k2": 1200.0,
        "table4-twirls-base@nettack-cora": 600.0, "variants@cora-twirls-base-k1": 900.0,
        "variants@texas-geom-gcn-best-val": 300.0, "table3@texas-mlp": 300.0, "chains": 360.0},
        "parts": [{"command": "dvc repro -f", "reference_s": {"python": 0.2, "torch": 0.25}},
                  {"command": "dvc repro -f -s table2@cora-gcn",
                   "reference_s": {"python": 0.4, "torch": 0.5}}]}
    rows = costs.protocol_parts(run)
    assert [(count, seconds) for _, count, seconds, _ in rows] == [
        (3, 6300.0), (1, 1200.0), (1, 600.0), (2, 600.0), (1, 360.0)]
    assert rows[0][3] == {"python": 1800.0 + 2700.0, "torch": 1800.0 + 2700.0}
    assert rows[3][3] == {"python": 600.0, "torch": 600.0}
    text = costs.protocol_text({"full_repro": run})
    row = "| Table 8's three diagnostic protocols (`table8-extra@*`) | 1 | 0.33 h | 0.33 / 0.33 h |"
    assert row in text
    assert " ".join(text.split()).endswith(
        "Issue 28 asks for the whole run in 2 h on 2 cores at the first part's speed; the first "
        "row alone takes 1.25 / 1.25 h.")
    one_part = {**run, "parts": []}  # a run in one go: no column of scaled seconds
    assert "takes 1.75 h." in costs.protocol_text({"full_repro": one_part})
    no_cells = {**run, "stages": {"chains": 360.0}}  # no 100-seed cell: no sentence on them
    assert "Issue 28 asks" not in costs.protocol_text({"full_repro": no_cells})
    assert costs.protocol_text({"full_repro": {**run, "complete": False}}) == ""
    assert costs.protocol_text(None) == ""
    assert text in document(Inputs(report(), {"full_repro": run}))


def test_the_floor_is_set_beside_the_target_at_the_first_parts_speed():
    """``floor.json``'s hours scale by its ``reference_s`` to the full run's first part; with
    the cells at their floor and every other stage as measured, the target is called missed
    only by what is above it even with two standard errors fewer epochs."""
    run = {"parts": [{"reference_s": {"python": 0.2, "torch": 0.3}}]}
    record = {"config": "citeseer-gcnii", "gflop_per_seed_epoch": 56.5,
              "needed_gflop_per_seed_epoch": 37.2, "epochs_mean": 300.0, "epochs_sem": 25.0,
              "committed_runs": 10, "seeds": 100, "pflop": 1.116, "floor_s": 3600.0 * 3,
              "all_rows_floor_s": 3600.0 * 4}
    floor = {"records": [record], "floor_s": 3600.0 * 3, "all_rows_floor_s": 3600.0 * 4,
             "peak_gflops": 157.0, "threads": 2, "cpu": "AMD EPYC", "cpu_capability": "AVX512",
             "reference_s": {"python": 0.25, "torch": 0.3},
             "peak_gflops_by_shape": {"3327x256x256": 157.0}}
    text = " ".join(costs.floor_text(floor, {"full_repro": run}).split())
    assert "take 3.00 h at the peak rate" in text and "157 GFLOP/s on 2 cores" in text
    assert "37.2 GFLOP a seed-epoch of the 56.5 its stage multiplies on every node" in text
    assert "2.40 / 3.00 h at the first part's speed (`reference_s`: python / torch)" in text
    assert "on every node's rows, as the stages multiply them, 4.00 h (3.20 / 4.00 h)" in text
    # two standard errors fewer epochs: 300 -> 250, 3 h -> 2.5 h, 2.00 / 2.50 h scaled
    assert "2.00 / 2.50 h with each mean two standard errors fewer epochs" in text
    assert "These cells alone: not clearly above the 2-h target." in text  # no stages: alone
    wider = {**floor, "reference_s": {"python": 0.2, "torch": 0.3}}
    assert "These cells alone: above the 2-h" in (
        " ".join(costs.floor_text(wider, {"full_repro": run}).split()))
    # a complete run: the floor stands in for its own stages, the rest adds as measured
    parts = [{"command": "dvc repro -f", "reference_s": {"python": 0.2, "torch": 0.3}},
             {"command": "dvc repro -f -s other", "reference_s": {"python": 0.4, "torch": 0.3}}]
    whole = {"complete": True, "parts": parts, "stages": {
        "table2@citeseer-gcnii": 9_000.0, "first": 720.0, "other": 1_440.0}}
    text = " ".join(costs.floor_text(floor, {"full_repro": whole}).split())
    # the rest: 720 + 1,440 x 0.5 = 1,440 s (python), 720 + 1,440 = 2,160 s (torch)
    assert ("every other stage as the full run measured it (0.40 / 0.60 h at the first part's "
            "speed), the run would still take 2.40 / 3.10 h with the fewer epochs: above "
            "the 2-h target") in text
    assert "3.00 h here" in " ".join(costs.floor_text(floor, None).split())  # no scaling
    assert costs.floor_text(None, {"full_repro": run}) == ""
    assert costs.floor_text(floor, {"full_repro": run}) in document(
        Inputs(report(), {"full_repro": run}, floor=floor))
