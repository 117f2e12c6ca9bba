"""Fetching raw files: mirror first, then URL; checksums; clear errors; never a partial file."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import subprocess
import threading
import zipfile
from pathlib import Path

import pytest

from twirls.data import fetch
from twirls.data.fetch import (
    ChecksumError,
    Entry,
    FetchError,
    UnreachableError,
    fetch_dataset,
    fetch_file,
    file_digest,
    read_manifest,
)
from twirls.stages import fetch as fetch_stage

PAYLOAD = b"ind.toy bytes\n" * 1000


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def entry(url: str = "http://127.0.0.1:9/none", checksum: str | None = None, **kw) -> Entry:
    fields = dict(dataset="toy", file="toy.bin", url=url, mirror_path="owner__repo/toy.bin",
                  extract="")
    fields.update(kw)
    return Entry(checksum=sha(PAYLOAD) if checksum is None else checksum, **fields)


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    root = tmp_path / "mirror"
    (root / "owner__repo").mkdir(parents=True)
    (root / "owner__repo" / "toy.bin").write_bytes(PAYLOAD)
    return root


@pytest.fixture
def server(tmp_path: Path):
    """A local HTTP server; ``/short`` promises more bytes than it sends."""
    served = tmp_path / "www"
    served.mkdir()
    (served / "toy.bin").write_bytes(PAYLOAD)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(served), **k)

        def do_GET(self):  # noqa: N802
            if self.path == "/short":
                self.send_response(200)
                self.send_header("Content-Length", str(len(PAYLOAD)))
                self.end_headers()
                self.wfile.write(PAYLOAD[:100])
                return
            super().do_GET()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def no_leftovers(folder: Path) -> bool:
    return not list(folder.glob("*.part"))


def test_mirror_hit_copies_and_verifies(tmp_path, mirror):
    out = tmp_path / "raw"
    source = fetch_file(entry(), out, mirror, tmp_path / "pins.tsv")
    assert source == str(mirror / "owner__repo" / "toy.bin")
    assert (out / "toy.bin").read_bytes() == PAYLOAD
    # a second call finds the verified file and does not copy again
    assert fetch_file(entry(), out, mirror, tmp_path / "pins.tsv") == "present"


def test_checksum_mismatch_is_a_hard_error_naming_both_hashes(tmp_path, mirror):
    wrong = "sha256:" + "0" * 64
    with pytest.raises(ChecksumError) as err:
        fetch_file(entry(checksum=wrong), tmp_path / "raw", mirror, tmp_path / "pins.tsv")
    message = str(err.value)
    assert "toy.bin" in message and "0" * 64 in message and sha(PAYLOAD)[7:] in message
    assert not (tmp_path / "raw" / "toy.bin").exists() and no_leftovers(tmp_path / "raw")


def test_truncated_mirror_file_is_rejected(tmp_path, mirror):
    (mirror / "owner__repo" / "toy.bin").write_bytes(PAYLOAD[:-10])
    with pytest.raises(ChecksumError, match="truncated"):
        fetch_file(entry(), tmp_path / "raw", mirror, tmp_path / "pins.tsv")
    assert not (tmp_path / "raw" / "toy.bin").exists() and no_leftovers(tmp_path / "raw")


def test_truncated_download_is_rejected(tmp_path, server):
    with pytest.raises(FetchError, match="stopped after 100 of"):
        fetch_file(entry(url=f"{server}/short"), tmp_path / "raw", None, tmp_path / "pins.tsv")
    assert not (tmp_path / "raw" / "toy.bin").exists() and no_leftovers(tmp_path / "raw")


def test_download_from_url_when_mirror_lacks_file(tmp_path, server):
    empty_mirror = tmp_path / "empty"
    empty_mirror.mkdir()
    got = fetch_file(entry(url=f"{server}/toy.bin"), tmp_path / "raw", empty_mirror,
                     tmp_path / "pins.tsv")
    assert got == f"{server}/toy.bin"
    assert (tmp_path / "raw" / "toy.bin").read_bytes() == PAYLOAD


def test_unknown_checksum_is_pinned_on_first_download_then_enforced(tmp_path, server):
    pins = tmp_path / "pins.tsv"
    e = entry(url=f"{server}/toy.bin", checksum="")
    fetch_file(e, tmp_path / "raw", None, pins)
    assert fetch.read_pins(pins) == {e.url: sha(PAYLOAD)}
    # the pinned hash now protects the file: a tampered copy is set aside and fetched again
    (tmp_path / "raw" / "toy.bin").write_bytes(b"tampered")
    damaged = tmp_path / "damaged"
    assert fetch_file(e, tmp_path / "raw", None, pins, damaged=damaged) == e.url
    assert (tmp_path / "raw" / "toy.bin").read_bytes() == PAYLOAD
    assert (damaged / "toy.bin.1").read_bytes() == b"tampered"


def test_unreachable_url_names_url_and_where_to_put_the_file(tmp_path):
    url = (tmp_path / "nowhere" / "toy.bin").as_uri()
    with pytest.raises(UnreachableError) as err:
        fetch_file(entry(url=url), tmp_path / "raw", None, tmp_path / "pins.tsv")
    message = str(err.value)
    assert url in message
    assert str(tmp_path / "raw" / "toy.bin") in message and "owner__repo/toy.bin" in message
    assert no_leftovers(tmp_path / "raw")


def test_mirror_env_pointing_nowhere_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv(fetch.MIRROR_ENV, str(tmp_path / "missing"))
    with pytest.raises(FetchError, match="not a folder"):
        fetch.default_mirror()
    monkeypatch.setenv(fetch.MIRROR_ENV, "")
    assert fetch.default_mirror() is None


def test_gitsha1_equals_git_hash_object(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(PAYLOAD)
    expected = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True,
                              check=True).stdout.strip()
    assert file_digest(path, "gitsha1") == expected


def test_zip_is_extracted_under_its_new_name(tmp_path):
    archive = tmp_path / "mirror" / "ogb" / "arxiv.zip"
    archive.parent.mkdir(parents=True)
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("arxiv/raw/num-node-list.csv.gz", b"x")
        zf.writestr("arxiv/RELEASE_v1.txt", b"v1")
    e = Entry("toy", "arxiv.zip", sha(archive.read_bytes()), "http://127.0.0.1:9/a.zip",
              "ogb/arxiv.zip", "zip:arxiv=ogbn_arxiv")
    fetch_dataset("toy", tmp_path / "raw", tmp_path / "mirror", tmp_path / "pins.tsv", [e])
    assert (tmp_path / "raw" / "ogbn_arxiv" / "raw" / "num-node-list.csv.gz").exists()
    assert (tmp_path / "raw" / "ogbn_arxiv" / "RELEASE_v1.txt").read_text() == "v1"


def test_every_file_is_tried_and_all_failures_named(tmp_path, mirror):
    good = entry()
    bad = entry(file="gone.bin", mirror_path="owner__repo/gone.bin",
                url=(tmp_path / "gone.bin").as_uri())
    with pytest.raises(FetchError, match="gone.bin"):
        fetch_dataset("toy", tmp_path / "raw", mirror, tmp_path / "pins.tsv", [bad, good])
    assert (tmp_path / "raw" / "toy.bin").exists()


def test_stage_records_missing_dataset_and_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(fetch.MIRROR_ENV, str(tmp_path))  # an empty mirror, and no network
    monkeypatch.setattr(fetch, "_download", _refuse)
    args = ["pku", "--raw", str(tmp_path / "raw"), "--pins", str(tmp_path / "pins.tsv")]
    assert fetch_stage.main(args) == 0
    status = json.loads((tmp_path / "raw" / "pku" / "FETCH.json").read_text())
    assert status["status"] == "missing" and "pku_training.utf8" in status["reason"]
    assert "cannot download" in capsys.readouterr().err
    assert fetch_stage.main([*args, "--strict"]) == 1


def _refuse(url: str, dest: Path, timeout: float) -> None:
    raise OSError("network disabled in this test")


def test_generated_dataset_needs_no_fetch(tmp_path):
    assert fetch_stage.main(["chains", "--raw", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "chains" / "FETCH.json").read_text())["status"] == "ok"


MIRROR = Path(os.environ.get(fetch.MIRROR_ENV) or Path(__file__).parents[1] / "../shared/datasets")


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"offline mirror not found at {MIRROR}")
def test_manifest_checksums_match_the_mirror():
    """Every manifest file the mirror holds has exactly the manifest's checksum."""
    checked = 0
    for e in read_manifest():
        path = MIRROR / e.mirror_path
        if path.is_file() and e.checksum:
            kind, _, expected = e.checksum.partition(":")
            assert file_digest(path, kind) == expected, e.mirror_path
            checked += 1
    assert checked >= 70
