"""twirls.bench.split_seeds: Table 3's comparisons at one seed a split and at several."""

from __future__ import annotations

import pytest

from twirls.bench import split_seeds
from twirls.reports.claims import per_split_error


def scores(by_split: list[list[float]]) -> dict[tuple[str, str], float]:
    return {(str(i), str(s)): v for i, seeds in enumerate(by_split) for s, v in enumerate(seeds)}


def test_the_first_seed_of_each_split_is_its_one_seed_run():
    runs = {("0", str(s)): float(s) for s in range(12)} | {("1", "0"): 50.0, ("1", "1"): 60.0}
    assert split_seeds.first_seeds(runs) == {("0", "0"): 0.0, ("1", "0"): 50.0}


def test_a_comparison_at_one_seed_and_at_all_seeds():
    twirls = scores([[80.0, 84.0], [70.0, 74.0], [90.0, 90.0]])
    mlp = scores([[79.0, 79.0], [71.0, 69.0], [85.0, 89.0]])
    got = split_seeds.comparison(twirls, mlp)
    # one seed: 80-79, 70-71, 90-85 = 1, -1, 5
    assert got["one_seed"]["difference"] == pytest.approx(5 / 3, abs=1e-3)
    assert got["one_seed"]["error"] == pytest.approx(
        per_split_error({k: twirls[k] for k in [("0", "0"), ("1", "0"), ("2", "0")]},
                        {k: mlp[k] for k in [("0", "0"), ("1", "0"), ("2", "0")]}), abs=1e-3)
    # every seed: the split means differ by 3, 2 and 3
    assert got["all_seeds"]["difference"] == pytest.approx(8 / 3, abs=1e-3)
    assert got["all_seeds"]["error"] == pytest.approx(0.4714 / 3 ** 0.5, abs=1e-3)
    assert got["error_ratio"] == pytest.approx(
        got["all_seeds"]["error"] / got["one_seed"]["error"], abs=1e-2)


def test_the_spread_of_a_splits_seeds():
    assert split_seeds.seed_spread(scores([[80.0, 84.0], [70.0, 70.0]])) == pytest.approx(1.0)


def test_the_entries_of_a_dataset_leave_out_geom_gcn_and_the_skipped():
    table3 = {f"{ds}-{m}": {"dataset": ds} for ds in ("texas", "actor")
              for m in ("twirls", "mlp", "gat", "geom-gcn")}
    got = split_seeds.entries_of("actor", table3, {"actor-gat"})
    assert list(got) == ["twirls", "mlp"]


def test_one_seed_a_split_is_refused_with_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        split_seeds.main(["--seeds", "1"])
    assert exc.value.code == 2
    assert "at least 2 seeds a split" in capsys.readouterr().err


def test_an_unknown_entry_to_skip_is_refused_with_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        split_seeds.main(["--skip", "texas-gta"])
    assert exc.value.code == 2
    assert "texas-gta is no entry of params/table3.yaml" in capsys.readouterr().err


def test_a_dataset_that_is_not_there_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        split_seeds.main(["--datasets", "cornell", "--raw", str(tmp_path),
                          "--out", str(tmp_path / "out.json")])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("split_seeds: ") and "cornell" in err and "Traceback" not in err
    assert not (tmp_path / "out.json").exists()
