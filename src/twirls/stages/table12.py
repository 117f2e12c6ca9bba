"""Stage ``table12``: Chinese word segmentation on PKU (paper appendix, Table 12).

Every model of the ``table12`` params group (MLP, GCN, GCN-8, TWIRLS-base, bi-LSTM), every seed,
on sentences as chain graphs of their characters (a mini-batch of sentences = one block-diagonal
graph), scored by macro F1 over B/M/E/S (:mod:`twirls.cws`).

With ``data/raw/pku/pku_training.utf8`` and fastNLP's ``cn-char-fastnlp-100d`` vectors in
``data/raw/pku/cn_char_fastnlp_100d/`` (both fetched by ``fetch@pku`` where the internet is
reachable) it runs the paper's protocol. Without them it runs a labelled stand-in on the PKU test
gold alone (first 80% of its sentences train, the rest test, learned embeddings): its cells are
``status="stand-in"`` with a note saying what differs. Without even the test gold the cells are
``no-data``; damaged files fail the stage.

Writes ``results/table12.json`` (report cells: table ``table12``, dataset ``pku``, metric
``macro_f1``) and ``metrics/table12.json``.
"""

from __future__ import annotations

import sys

from twirls.cws.experiment import no_data_cells, run_table12
from twirls.cws.models import check_models
from twirls.data.registry import DatasetUnavailable
from twirls.stages.skeleton import StageOutputs, entry, open_stage, raw_out_parser
from twirls.train.device import stage_device
from twirls.train.parallel import resolve_jobs

STAGE = "table12"


@entry
def main(argv: list[str] | None = None) -> int:
    parser = raw_out_parser(__doc__)
    args = parser.parse_args(argv)
    params = open_stage(STAGE)
    group = params[STAGE]
    check_models(f"{STAGE}.models", group["models"])  # the rest: open_stage
    device = stage_device(params["device"], who=STAGE)
    out = StageOutputs(STAGE, root=args.out)
    try:
        cells, metrics, rows = run_table12(group, args.raw / "pku", device,
                                           jobs=resolve_jobs(params["jobs"], device))
    except DatasetUnavailable as exc:
        cells, metrics, rows = (no_data_cells(group, str(exc)),
                                {"status": "no-data", "reason": str(exc)}, [])
    out.write(cells, metrics, rows)
    for cell in cells:
        shown = "no data" if cell.mean is None else f"{cell.mean:.2f} ± {cell.std:.2f}"
        print(f"{STAGE}: {cell.model}: macro F1 {shown} ({cell.status or metrics['protocol']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
