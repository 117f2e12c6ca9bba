"""Setting up: the Makefile refuses, in one line, a Python that the pinned stack has no wheels
for; the GPU machine's DVC wheels pin the same DVC."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no `make` on the PATH")


def make(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    return subprocess.run(["make", "-s", "-C", str(folder), *args, f"PYTHON={sys.executable}"],
                          capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    for name in ("requirements.txt", "requirements-nodeps.txt", "pyproject.toml"):  # .installed
        (tmp_path / name).write_text("")
    return tmp_path


def pinned_pythons(makefile: Path) -> list[str]:
    return re.search(r"^PINNED_PYTHON := (.*)$", makefile.read_text(), re.M).group(1).split()


def test_a_pinned_python_passes(folder):
    assert VERSION in pinned_pythons(folder / "Makefile")  # CI's interpreter is a pinned one
    done = make(folder, "check-python")
    assert done.returncode == 0, done.stderr


def test_another_python_is_one_line_naming_it_and_the_fix(folder):
    done = make(folder, "check-python", "PINNED_PYTHON=3.99 9.9")
    assert done.returncode != 0
    line = done.stderr.splitlines()[0]
    assert line.startswith(f"make: {sys.executable} is Python {VERSION}, but requirements.txt")
    assert "installs on Python 3.99, 9.9 only" in line and "PYTHON=python9.9`." in line
    assert not (folder / ".venv").exists()


def test_a_venv_of_another_python_says_to_remove_it(folder):
    (folder / ".venv" / "bin").mkdir(parents=True)
    (folder / ".venv" / "bin" / "python").symlink_to(sys.executable)
    done = make(folder, "test", "PINNED_PYTHON=9.9")  # checked before installing or testing
    assert done.returncode != 0
    line = done.stderr.splitlines()[0]
    assert line.startswith(f"make: {folder}/.venv/bin/python is Python {VERSION}")
    assert line.endswith("`make test PYTHON=python9.9` after `make clean-venv`.")


def requirements(path: Path) -> list[Requirement]:
    lines = [ln.split("#")[0].strip() for ln in path.read_text().splitlines()]
    return [Requirement(ln) for ln in lines if ln]


def applying(found: list[Requirement], python: str | None) -> list[Requirement]:
    """The requirements whose environment marker holds on ``python`` (None: this one)."""
    env = {"python_version": python} if python else None
    return [r for r in found if r.marker is None or r.marker.evaluate(env)]


def pins(path: Path, python: str | None = None) -> dict[str, str]:
    """``name -> version`` of the pins that apply on ``python`` (default: this one)."""
    return {r.name: str(r.specifier).removeprefix("==")
            for r in applying(requirements(path), python)}


@pytest.mark.parametrize("name", ["requirements.txt", "requirements-nodeps.txt",
                                  "requirements-reference.txt", "requirements-device.txt"])
def test_every_pin_is_exact_and_one_per_pinned_python(name):
    found = requirements(REPO / name)
    assert all(len(r.specifier) == 1 and next(iter(r.specifier)).operator == "==" for r in found)
    for python in pinned_pythons(REPO / "Makefile"):
        names = [r.name for r in applying(found, python)]
        assert len(names) == len(set(names)), python


def test_device_wheels_pin_the_same_dvc_as_the_pinned_stack():
    """``make device-wheels`` builds requirements-device.txt: DVC for a GPU machine's own stack,
    the same DVC (and C YAML reader) that requirements.txt installs, every package pinned."""
    device = pins(REPO / "requirements-device.txt")
    pinned = pins(REPO / "requirements.txt", python="3.12")  # the GPU machine's Python
    for name in ("dvc", "ruamel.yaml.clib"):
        assert device[name] == pinned[name]
    assert not {"torch", "numpy", "scipy", "pandas", "dgl"} & set(device)  # the machine's own
    assert "requirements-device.txt" in (REPO / "Makefile").read_text()


def test_ci_tests_the_newest_pinned_python(tmp_path):
    """CI's last step, .ci/newest-python (``make test`` in a Debian sid chroot), takes the newest
    Python of the Makefile's PINNED_PYTHON, and takes the new one when the list grows."""
    assert "bash .ci/newest-python" in (REPO / ".ci" / "run").read_text().splitlines()

    def newest(repo: Path) -> str:
        return subprocess.run(["bash", str(repo / ".ci" / "newest-python"), "--version"],
                              capture_output=True, text=True, check=True).stdout.strip()

    assert newest(REPO) == pinned_pythons(REPO / "Makefile")[-1]
    (tmp_path / ".ci").mkdir()
    shutil.copy(REPO / ".ci" / "newest-python", tmp_path / ".ci")
    makefile = (REPO / "Makefile").read_text()
    grown = re.sub(r"^(PINNED_PYTHON := .*)$", r"\1 3.16", makefile, count=1, flags=re.M)
    (tmp_path / "Makefile").write_text(grown)
    assert newest(tmp_path) == "3.16"
