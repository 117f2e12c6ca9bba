"""Stage ``variants-attacked@<name>``: one TWIRLS entry on an attacked graph in both variants
(our table ``variants``). Each entry names its dataset and graph and reuses
``table4.twirls.<dataset>`` (:func:`twirls.config.entries.attacked_twirls_entry`) with the
attention it pins (none: TWIRLS-base). Writes ``results/variants-attacked/<name>.json`` and
``metrics/variants-attacked/<name>.json``.
"""

from __future__ import annotations

import sys

from twirls.config.entries import attacked_twirls_entry
from twirls.stages.attacked import run_attacked, with_attention
from twirls.stages.skeleton import StageOutputs, attacked_parser, entry, open_stage

FAMILY = "variants-attacked"


@entry
def main(argv: list[str] | None = None) -> int:
    parser = attacked_parser(__doc__)
    parser.add_argument("--entry", required=True)
    args = parser.parse_args(argv)
    stage = f"{FAMILY}@{args.entry}"
    params = open_stage(stage)
    exp = attacked_twirls_entry(params[FAMILY][args.entry], params["table4"])
    if "attention" in exp:
        exp = with_attention(exp, params.get("attention") or {})
    cells, metrics, rows = run_attacked(stage, {"": exp}, params, args.raw, args.attacked,
                                        int(params["table4"]["batch"]))
    StageOutputs(FAMILY, args.entry).write(cells, metrics, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
