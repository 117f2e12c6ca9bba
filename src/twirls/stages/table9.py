"""Stage ``table9@<dataset>``: TWIRLS under attack with the attention's truncation T (Table 9),
every graph x T x variant of ``table9`` in one pool of worker processes, with the attention
pinned in its own group (:func:`twirls.config.entries.table9_entry`) so ``-S attention.*`` does not
rerun it. Writes ``results/table9/<dataset>.json`` and ``metrics/table9/<dataset>.json`` (one
summary per ``<graph>-T<truncation>[-<variant>]``).
"""

from __future__ import annotations

import sys

from twirls.config.entries import table9_entry
from twirls.stages.attacked import run_attacked, with_attention
from twirls.stages.skeleton import StageOutputs, attacked_parser, entry, open_stage


@entry
def main(argv: list[str] | None = None) -> int:
    parser = attacked_parser(__doc__)
    parser.add_argument("--dataset", required=True)
    args = parser.parse_args(argv)
    stage = f"table9@{args.dataset}"
    params = open_stage(stage)
    t9 = params["table9"]
    entries = {
        f"{g}-T{t}" + ("" if v == "paper" else f"-{v}"): with_attention(
            table9_entry(t9, params["table4"], args.dataset, g, t, v), t9["attention"])
        for v in t9["variants"] for g in t9["graphs"] for t in t9["truncations"]}
    cells, metrics, rows = run_attacked(stage, entries, params, args.raw, args.attacked,
                                        int(t9["batch"]))
    StageOutputs("table9", args.dataset).write(cells, metrics, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
