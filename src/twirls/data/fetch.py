"""Fetch raw dataset files: mirror folder first, then the canonical URL; always checksummed.

Every file is listed once in ``manifest.tsv`` (beside this module) with its canonical URL and
expected checksum. A file is written as ``<dest>.part`` and renamed only after its checksum
matched, so an interrupted or failed fetch never leaves a partial file behind.

A file already present that fails its checksum is repaired: a verified copy is fetched (mirror,
then URL), the bad copy is set aside as ``data/damaged/<dataset>/<file>.<n>`` and one line on
stderr says so. If no verified copy can be had the bad file stays in place and
:class:`DamagedError` is raised, so the fetch stage fails loudly instead of reporting the dataset
as merely missing.

Set ``TWIRLS_DATA_MIRROR`` to a folder laid out like the manifest's ``mirror_path`` column (CI
uses ``../shared/datasets``) to fetch without internet.
"""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from twirls.files import replacing, write_text

MANIFEST = Path(__file__).with_name("manifest.tsv")
MIRROR_ENV = "TWIRLS_DATA_MIRROR"
CHUNK = 1 << 20


class FetchError(RuntimeError):
    """A file could not be fetched; the message says what, where, and how to fix it."""


class ChecksumError(FetchError):
    """The bytes obtained do not match the manifest's checksum."""


class DamagedError(ChecksumError):
    """A file already present fails its checksum and no verified copy could replace it."""


class UnreachableError(FetchError):
    """Neither the mirror nor the URL could provide the file."""


@dataclass(frozen=True)
class Entry:
    """One manifest row: a raw file of a dataset."""

    dataset: str
    file: str
    checksum: str
    url: str
    mirror_path: str
    extract: str = ""


def read_manifest(path: Path = MANIFEST) -> list[Entry]:
    """Parse ``manifest.tsv`` (``#`` lines are comments)."""
    with open(path, newline="") as fh:
        lines = [line for line in fh if not line.startswith("#")]
    return [Entry(**row) for row in csv.DictReader(lines, delimiter="\t")]


def entries_for(dataset: str, manifest: Iterable[Entry] | None = None) -> list[Entry]:
    entries = [e for e in (manifest or read_manifest()) if e.dataset == dataset]
    if not entries:
        raise FetchError(f"dataset {dataset!r} has no files in {MANIFEST}")
    return entries


def file_digest(path: Path, kind: str) -> str:
    """Hex digest of a file: ``sha256`` or ``gitsha1`` (the git blob id, as ``git hash-object``)."""
    if kind == "sha256":
        h = hashlib.sha256()
    elif kind == "gitsha1":
        h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    else:
        raise FetchError(f"unknown checksum kind {kind!r} (use sha256: or gitsha1:)")
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def mismatch(path: Path, checksum: str) -> str | None:
    """The hex digest of ``path`` if it is not ``checksum`` (``kind:hex``), else None."""
    kind, _, expected = checksum.partition(":")
    actual = file_digest(path, kind)
    return None if actual == expected else actual


def verify(path: Path, checksum: str, shown_as: str) -> None:
    """Raise :class:`ChecksumError` unless ``path`` matches ``kind:hex``."""
    actual = mismatch(path, checksum)
    if actual is not None:
        kind, _, expected = checksum.partition(":")
        raise ChecksumError(
            f"checksum mismatch for {shown_as}: expected {kind} {expected}, got {actual} "
            f"({path.stat().st_size} bytes: a truncated or different file). Replace that copy "
            f"with a good one (or fix the checksum in {MANIFEST.name} if the file changed on "
            "purpose), then run the fetch again."
        )


def damaged_folder(folder: Path) -> Path:
    """Where bad copies of ``data/raw/<dataset>/`` files go: ``data/damaged/<dataset>/``."""
    return folder.parent.parent / "damaged" / folder.name


def set_aside(path: Path, damaged: Path) -> Path:
    """Move ``path`` to ``damaged/<name>.<n>`` (first unused ``n >= 1``); return the new path.

    ``damaged`` gets a ``.gitignore`` of ``*`` so set-aside copies never reach git.
    """
    damaged.mkdir(parents=True, exist_ok=True)
    ignore = damaged / ".gitignore"
    if not ignore.exists():
        write_text(ignore, "# bad copies set aside by the fetch stage; never commit\n*\n")
    n = 1
    while (target := damaged / f"{path.name}.{n}").exists():
        n += 1
    shutil.move(path, target)
    return target


def read_pins(pins: Path) -> dict[str, str]:
    if not pins.exists():
        return {}
    rows = csv.reader(pins.read_text().splitlines(), delimiter="\t")
    return {row[0]: row[1] for row in rows if len(row) == 2 and not row[0].startswith("#")}


def write_pin(pins: Path, url: str, checksum: str) -> None:
    known = read_pins(pins)
    known[url] = checksum
    pins.parent.mkdir(parents=True, exist_ok=True)
    body = "# sha256 of files whose manifest checksum was unknown, pinned on first download\n"
    body += "".join(f"{u}\t{c}\n" for u, c in sorted(known.items()))
    write_text(pins, body)


def _download(url: str, dest: Path, timeout: float) -> None:
    """Stream ``url`` into ``dest`` with a progress bar; raise on short reads."""
    request = urllib.request.Request(url, headers={"User-Agent": "twirls-repro/0.1"})
    with urllib.request.urlopen(request, timeout=timeout) as response, open(dest, "wb") as out:
        total = int(response.headers.get("Content-Length") or 0)
        done = 0
        small = 0 < total < 4 * CHUNK  # no bar for files that arrive in a blink
        with tqdm(total=total or None, unit="B", unit_scale=True, desc=url, disable=small) as bar:
            while chunk := response.read(CHUNK):
                out.write(chunk)
                done += len(chunk)
                bar.update(len(chunk))
    if total and done != total:
        raise UnreachableError(f"download of {url} stopped after {done} of {total} bytes")


