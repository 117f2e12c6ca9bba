"""Test-wide settings: no analytics, no version checks over the network, quiet DGL; every test
that needs DGL is marked ``reference`` (``make test-reference`` runs them on the reference stack,
requirements-reference.txt)."""

import os
from pathlib import Path

# A relative $TWIRLS_DATA_MIRROR (docs/data.md's `../shared/datasets`) means relative to where
# pytest was started: resolved once, here, before any test module reads it, so that tests that
# work in temporary folders or start stages there get the same folder.
if os.environ.get("TWIRLS_DATA_MIRROR"):
    os.environ["TWIRLS_DATA_MIRROR"] = str(Path(os.environ["TWIRLS_DATA_MIRROR"]).resolve())

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("OUTDATED_IGNORE", "1")  # ogb asks PyPI for newer versions on import
os.environ.setdefault("DGLBACKEND", "pytorch")
# Stages run by the tests keep their finished runs (twirls.train.journal) in a folder of this
# test process, not in the checkout's .twirls/journal, and it goes when the process ends.
if "TWIRLS_JOURNAL" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["TWIRLS_JOURNAL"] = tempfile.mkdtemp(prefix="twirls-journal-tests-")
    atexit.register(shutil.rmtree, os.environ["TWIRLS_JOURNAL"], ignore_errors=True)

import torch  # noqa: E402

# Two pytest workers share two cores: one torch thread each avoids 3-10x oversubscription.
torch.set_num_threads(1)

from hypothesis import settings  # noqa: E402

# The same examples on every run and machine: a property test that fails, fails every time.
settings.register_profile("deterministic", derandomize=True, database=None)
settings.load_profile("deterministic")

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _cpu_flags_restored():
    """A stage entry run in-process (``open_stage`` -> ``twirls.train.cpu.configure_cpu``)
    flushes denormals for the rest of its process; restore torch's default after each test, so
    that the tests a worker runs next see IEEE floats (hypothesis refuses to build float
    strategies when subnormals flush to zero)."""
    yield
    torch.set_flush_denormal(False)


def pytest_collection_modifyitems(items):
    """Mark ``reference`` every test that skips without DGL (``requires.needs("dgl")``)."""
    for item in items:
        if any(str(mark.kwargs.get("reason", "")).startswith("dgl is not installed")
               for mark in item.iter_markers("skipif")):
            item.add_marker(pytest.mark.reference)
