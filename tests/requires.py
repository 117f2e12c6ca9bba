"""Optional packages that some tests need, and one way to skip those tests where one is missing.

The torch-native core needs none of DGL, DeepRobust, OGB or DVC. A test that needs one of them
(DGL's layers as a reference oracle, DeepRobust's reference implementations, OGB's own reader,
the dvc CLI) says so with a marker::

    @needs_dgl
    def test_reference_variant_equals_dgl_twirlsconv(): ...

or, inside a fixture or helper, with ``require("deeprobust")``. Where the package is not installed
the test skips and the reason names the package, what the test uses it for, and where to get it:
`requirements.txt` (`make test`) has DeepRobust, OGB and DVC; DGL, which needs torch <= 2.2.1
and numpy < 2, is in the reference stack, `requirements-reference.txt` (`make test-reference`,
which runs the tests marked ``reference``: those that skip without DGL, see ``conftest.py``).

Only a package that is *not installed* skips its tests. One that is installed but fails to import
(e.g. DGL 2.1 under a newer torch) still fails them, with its real error: a broken install must
not quietly turn tests into skips.
"""

from __future__ import annotations

from importlib.util import find_spec

import pytest

WHERE = {"dgl": "the reference stack (requirements-reference.txt, `make test-reference`) has it"}
DEFAULT_WHERE = "the default stack (requirements.txt, `make test`) has it"

#: What the tests use each optional package for, unless a test says more precisely.
USES = {
    "dgl": "DGL's layers: a reference oracle of ours",
    "deeprobust": "DeepRobust: the reference Mettack, GCN, GCN-Jaccard, GCN-SVD or data loader",
    "ogb": "OGB: its own ogbn-arxiv reader as the oracle of ours",
    "dvc": "the dvc CLI",
}


def installed(package: str) -> bool:
    """Whether ``package`` is installed (looked up, not imported: cheap at collection time)."""
    return find_spec(package) is not None


def reason(package: str, why: str = "") -> str:
    """The skip reason for a test that needs ``package`` (``why``: what for, if more specific)."""
    return (f"{package} is not installed ({why or USES[package]}); "
            f"{WHERE.get(package, DEFAULT_WHERE)}")


def needs(package: str, why: str = "") -> pytest.MarkDecorator:
    """Marker: skip the test (or every test of a module, in ``pytestmark``) without ``package``."""
    return pytest.mark.skipif(not installed(package), reason=reason(package, why))


def require(package: str, why: str = "") -> None:
    """Skip the running test (from a fixture or helper too) when ``package`` is not installed."""
    if not installed(package):
        pytest.skip(reason(package, why))


needs_dgl = needs("dgl")
needs_deeprobust = needs("deeprobust")
needs_ogb = needs("ogb")
needs_dvc = needs("dvc")


def _kernel_status() -> str:
    from twirls.models import csr_kernel

    return f"{csr_kernel.LIBRARY}: {csr_kernel.status()}"


#: The tests that need the project's CSR kernel (``make`` builds it where a C compiler is).
needs_kernel = pytest.mark.skipif(
    ": sha256:" not in _kernel_status(),
    reason=f"no CSR kernel here ({_kernel_status()}); `make test` builds it where a C compiler is")


def _masks_kernel_status() -> str:
    from twirls.models import masks

    return f"{masks.LIBRARY}: {masks.kernel_status()}"


#: The tests that need the project's masks kernel (``make`` builds it where a C compiler is).
needs_masks_kernel = pytest.mark.skipif(
    ": sha256:" not in _masks_kernel_status(),
    reason=f"no masks kernel here ({_masks_kernel_status()}); `make test` builds it where a C "
           "compiler is")
