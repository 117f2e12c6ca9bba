"""A stage stopped part-way goes on from the runs it finished (:mod:`twirls.train.journal`): the
runs read back are the runs trained, bit for bit; a run's key changes with anything that changes
its result; what cannot be keyed is never guessed; the journal is gone once the stage succeeds."""

from __future__ import annotations

import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from twirls.stages import skeleton
from twirls.train import journal
from twirls.train.experiment import experiment_runs, run_experiment
from twirls.train.parallel import run_all

from fixtures import toy_data

EXP = {"dataset": "toy", "model": "gcn", "model_cfg": {"layers": 2, "hidden": 16, "dropout": 0.5},
       "train_cfg": {"epochs": 10, "lr": 0.05, "weight_decay": 5.0e-4}}


def _counted(log: Path, value: int, stop_at: int | None = None) -> int:
    """``value`` squared, noting the call in ``log`` (one line a call, from any process);
    ``stop_at``: a Ctrl-C instead, at that value."""
    if value == stop_at:
        raise KeyboardInterrupt
    with log.open("a") as f:
        f.write(f"{value}\n")
    return value * value


def _calls(log: Path) -> list[int]:
    return sorted(int(v) for v in log.read_text().split()) if log.exists() else []


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_pool_reads_back_the_runs_its_journal_holds(tmp_path, jobs, capsys):
    log = tmp_path / "calls"
    runs = [partial(_counted, log, i) for i in range(6)]
    with journal.opened(tmp_path / "j"):
        run_all(runs[:4], jobs=jobs)
        log.unlink()
        out = run_all(runs, jobs=jobs)
    assert out == [i * i for i in range(6)]
    assert _calls(log) == [4, 5]  # the first four were read back, not run again
    assert "4 of 6 runs read back" in capsys.readouterr().err


def test_an_interrupted_pool_keeps_what_finished_before_the_stop(tmp_path):
    log = tmp_path / "calls"
    with journal.opened(tmp_path / "j") as book:
        runs = [partial(_counted, log, i) for i in range(3)] + [_interrupt]
        with pytest.raises(KeyboardInterrupt):
            run_all(runs, jobs=1)
        assert len(list(book.folder.glob("*.pkl"))) == 3
        assert not list(book.folder.glob("*.part"))
        log.unlink()
        with pytest.raises(KeyboardInterrupt):
            run_all(runs, jobs=1)
    assert not log.exists()  # nothing ran again before the run that stops


def _interrupt() -> int:
    raise KeyboardInterrupt


def test_without_a_journal_nothing_is_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert journal.current() is None
    assert run_all([partial(_counted, tmp_path / "calls", i) for i in range(3)]) == [0, 1, 4]
    assert not (tmp_path / ".twirls").exists()


def test_the_key_follows_every_input_of_a_run():
    data, cpu = toy_data(), torch.device("cpu")
    book = journal.Journal(Path("unused"))
    base = book.keys(experiment_runs(EXP, data, 2, cpu, progress=False))
    assert base == book.keys(experiment_runs(EXP, toy_data(), 2, cpu, progress=False))
    assert len(set(base)) == 4  # 2 seeds x 2 splits
    other_lr = {**EXP, "train_cfg": {**EXP["train_cfg"], "lr": 0.01}}
    assert set(base).isdisjoint(book.keys(experiment_runs(other_lr, data, 2, cpu,
                                                          progress=False)))
    changed = toy_data()
    changed.features[0, 0] += 1.0  # one feature of one node
    assert set(base).isdisjoint(book.keys(experiment_runs(EXP, changed, 2, cpu, progress=False)))
    objects = np.array([{"a": 1}, "b"], dtype=object)  # by their contents, not their addresses
    assert book.keys([partial(len, objects)]) == book.keys([partial(len, objects.copy())])
    assert book.keys([partial(len, objects)]) != book.keys([partial(len, objects[::-1].copy())])
    # a closure is keyed by what it holds
    assert book.keys([lambda v=1: v]) != book.keys([lambda v=2: v])
    limit = 1
    first = book.keys([lambda: limit])
    limit = 2
    assert book.keys([lambda: limit]) != first


