"""``twirls.models.c_library``: a C kernel's library built from another version of its source
(``git pull`` without ``make``) takes other arguments: it is refused with one warning, never
called, and the kernel's caller goes on without it."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from twirls.models import csr_kernel, masks

# each kernel: its module, the source line that states its version, the versions to build
KERNELS = {
    "csr": (csr_kernel, "int twirls_csr_version(void) { return 3; }", (1, 2)),  # 1: no function
    "masks": (masks, "int twirls_masks_version(void) { return 1; }", (2,)),
}


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_a_library_built_from_another_version_is_refused_with_a_hint(tmp_path, kernel):
    module, line, others = KERNELS[kernel]
    source = module.SOURCE.read_text()
    assert line in source and f"return {module.VERSION};" in line
    builds = {"current": source}
    for version in others:
        builds[version] = source.replace(line, "" if version == 1 else
                                         line.replace(f"return {module.VERSION}",
                                                      f"return {version}"))
    for name, text in builds.items():
        (tmp_path / "k.c").write_text(text)
        library = tmp_path / f"{name}.so"
        subprocess.run(["cc", "-O1", "-ffp-contract=off", "-fPIC", "-shared", "-o", str(library),
                        str(tmp_path / "k.c")], check=True)
        if name == "current":
            functions, status = module._open(library)
            assert functions is not None and status.startswith("sha256:")
            continue
        with pytest.warns(RuntimeWarning, match="`make` rebuilds it"):
            functions, status = module._open(library)
        assert functions is None and status == (f"rejected: it was built from version {name} "
                                                f"of the kernel, not {module.VERSION}")
