"""Nothing measured is lost to a damaged input.

A present raw file that fails its checksum is set aside and fetched again; when that is
impossible the fetch stage fails loudly and ``load_dataset`` raises :class:`DatasetDamaged`
(never the ``DatasetUnavailable`` that stages turn into ``no-data`` cells). ``missing`` stays for
datasets whose files never could be had. Real files on disk, a fake mirror folder, a URL that
cannot be reached (port 9 on localhost), and the stage's real entry point.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from twirls.data import fetch
from twirls.data.fetch import MANIFEST, file_digest, read_manifest
from twirls.data.registry import DatasetDamaged, DatasetUnavailable, load_dataset
from twirls.stages import fetch as fetch_stage

GOOD = {"a.bin": b"first raw file\n" * 500, "b.bin": b"second raw file\n" * 300}
GARBAGE = b"\x00garbage appended by a careless editor\n"
NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing listens there
MIRROR = Path(os.environ.get(fetch.MIRROR_ENV) or Path(__file__).parents[1] / "../shared/datasets")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def site(tmp_path: Path, monkeypatch) -> dict[str, Path]:
    """A two-file manifest for dataset ``cora``, a mirror holding both, and the stage's paths."""
    mirror = tmp_path / "mirror"
    (mirror / "owner__repo").mkdir(parents=True)
    rows = ["dataset\tfile\tchecksum\turl\tmirror_path\textract"]
    for name, data in GOOD.items():
        (mirror / "owner__repo" / name).write_bytes(data)
        rows.append(f"cora\t{name}\tsha256:{sha(data)}\t{NOWHERE}/{name}\towner__repo/{name}\t")
    manifest = tmp_path / "manifest.tsv"
    manifest.write_text("\n".join(rows) + "\n")
    monkeypatch.setenv(fetch.MIRROR_ENV, str(mirror))
    return {"mirror": mirror, "manifest": manifest, "raw": tmp_path / "raw",
            "damaged": tmp_path / "damaged", "pins": tmp_path / "pins.tsv"}


def run_stage(site: dict[str, Path], dataset: str = "cora", *extra: str) -> int:
    return fetch_stage.main([dataset, "--raw", str(site["raw"]), "--pins", str(site["pins"]),
                             "--damaged", str(site["damaged"]),
                             "--manifest", str(site["manifest"]), *extra])


def status_of(site: dict[str, Path], dataset: str = "cora") -> dict:
    return json.loads((site["raw"] / dataset / "FETCH.json").read_text())


def stderr_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_garbage_appended_is_set_aside_and_repaired_from_the_mirror(site, capsys):
    assert run_stage(site) == 0
    before = (site["raw"] / "cora" / "FETCH.json").read_bytes()
    capsys.readouterr()
    target = site["raw"] / "cora" / "a.bin"
    with open(target, "ab") as fh:
        fh.write(GARBAGE)

    assert run_stage(site) == 0
    [line] = stderr_lines(capsys)
    aside = site["damaged"] / "cora" / "a.bin.1"
    for part in (str(target), sha(GOOD["a.bin"]), sha(GOOD["a.bin"] + GARBAGE), str(aside),
                 str(site["mirror"] / "owner__repo" / "a.bin")):
        assert part in line
    assert target.read_bytes() == GOOD["a.bin"]
    assert aside.read_bytes() == GOOD["a.bin"] + GARBAGE
    # the dataset folder (a DVC output) is exactly as before: nothing downstream looks changed
    assert (site["raw"] / "cora" / "FETCH.json").read_bytes() == before
    assert sorted(p.name for p in (site["raw"] / "cora").iterdir()) == [
        "FETCH.json", "a.bin", "b.bin"]
    assert (site["damaged"] / "cora" / ".gitignore").read_text().splitlines()[-1] == "*"

    # a second damage keeps the first bad copy
    target.write_bytes(b"truncated")
    assert run_stage(site) == 0
    assert (site["damaged"] / "cora" / "a.bin.2").read_bytes() == b"truncated"
    assert aside.exists() and target.read_bytes() == GOOD["a.bin"]


def test_damaged_file_without_a_good_copy_fails_the_stage_loudly(site, monkeypatch, capsys):
    assert run_stage(site) == 0
    capsys.readouterr()
    target = site["raw"] / "cora" / "b.bin"
    with open(target, "ab") as fh:
        fh.write(GARBAGE)
    monkeypatch.delenv(fetch.MIRROR_ENV)  # no mirror, and the URL cannot be reached

    assert run_stage(site) == 1
    [line] = stderr_lines(capsys)
    assert line.startswith("fetch@cora FAILED (damaged): ")
    assert str(target) in line and sha(GOOD["b.bin"]) in line
    assert f"{NOWHERE}/b.bin" in line and "put it at" in line  # where it was looked for, the fix
    status = status_of(site)
    assert status["status"] == "damaged" and "b.bin" in status["reason"]
    # the bad file stays where it is, so every later run fails the same way
    assert target.read_bytes() == GOOD["b.bin"] + GARBAGE
    assert not (site["damaged"] / "cora").exists()
    assert run_stage(site) == 1 and status_of(site)["status"] == "damaged"

    with pytest.raises(DatasetDamaged, match="damaged") as err:
        load_dataset("cora", site["raw"])
    assert not isinstance(err.value, DatasetUnavailable)


