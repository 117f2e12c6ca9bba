"""Helpers to run the real ``dvc`` CLI on a temporary copy of the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from twirls.params import read_all, write_all

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("TWIRLS_DATA_MIRROR") or REPO.parent / "shared" / "datasets")


def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(
            out.get(key), dict) else value
    return out


def copy_repo(dest: Path, params_override: dict) -> Path:
    """Copy the files git would track (no .venv, no data/raw) and commit them in a new repo."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    params = read_all(dest)
    override = dict(params_override)
    for key in override.pop("_replace", []):
        params.pop(key, None)
    write_all(dest, deep_merge(params, override))
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-qm", "e2e copy")
    return dest


def env(cwd: Path, mirror: Path | None = None) -> dict[str, str]:
    out = dict(os.environ)
    out["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{out.get('PATH', '')}"
    out["PYTHONPATH"] = str(cwd / "src")  # the copy's own code, not the editable install
    out["TWIRLS_DATA_MIRROR"] = str(mirror or MIRROR)
    out.update(DVC_NO_ANALYTICS="1", OUTDATED_IGNORE="1", GIT_AUTHOR_NAME="e2e",
               GIT_AUTHOR_EMAIL="e2e@localhost", GIT_COMMITTER_NAME="e2e",
               GIT_COMMITTER_EMAIL="e2e@localhost")
    return out


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, env=env(cwd))


#: seconds a dvc command may take before the test calls it hung: the smoke repro took 872 s on a
#: slow day of the 2-core machine (its usual ~10 min), so a hang shows only well above that
TIMEOUT = 1800


def dvc(cwd: Path, *args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=cwd, env=env(cwd),
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"dvc {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def run_dvc(cwd: Path, *args: str, mirror: Path | None = None,
            timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """``dvc <args>`` whose failure the test inspects (``mirror``: another data mirror)."""
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=cwd, env=env(cwd, mirror),
                          capture_output=True, text=True, timeout=timeout)
