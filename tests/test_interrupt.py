"""Ctrl-C in any stage is one line and exit 130 (twirls.stages.cli.entry), also in the
small stages around the training ones: check-params, fetch@, attention-figures. The real SIGINT
to a training stage under `dvc repro` is in test_pipeline_e2e.py."""

from __future__ import annotations

import importlib

import pytest


def interrupt(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize(("module", "where", "argv"), [
    ("check_params", "read_all", []),
    ("fetch", "fetch_status", ["cora", "--raw", "{tmp}"]),
    ("attention_figures", "load_params", ["--out", "{tmp}"]),
])
def test_ctrl_c_is_one_line_and_exit_130(module, where, argv, monkeypatch, capsys, tmp_path):
    stage = importlib.import_module(f"twirls.stages.{module}")
    monkeypatch.setattr(stage, where, interrupt)  # Ctrl-C while the stage works
    code = stage.main([a.format(tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 130
    assert len(err) == 1 and err[0].startswith(f"interrupted: {module}: ")
    assert "dvc checkout" in err[0]