def test_bad_mirror_copy_cannot_repair_and_is_reported(site, capsys):
    assert run_stage(site) == 0
    target = site["raw"] / "cora" / "a.bin"
    target.write_bytes(b"bad")
    (site["mirror"] / "owner__repo" / "a.bin").write_bytes(b"also bad")
    capsys.readouterr()

    assert run_stage(site) == 1
    [line] = stderr_lines(capsys)
    assert "FAILED (damaged)" in line and str(site["mirror"] / "owner__repo" / "a.bin") in line
    assert status_of(site)["status"] == "damaged"
    assert target.read_bytes() == b"bad" and not list((site["raw"] / "cora").glob("*.part"))


def test_fetched_copy_failing_its_checksum_is_damaged_not_missing(site):
    (site["mirror"] / "owner__repo" / "b.bin").write_bytes(GOOD["b.bin"][:-5])
    assert run_stage(site) == 1
    status = status_of(site)
    assert status["status"] == "damaged" and "truncated" in status["reason"]
    assert not (site["raw"] / "cora" / "b.bin").exists()


def test_never_obtainable_dataset_is_missing_and_the_pipeline_goes_on(site, capsys):
    shutil.rmtree(site["mirror"] / "owner__repo")  # an empty mirror, and the URL is unreachable
    assert run_stage(site) == 0
    status = status_of(site)
    assert status["status"] == "missing"
    assert "a.bin" in status["reason"] and "b.bin" in status["reason"]
    assert "cannot download" in capsys.readouterr().err
    assert run_stage(site, "cora", "--strict") == 1
    with pytest.raises(DatasetUnavailable) as err:
        load_dataset("cora", site["raw"])
    assert not isinstance(err.value, DatasetDamaged)


def test_mirror_setting_pointing_nowhere_fails_instead_of_reporting_missing(site, monkeypatch,
                                                                            capsys):
    monkeypatch.setenv(fetch.MIRROR_ENV, str(site["mirror"] / "typo"))
    assert run_stage(site) == 1
    [line] = stderr_lines(capsys)
    assert "FAILED (failed)" in line and "not a folder" in line
    assert status_of(site)["status"] == "failed"


@pytest.mark.parametrize("state, raised", [
    ("missing", DatasetUnavailable), ("damaged", DatasetDamaged), ("failed", DatasetDamaged),
    ("something-new", DatasetDamaged)])
def test_load_dataset_tells_missing_from_damaged(tmp_path, state, raised):
    assert not issubclass(DatasetDamaged, DatasetUnavailable)
    (tmp_path / "cora").mkdir()
    (tmp_path / "cora" / "FETCH.json").write_text(json.dumps({"status": state, "reason": "why"}))
    with pytest.raises(raised, match="why") as err:
        load_dataset("cora", tmp_path)
    assert type(err.value) is raised


@pytest.mark.parametrize("content", [None, b"not a pickle", b""])
def test_present_files_that_fail_to_parse_are_damaged(tmp_path, content):
    """FETCH.json says ok but the files are gone or unreadable: damaged, not no-data."""
    folder = tmp_path / "cora"
    folder.mkdir()
    (folder / "FETCH.json").write_text('{"status": "ok"}')
    if content is not None:
        for part in ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index"):
            (folder / f"ind.cora.{part}").write_bytes(content)
    with pytest.raises(DatasetDamaged, match="fetch@cora"):
        load_dataset("cora", tmp_path)


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"offline mirror not found at {MIRROR}")
def test_real_cora_with_garbage_appended_is_repaired_and_loads(tmp_path, monkeypatch, capsys):
    """The reported case on the real files and the real manifest: pickles ignore trailing bytes,
    so only the checksum catches this; after the repair Cora loads as before."""
    entries = [e for e in read_manifest() if e.dataset == "cora"]
    mirror = tmp_path / "mirror"
    for e in entries:
        (mirror / e.mirror_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(MIRROR / e.mirror_path, mirror / e.mirror_path)
    monkeypatch.setenv(fetch.MIRROR_ENV, str(mirror))
    args = ["cora", "--raw", str(tmp_path / "raw"), "--pins", str(tmp_path / "pins.tsv"),
            "--damaged", str(tmp_path / "damaged"), "--manifest", str(MANIFEST)]
    assert fetch_stage.main(args) == 0
    target = tmp_path / "raw" / "cora" / "ind.cora.x"
    with open(target, "ab") as fh:
        fh.write(GARBAGE)
    capsys.readouterr()

    assert fetch_stage.main(args) == 0
    [line] = stderr_lines(capsys)
    assert "ind.cora.x" in line and str(tmp_path / "damaged" / "cora" / "ind.cora.x.1") in line
    x = next(e for e in entries if e.file == "ind.cora.x")
    assert "sha256:" + file_digest(target, "sha256") == x.checksum
    assert load_dataset("cora", tmp_path / "raw").num_nodes == 2708
