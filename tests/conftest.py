"""Test-wide settings: no analytics, no version checks over the network, quiet DGL."""

import os

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("OUTDATED_IGNORE", "1")  # ogb asks PyPI for newer versions on import
os.environ.setdefault("DGLBACKEND", "pytorch")

import torch  # noqa: E402

# Two pytest workers share two cores: one torch thread each avoids 3-10x oversubscription.
torch.set_num_threads(1)

from hypothesis import settings  # noqa: E402

# The same examples on every run and machine: a property test that fails, fails every time.
settings.register_profile("deterministic", derandomize=True, database=None)
settings.load_profile("deterministic")
