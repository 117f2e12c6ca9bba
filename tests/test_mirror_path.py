"""A relative ``TWIRLS_DATA_MIRROR`` (docs/data.md's ``export TWIRLS_DATA_MIRROR=...``, which CI
sets to ``../shared/datasets``) works in the tests that read the mirror from temporary folders
(issue 30: it used to fail 16 and error 32 of them)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fixtures import MIRROR, REPO


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"offline mirror not found at {MIRROR}")
def test_a_relative_mirror_path_works_where_tests_change_folders():
    relative = os.path.relpath(MIRROR, REPO)
    assert not os.path.isabs(relative)
    env = {**os.environ, "TWIRLS_DATA_MIRROR": relative}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "tests/test_loaders.py", "-k", "planetoid_real_files or pubmed_without_allx or "
         "nettack_missing_split"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1]
