"""Stage ``check-params``: every value of ``params.yaml`` and ``params/*.yaml`` against the
schema, first.

Every other stage waits for it (the fetch stages depend on its output), so a mistake such as
``dvc exp run -S attention.p=abc`` ends in one line naming the key, the value and what is allowed,
before any data is fetched or model trained, and saying how to undo it. Writes
``results/params-check.json``, which ``dvc.yaml`` marks ``persist`` so that DVC does not delete
the committed file before a check that then fails: after a rejected value the workspace differs
from the commit only by that value.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from twirls.config.schema import ConfigError, check_params
from twirls.cws.models import check_models
from twirls.params import read_all
from twirls.stages.cli import entry
from twirls.train.outputs import write_json_without_nan

#: how to get back the committed params after a rejected value (``-S`` or an edit)
UNDO = "git checkout -- params.yaml params"


@entry
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", type=Path, default=None,
                        help="one params file to check (default: params.yaml + params/*.yaml)")
    parser.add_argument("--out", type=Path, default=Path("results/params-check.json"))
    args = parser.parse_args(argv)
    try:
        params = read_all() if args.params is None else yaml.safe_load(args.params.read_text())
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"error: cannot read {args.params or 'the params'}: {exc}", file=sys.stderr)
        return 1
    try:
        check_params(params or {})
        if params and "table12" in params:  # its models: a trial build of each
            check_models("table12.models", params["table12"]["models"])
    except ConfigError as exc:
        print(f"error: {exc} (fix the value, or undo the change: {UNDO})", file=sys.stderr)
        return 1
    write_json_without_nan(args.out, {"params": str(args.params or "params.yaml + params/*.yaml"),
                                      "status": "ok"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
