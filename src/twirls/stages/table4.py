"""Stages of Table 4 (and our tables laid out like it on the clean graphs and on Pro-GNN's):
``table4@<dataset>-<graph>-<defense>``, one defense on one graph; ``table4-twirls-base@<dataset>``,
TWIRLS-base on every graph of ``table4.graphs`` in one pool of worker processes;
``table4-twirls@<dataset>``, TWIRLS with the global ``attention`` params on Table 4's own graph
(:data:`~twirls.config.entries.TABLE4_GRAPH`), and ``table4-twirls-extra@<dataset>``
(``--extras``), TWIRLS on the other graphs (the extra tables) with the attention pinned in
``table4.extra_attention``, so that ``dvc exp run -S attention.*`` reruns Table 4's cells only.

Each cell is composed from the ``table4`` group (:func:`twirls.config.entries.table4_entry`); the
graphs are :func:`twirls.stages.attacked.attacked_graph`'s. Writes ``results/<family>/<name>.json``
and ``metrics/<family>/<name>.json`` (TWIRLS: one summary per graph).
"""

from __future__ import annotations

import sys

from twirls.config.entries import (
    TABLE4_EXTRA,
    TABLE4_GRAPH,
    TWIRLS_ROWS,
    table4_entry,
    table4_graphs,
)
from twirls.stages.attacked import run_attacked, with_attention
from twirls.stages.skeleton import StageOutputs, attacked_parser, entry, open_stage


@entry
def main(argv: list[str] | None = None) -> int:
    parser = attacked_parser(__doc__)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--model", required=True, help="a defense, twirls-base or twirls")
    parser.add_argument("--graph", help="the graph of a defense's cell")
    parser.add_argument("--extras", action="store_true",
                        help=f"--model twirls on the graphs but {TABLE4_GRAPH!r} (extra tables)")
    args = parser.parse_args(argv)
    twirls = args.model in TWIRLS_ROWS
    if not twirls and not args.graph:
        parser.error(f"--model {args.model} needs --graph")
    if args.extras and args.model != "twirls":
        parser.error("--extras goes with --model twirls")
    family = (TABLE4_EXTRA if args.extras else f"table4-{args.model}") if twirls else "table4"
    name = args.dataset if twirls else f"{args.dataset}-{args.graph}-{args.model}"
    outputs = StageOutputs(family, name)
    stage = outputs.stage
    params = open_stage(stage)
    t4 = params["table4"]
    graphs = table4_graphs(t4["graphs"], args.model, args.extras) if twirls else [args.graph]
    entries = {(g if twirls else ""): table4_entry(t4, args.dataset, g, args.model)
               for g in graphs}
    attention = t4["extra_attention"] if args.extras else params.get("attention")
    if attention is not None:
        entries = {k: with_attention(e, attention) for k, e in entries.items()}
    batch = int(t4["batch"]) if twirls else 1  # the defenses train one fit a seed
    cells, metrics, rows = run_attacked(stage, entries, params, args.raw, args.attacked, batch)
    outputs.write(cells, metrics, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
