"""The README stays short and its links hold: at most 200 lines, no commit hash, every relative
Markdown link of README.md, docs/*.md and the generated reports/benchmarks/README.md resolves,
the Python versions the README names are the ones the Makefile accepts, and the counts and
margins its findings quote are the committed results'."""

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


def test_the_readmes_numbers_are_the_committed_ones():
    """The README's findings quote counts and margins: each must be what the committed
    reports/results.csv and params.yaml say (they go stale when seeds or results change)."""
    import pandas as pd
    import yaml

    from twirls.reports.results import status_of

    text = " ".join(README.read_text().split())
    cells = pd.read_csv(REPO / "reports" / "results.csv")

    def cell(table: str, dataset: str, model: str) -> pd.Series:
        return cells[(cells.table == table) & (cells.dataset == dataset)
                     & (cells.model == model)].iloc[0]

    t9 = int(re.search(r"Table 9 runs both variants at (\d+) seeds per cell", text).group(1))
    assert set(cells[cells.table.isin(["table9", "table9-paper"])].runs) == {t9}
    m = re.search(r"at its (\d+) seeds they miss the Citeseer TWIRLS cell by ([\d.]+) points, "
                  r"but at (\d+) seeds", text)
    table4, miss, wide = int(m.group(1)), float(m.group(2)), int(m.group(3))
    c = cell("table4", "nettack-citeseer", "TWIRLS")
    tolerance = max(1.0, 2 * c.paper_std)
    assert c.runs == table4 and c.status == "differs"
    assert round(abs(c.delta) - tolerance, 2) == miss
    for dataset in ("nettack-cora", "nettack-citeseer"):
        v = cell("variants", dataset, "TWIRLS (attacked) · paper eqs")
        paper = cell("table4", dataset, "TWIRLS")
        assert v.runs == wide
        assert status_of("accuracy", v["mean"] - paper.paper_mean, paper.paper_std) == "reproduced"
    budget = float(re.search(r"`budget_hours` \((\d+) by default\)", text).group(1))
    assert yaml.safe_load((REPO / "params.yaml").read_text())["budget_hours"] == budget
