"""The stage graph (a tool, used by no stage).

    python -m twirls.dag                 # the graph by stage family, as Mermaid (docs/stages.md)
    python -m twirls.dag deps [--write]  # every stage's code deps against its import closure
    python -m twirls.dag cycles          # import cycles among the modules of src/twirls
    python -m twirls.dag sources [--write]  # docs/sources.md: each table's params, stages, script

``dvc dag`` draws every one of the ~120 stages (4,645 characters wide); collapsing each
``family@item`` to its family keeps the shape readable. ``python -m twirls.dag`` reads
``dvc dag --dot`` in the current repository and prints the Mermaid text.

``deps`` checks that each stage family's ``deps`` in ``dvc.yaml`` name exactly the code its
``cmd`` runs (:func:`closure`): a file missing there is a result that DVC would keep after the
code behind it changed; a directory naming files the stage never runs reruns it for nothing.
Exit status 1 with the list when either is found; ``--write`` rewrites those lines of
``dvc.yaml`` from the closures (:func:`minimal_deps`) instead.

``cycles`` lists each group of modules that import one another, directly or through others
(function-level imports count: they are how cycles hide); a package importing its own
submodules is not one. Exit status 1 when there is any.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

EDGE = re.compile(r'^"(?P<src>[^"]+)" -> "(?P<dst>[^"]+)";?$')
NODE = re.compile(r'^"(?P<name>[^"]+)";?$')


def family(stage: str) -> str:
    """``table4@nettack-cora-fast-gcn`` -> ``table4``."""
    return stage.split("@", 1)[0]


def collapse(dot: str) -> tuple[Counter[str], set[tuple[str, str]]]:
    """Stages per family and the edges between families in a ``dvc dag --dot`` text."""
    sizes: Counter[str] = Counter()
    edges: set[tuple[str, str]] = set()
    for line in map(str.strip, dot.splitlines()):
        if m := EDGE.match(line):
            a, b = family(m["src"]), family(m["dst"])
            if a != b:
                edges.add((a, b))
        elif m := NODE.match(line):
            sizes[family(m["name"])] += 1
    return sizes, edges


def mermaid(sizes: Counter[str], edges: set[tuple[str, str]]) -> str:
    """A ``flowchart LR``: one node per family (``name@ x N`` when it has N > 1 stages)."""
    ids = {name: f"s{i}" for i, name in enumerate(sizes)}
    lines = ["flowchart LR"]
    for name, count in sizes.items():
        label = f"{name}@ x {count}" if count > 1 else name
        lines.append(f'  {ids[name]}["{label}"]')
    lines += [f"  {ids[a]} --> {ids[b]}" for a, b in sorted(edges) if a in ids and b in ids]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- stage deps
# Every stage's `deps` must name the code it runs: the import closure, within src/twirls, of the
# module its `cmd` runs (`python -m twirls.x.y`), and the data files those modules read next to
# themselves (`Path(__file__).with_name("claims.yaml")`). A directory may stand for its files
# when the closure holds all of them; otherwise the files are named one by one.

SRC = Path(__file__).resolve().parents[1]  # src/
REPO = SRC.parent
PACKAGE = "twirls"
CMD_MODULE = re.compile(r"python -m (twirls(?:\.\w+)+)")
SKIP_PARTS = {"__pycache__"}


def module_file(name: str) -> Path | None:
    """``twirls.a.b`` -> ``src/twirls/a/b.py`` or ``src/twirls/a/b/__init__.py`` (absolute)."""
    base = SRC.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_files(package: str) -> set[str]:
    """Every module of ``package`` (a dynamic ``import_module(f"twirls.data.{name}")``)."""
    folder = SRC.joinpath(*package.split("."))
    return {module_name(p) for p in folder.glob("*.py")} if folder.is_dir() else set()


@cache
def imported_modules(path: Path) -> frozenset[str]:
    """The ``twirls`` modules that ``path`` imports anywhere (function bodies included), with
    the packages above them, whose ``__init__`` runs first."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = module_name(path)
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = here.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join(parts[:keep] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)  # submodules imported by name
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.JoinedStr) and node.args[0].values
              and isinstance(node.args[0].values[0], ast.Constant)):
            prefix = str(node.args[0].values[0].value).rstrip(".")
            found.update(_package_files(prefix))
    names = {n for n in found if n == PACKAGE or n.startswith(PACKAGE + ".")}
    with_parents = set()
    for name in names:
        parts = name.split(".")
        with_parents.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(n for n in with_parents if module_file(n) is not None)


