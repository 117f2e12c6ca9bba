"""The README stays short and its links hold: at most 200 lines, no commit hash, every relative
Markdown link of README.md, docs/*.md and the generated reports/benchmarks/README.md resolves,
and the Python versions the README names are the ones the Makefile accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MAX_README_LINES = 200
#: ``[text](target)``; the target up to a space (an optional title follows) or ``)``
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
HASH = re.compile(r"(?<![0-9A-Za-z_])[0-9a-f]{7,40}(?![0-9A-Za-z_])")


def documents() -> list[Path]:
    return [README, *sorted((REPO / "docs").glob("*.md")),
            REPO / "reports" / "benchmarks" / "README.md"]


def links(text: str) -> list[str]:
    """The link targets of ``text`` outside fenced code blocks."""
    return LINK.findall(FENCE.sub("", text))


def local_target(target: str) -> str | None:
    """The path part of a relative link; ``None`` for URLs, mail and in-page anchors."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
        return None
    return target.split("#", 1)[0].split("?", 1)[0] or None


def test_link_parser():
    text = ("[a](docs/x.md) [b](https://example.org/y) [c](#anchor) [d](y.md#part) "
            "[`e`](../z/) [f](mailto:a@b.c)\n```\n[g](not/a/link.md)\n```\n")
    assert [local_target(t) for t in links(text)] == ["docs/x.md", None, None, "y.md",
                                                      "../z/", None]


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines (at most {MAX_README_LINES}): move reference "
        "material to docs/")


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc):
    assert doc.is_file(), f"{doc.relative_to(REPO)} is missing"
    broken = [t for t in links(doc.read_text())
              if (path := local_target(t)) and not (doc.parent / path).exists()]
    assert not broken, f"{doc.relative_to(REPO)}: links to nothing: {broken}"


def test_docs_are_linked_from_the_readme():
    targets = {(REPO / p).resolve() for t in links(README.read_text())
               if (p := local_target(t))}
    unlinked = [d.name for d in documents()[1:] if d.resolve() not in targets]
    assert not unlinked, f"README.md's 'Read more' does not link {unlinked}"


def test_readme_quotes_no_commit_hash():
    found = [h for h in HASH.findall(README.read_text())  # a digit and a letter: not a word
             if re.search(r"\d", h) and re.search(r"[a-f]", h)]
    assert not found, f"README.md quotes commit hashes {found}: keep them out of the README"


def test_readme_pythons_are_the_makefiles():
    makefile = (REPO / "Makefile").read_text()
    pinned = re.search(r"^PINNED_PYTHON := (.+)$", makefile, re.M).group(1).split()
    text = " ".join(README.read_text().split())
    listed = re.search(r"Python ((?:3\.\d+, )*3\.\d+ or 3\.\d+) on Linux", text).group(1)
    assert re.split(r", | or ", listed) == pinned
    assert f"PYTHON=python{pinned[-1]}" in text  # the fix `make` itself suggests