def fetch_file(entry: Entry, folder: Path, mirror: Path | None, pins: Path,
               timeout: float = 60.0, damaged: Path | None = None) -> str:
    """Make ``folder/entry.file`` present and verified; return where it came from.

    Order: an already present verified file, the mirror, then the URL. A fetched copy that fails
    its checksum is a :class:`ChecksumError` at once (never silently replaced by the next source).
    A present file that fails its checksum is repaired (see :func:`repair`); its bad copy goes to
    ``damaged`` (default :func:`damaged_folder` of ``folder``).
    """
    dest = folder / entry.file
    checksum = entry.checksum or read_pins(pins).get(entry.url, "")
    if dest.exists():
        if not checksum:
            return "present (unpinned)"
        actual = mismatch(dest, checksum)
        if actual is None:
            return "present"
        return repair(entry, dest, checksum, actual, mirror, timeout,
                      damaged or damaged_folder(folder))
    with replacing(dest) as part:
        source = _obtain(entry, part, mirror, timeout)
        if checksum:
            verify(part, checksum, f"{entry.file} from {source}")
        else:
            write_pin(pins, entry.url, "sha256:" + file_digest(part, "sha256"))
    return source


def repair(entry: Entry, dest: Path, checksum: str, actual: str, mirror: Path | None,
           timeout: float, damaged: Path) -> str:
    """Replace the bad ``dest`` by a verified copy, setting the bad one aside; return the source.

    The good copy is fetched and verified first, so if none can be had the bad file stays where
    it is and :class:`DamagedError` (one line: what, where, how to fix) is raised; every later
    fetch then fails the same way until the file is fixed. On success one line on stderr says
    what happened.
    """
    kind, _, expected = checksum.partition(":")
    what = f"{dest} fails its checksum (expected {kind} {expected}, got {actual})"
    with replacing(dest) as part:
        try:
            source = _obtain(entry, part, mirror, timeout)
            verify(part, checksum, f"{entry.file} from {source}")
        except FetchError as exc:
            raise DamagedError(f"{what} and no good copy could be had, so it stays in place: "
                               f"{exc}") from None
        aside = set_aside(dest, damaged)
    print(f"fetch: {what}; moved the bad copy to {aside} and fetched a good one from {source}",
          file=sys.stderr, flush=True)
    return source


def _obtain(entry: Entry, part: Path, mirror: Path | None, timeout: float) -> str:
    if mirror is not None:
        candidate = mirror / entry.mirror_path
        if candidate.is_file():
            shutil.copyfile(candidate, part)
            return str(candidate)
    try:
        _download(entry.url, part, timeout)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UnreachableError(
            f"cannot download {entry.url} ({reason}). Download it by hand and put it at "
            f"{part.with_suffix('')}, or in a mirror folder as {entry.mirror_path} with "
            f"${MIRROR_ENV} pointing at that folder; then run the fetch again."
        ) from None
    return entry.url


def extract(entry: Entry, folder: Path) -> None:
    """Unpack ``zip:<top>=<target>``: the archive's ``<top>/`` becomes ``folder/<target>``."""
    kind, _, spec = entry.extract.partition(":")
    if kind != "zip":
        raise FetchError(f"unknown extract kind {entry.extract!r} in {MANIFEST}")
    top, _, target = spec.partition("=")
    final = folder / target
    if final.exists():
        return
    with tempfile.TemporaryDirectory(dir=folder) as tmp, zipfile.ZipFile(folder / entry.file) as zf:
        zf.extractall(tmp)
        root = Path(tmp) / top if top else Path(tmp)
        if not root.is_dir():
            raise FetchError(f"{entry.file} has no folder {top!r} at its top")
        os.replace(root, final)


def default_mirror() -> Path | None:
    value = os.environ.get(MIRROR_ENV, "").strip()
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        raise FetchError(f"${MIRROR_ENV} is set to {value!r}, which is not a folder. "
                         f"Point it at the mirror folder or unset it to download.")
    return path


def fetch_dataset(dataset: str, folder: Path, mirror: Path | None, pins: Path,
                  manifest: Iterable[Entry] | None = None,
                  damaged: Path | None = None) -> dict[str, str]:
    """Fetch (and unpack) every file of ``dataset`` into ``folder``; return file -> source.

    Bad copies of present files are repaired, set aside in ``damaged`` (default
    :func:`damaged_folder` of ``folder``). Every file is tried even after a failure, so one run
    names everything that is wrong; the failures are then raised together by :func:`combined`.
    """
    sources, errors = {}, []
    for entry in entries_for(dataset, manifest):
        try:
            sources[entry.file] = fetch_file(entry, folder, mirror, pins, damaged=damaged)
            if entry.extract:
                extract(entry, folder)
        except FetchError as exc:
            errors.append(exc)
    if errors:
        raise combined(errors)
    return sources


def combined(errors: list[FetchError]) -> FetchError:
    """One error for several, in one line: a :class:`ChecksumError` if any file is bad, an
    :class:`UnreachableError` if every file simply could not be had, else a :class:`FetchError`."""
    if any(isinstance(e, ChecksumError) for e in errors):
        kind: type[FetchError] = ChecksumError
    elif all(isinstance(e, UnreachableError) for e in errors):
        kind = UnreachableError
    else:
        kind = FetchError
    return kind(" | ".join(str(e) for e in errors))