@cache
def data_files(path: Path) -> frozenset[Path]:
    """Files beside ``path`` (not Python) whose names appear in it as string constants."""
    names = {n.value for n in ast.walk(ast.parse(path.read_text()))
             if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return frozenset(p for p in path.parent.iterdir()
                     if p.is_file() and p.suffix != ".py" and p.name in names)


@cache
def closure(module: str) -> frozenset[Path]:
    """Files (relative to the repository) that running ``python -m <module>`` executes or
    reads from the package: the module, everything it imports within ``twirls``, transitively,
    the packages' ``__init__`` files, and their data files."""
    start = module_file(module)
    if start is None:
        raise ValueError(f"no module {module} under {SRC}")
    todo = [module, *imported_modules(start)]
    seen: set[str] = set()
    files: set[Path] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = module_file(name)
        assert path is not None
        files.add(path)
        files.update(data_files(path))
        todo.extend(imported_modules(path) - seen)
    return frozenset(p.relative_to(REPO) for p in files)


def tracked_files(folder: Path) -> set[Path]:
    """The files DVC hashes for a dependency: the file, or a directory's files (``.dvcignore``:
    no caches)."""
    if (REPO / folder).is_file():
        return {Path(folder)}
    return {p.relative_to(REPO) for p in (REPO / folder).rglob("*")
            if p.is_file() and not SKIP_PARTS & set(p.parts) and p.suffix != ".pyc"}


def minimal_deps(files: frozenset[Path]) -> list[str]:
    """``files`` as few paths as possible: a directory wherever ``files`` hold all of it."""
    out: list[Path] = []

    def visit(folder: Path) -> None:
        inside = {f for f in files if folder in f.parents}
        if not inside:
            return
        if folder != Path("src", PACKAGE) and tracked_files(folder) <= files:
            out.append(folder)
            return
        out.extend(sorted(f for f in inside if f.parent == folder))
        for sub in sorted({f.relative_to(folder).parts[0] for f in inside
                           if f.parent != folder}):
            visit(folder / sub)

    visit(Path("src", PACKAGE))
    return sorted(str(p) for p in out)


@dataclass
class StageDeps:
    """One stage family of ``dvc.yaml``: the module its ``cmd`` runs and its code deps."""

    family: str
    module: str
    declared: list[str]
    needed: frozenset[Path]

    def covered(self, path: Path) -> bool:
        return any(path == Path(d) or Path(d) in path.parents for d in self.declared)

    @property
    def missing(self) -> list[str]:
        return sorted(str(p) for p in self.needed if not self.covered(p))

    @property
    def broad(self) -> list[str]:
        """Declared code paths holding files that the stage never runs."""
        return sorted(d for d in self.declared
                      if not tracked_files(Path(d)) <= self.needed)


def stage_deps(dvc_yaml: Path = REPO / "dvc.yaml") -> list[StageDeps]:
    """The code deps of every stage family of ``dvc_yaml`` that runs a ``twirls`` module."""
    import yaml

    stages = yaml.safe_load(dvc_yaml.read_text())["stages"]
    found = []
    for family_name, stage in stages.items():
        body = stage.get("do", stage)
        match = CMD_MODULE.search(" ".join(str(body.get("cmd", "")).split()))
        if not match:
            continue
        declared = [d for d in body.get("deps", []) if isinstance(d, str)
                    and d.startswith(f"src/{PACKAGE}")]
        found.append(StageDeps(family_name, match[1], declared, closure(match[1])))
    return found


def write_deps(dvc_yaml: Path = REPO / "dvc.yaml") -> list[str]:
    """Rewrite each family's ``src/twirls`` deps in ``dvc_yaml`` as :func:`minimal_deps` of its
    closure, in place of the lines that named code before (other lines kept byte for byte).
    Returns the families changed."""
    lines = dvc_yaml.read_text().splitlines(keepends=True)
    wanted = {s.family: minimal_deps(s.needed) for s in stage_deps(dvc_yaml)}
    changed, out, family_name, i = [], [], None, 0
    done: set[str] = set()
    top = re.compile(r"^  ([\w-]+):\s*$")
    while i < len(lines):
        line = lines[i]
        if m := top.match(line):
            family_name = m[1]
        code = re.match(r"^(\s*)- src/" + PACKAGE + r"\b", line)
        if code and family_name in done:  # a second run of code lines: already written
            changed.append(family_name)
            i += 1
            continue
        if code and family_name in wanted:
            indent, old = code[1], []
            while i < len(lines) and re.match(r"^\s*- src/" + PACKAGE + r"\b", lines[i]):
                old.append(lines[i].split("- ", 1)[1].strip())
                i += 1
            new = wanted.pop(family_name)
            done.add(family_name)
            out.extend(f"{indent}- {d}\n" for d in new)
            if old != new:
                changed.append(family_name)
            continue
        out.append(line)
        i += 1
    changed = sorted(set(changed))
    if changed:
        from twirls.files import write_text

        write_text(dvc_yaml, "".join(out))
    return changed


def check_deps(write: bool) -> int:
    if write:
        changed = write_deps()
        print(f"dvc.yaml: code deps rewritten for {', '.join(changed)}" if changed
              else "dvc.yaml: every stage's code deps already match its imports")
        return 0
    problems = [f"{s.family} (python -m {s.module}): "
                + "; ".join(part for part in (
                    s.missing and "missing " + ", ".join(s.missing),
                    s.broad and "needlessly broad " + ", ".join(s.broad)) if part)
                for s in stage_deps() if s.missing or s.broad]
    for line in problems:
        print(line)
    if problems:
        print("fix: python -m twirls.dag deps --write")
    return 1 if problems else 0


def check_sources(write: bool, dvc_yaml: Path = REPO / "dvc.yaml",
                  out: Path = REPO / "docs" / "sources.md") -> int:
    """``docs/sources.md`` against what ``dvc.yaml`` gives (:mod:`twirls.reports.sources`):
    rewritten with ``write``, else exit status 1 when it differs."""
    from twirls.files import write_text
    from twirls.reports.figures_index import FIGURES
    from twirls.reports.render import TABLES
    from twirls.reports.sources import sources_lines

    text = "\n".join(sources_lines(dvc_yaml, TABLES, FIGURES))
    if write:
        write_text(out, text)
        return 0
    if not out.is_file() or out.read_text() != text:
        print(f"{out.relative_to(REPO)} is not what dvc.yaml gives; "
              "fix: python -m twirls.dag sources --write")
        return 1
    return 0


def import_cycles() -> list[list[str]]:
    """Each set of ``twirls`` modules that reach one another through their imports (sorted,
    two modules or more); a module's import of its own packages is left out."""
    modules = sorted(module_name(p) for p in (SRC / PACKAGE).rglob("*.py"))
    imports = {m: {n for n in imported_modules(module_file(m))
                   if n != m and not m.startswith(n + ".")} for m in modules}
    reach: dict[str, set[str]] = {}
    for start in modules:
        seen, todo = set(), list(imports[start])
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(imports[name])
        reach[start] = seen
    groups = {frozenset({m} | {n for n in reach[m] if m in reach[n]})
              for m in modules if m in reach[m]}
    return sorted(sorted(g) for g in groups)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["deps"]:
        return check_deps(write="--write" in args[1:])
    if args[:1] == ["sources"]:
        return check_sources(write="--write" in args[1:])
    if args[:1] == ["cycles"]:
        cycles = import_cycles()
        for group in cycles:
            print("import cycle: " + " <-> ".join(group))
        return 1 if cycles else 0
    try:
        dot = subprocess.run(["dvc", "dag", "--dot"], capture_output=True, text=True, check=True)
    except FileNotFoundError:
        print("error: dag: no `dvc` on PATH; run it in the project's environment "
              "(`source .venv/bin/activate`, after `make test` or `make repro` made .venv)",
              file=sys.stderr)
        return 1
    sys.stdout.write(mermaid(*collapse(dot.stdout)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
