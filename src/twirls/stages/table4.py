"""Stages of Table 4 (and our tables laid out like it on the clean graphs and on Pro-GNN's):
``table4@<dataset>-<graph>-<defense>``, one defense on one graph; ``table4-twirls-base@<dataset>``
and ``table4-twirls@<dataset>``, TWIRLS on every graph of ``table4.graphs`` in one pool of worker
processes (``twirls`` with the global ``attention`` params).

Each cell is composed from the ``table4`` group (:func:`twirls.config.entries.table4_entry`); the
graphs are :func:`twirls.train.attacked.attacked_graph`'s. Writes ``results/<family>/<name>.json``
and ``metrics/<family>/<name>.json`` (TWIRLS: one summary per graph).
"""

from __future__ import annotations

import sys

from twirls.config.entries import TWIRLS_ROWS, table4_entry
from twirls.stages.skeleton import StageOutputs, attacked_parser, entry, open_stage
from twirls.train.attacked import run_attacked, with_attention


@entry
def main(argv: list[str] | None = None) -> int:
    parser = attacked_parser(__doc__)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--model", required=True, help="a defense, twirls-base or twirls")
    parser.add_argument("--graph", help="the graph of a defense's cell")
    args = parser.parse_args(argv)
    twirls = args.model in TWIRLS_ROWS
    if not twirls and not args.graph:
        parser.error(f"--model {args.model} needs --graph")
    family = f"table4-{args.model}" if twirls else "table4"
    name = args.dataset if twirls else f"{args.dataset}-{args.graph}-{args.model}"
    stage = f"{family}@{name}"
    params = open_stage(stage)
    t4 = params["table4"]
    graphs = t4["graphs"] if twirls else [args.graph]
    entries = {(g if twirls else ""): table4_entry(t4, args.dataset, g, args.model)
               for g in graphs}
    if "attention" in params:
        entries = {k: with_attention(e, params["attention"]) for k, e in entries.items()}
    batch = int(t4["batch"]) if twirls else 1  # the defenses train one fit a seed
    cells, metrics, rows = run_attacked(stage, entries, params, args.raw, args.attacked, batch)
    StageOutputs(family, name).write(cells, metrics, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