def test_the_key_follows_the_machine(monkeypatch):
    book = journal.Journal(Path("unused"))
    runs = [partial(_counted, Path("x"), 1)]
    before = book.keys(runs)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        assert book.keys(runs) != before  # another thread count may round differently
    finally:
        torch.set_num_threads(threads)
    monkeypatch.setenv("MKL_CBWR", "AVX2")  # a math library's reproducibility mode
    assert book.keys(runs) != before
    monkeypatch.delenv("MKL_CBWR")
    assert book.keys(runs) == before
    monkeypatch.setattr(journal, "_code_digest", lambda: "other code")
    assert book.keys(runs) != before
    monkeypatch.undo()
    other = "generic" if journal.mkl_code_path() == "intel" else "intel"
    monkeypatch.setattr(journal, "mkl_code_path", lambda: other)  # make mkl-intel-path's library
    assert book.keys(runs) != before


def test_a_damaged_record_counts_as_missing(tmp_path):
    log = tmp_path / "calls"
    runs = [partial(_counted, log, i) for i in range(3)]
    with journal.opened(tmp_path / "j") as book:
        run_all(runs)
        (book.folder / f"{book.keys(runs)[1]}.pkl").write_bytes(b"\x80\x05trunc")
        log.unlink()
        assert run_all(runs) == [0, 1, 4]
    assert _calls(log) == [1]


def test_what_cannot_be_keyed_turns_the_journal_off(tmp_path):
    class Opaque:
        __slots__ = ()

    log = tmp_path / "calls"
    with journal.opened(tmp_path / "j") as book:
        assert book.keys([partial(_counted, log, 1), partial(print, Opaque())]) is None
        runs = [partial(_counted, log, 1), partial(_counted, log, 2, generator=Opaque())]
        with pytest.raises(TypeError):  # the run itself fails; nothing was kept before it
            run_all(runs)
        assert not book.folder.exists()


def test_keys_are_the_same_in_a_fresh_process():
    """A resumed stage is another process: its keys must not depend on ids or on what ran
    before in the process that computed them."""
    code = ("import torch, sys\nsys.path.insert(0, 'tests')\nfrom pathlib import Path\n"
            "from fixtures import toy_data\nfrom twirls.train import journal\n"
            "from twirls.train.experiment import experiment_runs\n"
            "from test_journal import EXP\ntorch.set_num_threads(1)\n"
            "runs = experiment_runs(EXP, toy_data(), 2, torch.device('cpu'), progress=False)\n"
            "print(' '.join(journal.Journal(Path('unused')).keys(runs)))\n")
    root = Path(__file__).resolve().parents[1]
    keys = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, cwd=root).stdout.split() for _ in range(2)]
    assert keys[0] == keys[1] and len(set(keys[0])) == 4


def test_runs_read_back_equal_the_runs_trained(tmp_path):
    torch.set_num_threads(1)
    data, cpu = toy_data(), torch.device("cpu")
    fresh = run_experiment(EXP, data, 2, cpu, progress=False, jobs=1)
    with journal.opened(tmp_path / "j") as book:
        first = run_experiment(EXP, data, 2, cpu, progress=False, jobs=2)
        assert len(list(book.folder.glob("*.pkl"))) == 4
        again = run_experiment(EXP, data, 2, cpu, progress=False, jobs=2)
    for a, b, c in zip(fresh.runs, first.runs, again.runs, strict=True):
        assert (a.seed, a.best_epoch, a.test, a.val, a.history) == \
            (b.seed, b.best_epoch, b.test, b.val, b.history) == \
            (c.seed, c.best_epoch, c.test, c.val, c.history)


_STOP_AT: dict[str, int | None] = {"at": None}


def _stage(argv: list[str] | None = None) -> int:
    log = Path(argv[0])
    run_all([partial(_stopping, log, i) for i in range(4)])
    return 0


def _stopping(log: Path, value: int) -> int:
    return _counted(log, value, _STOP_AT["at"])


_stage.__module__ = "twirls.stages.toy"


def test_a_stage_keeps_its_journal_when_stopped_and_clears_it_when_done(tmp_path, monkeypatch,
                                                                        capsys):
    monkeypatch.setenv("TWIRLS_JOURNAL", str(tmp_path / "journals"))
    monkeypatch.setitem(_STOP_AT, "at", 2)
    stage, log = skeleton.entry(_stage), tmp_path / "calls"
    assert stage([str(log)]) == 130  # Ctrl-C: one line, exit 130
    assert "interrupted: toy" in capsys.readouterr().err
    kept = list((tmp_path / "journals").glob("*/*.pkl"))
    assert len(kept) == 2 and kept[0].parent.name.startswith("toy-")
    _STOP_AT["at"] = None
    log.unlink()
    assert stage([str(log)]) == 0
    assert _calls(log) == [2, 3]  # it went on from the runs it had finished
    assert "2 of 4 runs read back" in capsys.readouterr().err
    assert not any((tmp_path / "journals").glob("*/*"))  # done: its runs are gone
