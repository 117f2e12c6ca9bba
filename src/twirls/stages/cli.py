"""One line instead of a traceback: the wrapper of every stage's ``main``.

Kept apart from :mod:`twirls.stages.skeleton` (which imports the training code) so that the light
stages (``check-params``, ``fetch@``, ``attention-figures``) use it without depending on that code.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

#: what an interrupted stage prints (one line: what stopped, how to go on or go back)
INTERRUPTED = ("interrupted: {name}: stopped before it wrote its outputs; `dvc repro` runs it "
               "again (a training stage from the runs it finished), `git checkout -- dvc.lock "
               "results metrics plots reports && dvc checkout` brings the committed outputs back")

Main = Callable[[list[str] | None], int]


def stage_name(stage_main: Main) -> str:
    """The stage script's name (``train`` for ``twirls.stages.train``), also when it runs as
    ``python -m twirls.stages.<name>``, as ``dvc.yaml`` runs it."""
    module = stage_main.__module__
    if module == "__main__":
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        module = spec.name if spec is not None else module
    return module.rsplit(".", 1)[-1]


def entry(stage_main: Main, errors: tuple[type[BaseException], ...] = (ValueError,)) -> Main:
    """Wrap a stage's ``main``: a user-facing error (``errors``: a bad value, and in
    :func:`twirls.stages.skeleton.entry` a damaged dataset too) becomes one line on stderr and
    exit 1; Ctrl-C (``KeyboardInterrupt``) one line and exit 130."""
    name = stage_name(stage_main)

    def run(argv: list[str] | None = None) -> int:
        try:
            return stage_main(argv)
        except errors as exc:
            print(f"error: {name}: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print(f"\n{INTERRUPTED.format(name=name)}", file=sys.stderr)
            return 130

    run.__doc__ = stage_main.__doc__
    return run
