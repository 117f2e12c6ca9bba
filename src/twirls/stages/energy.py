"""Stage ``energy``: energy per propagation step on real data (an extra figure, beyond the paper).

TWIRLS' propagation is derived as descent on an energy; this stage measures that it is, for the
``f = f(X; W)`` of a trained TWIRLS-base: eq. 1 without attention (against its closed-form
minimum, eq. 2), eq. 12 with IRLS attention before every step (Lemma 3.3) and with one attention
layer after ``S/2`` steps as the models run (:mod:`twirls.reports.energy_measure`).

The model is the one the Table 2 stage ``table2@<entry>`` (``energy.entry``; e.g.
``table2@cora-twirls-base-k2``) trained in its first run, seed 0 on the entry's first split, and
saved to ``models/table2/<entry>.pt``: loaded here, not trained again
(:mod:`twirls.reports.propagation_input`). The stage declares that entry's params, from which the
model is built and which the saved file must match. ``λ`` is the model's; ``energy.steps`` /
``energy.alpha`` are the traces' ``S`` and ``α``; ``energy.attention`` gives ``ρ`` of eq. 12
(pinned at Table 7's values, like the other extras, so ``dvc exp run -S attention.*`` does not
rerun this stage). Energies are computed in float64 on the CPU.

Writes ``results/energy/<dataset>.json``, ``metrics/energy/<dataset>.json`` and
``reports/figures/energy-per-step-<dataset>.png`` (:mod:`twirls.reports.energy_outputs`); if the
dataset could not be fetched, all three say why and the stage exits 0.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from twirls.config.entries import train_entry
from twirls.data.registry import DatasetUnavailable, load_dataset
from twirls.models.graph_ops import GraphOps
from twirls.reports.energy_measure import measure
from twirls.reports.energy_outputs import summary_line, write_energy
from twirls.reports.propagation_input import propagation_input
from twirls.stages.skeleton import StageOutputs, entry, open_stage, raw_out_parser
from twirls.train.checkpoint import load_checkpoint

STAGE = "energy"


@entry
def main(argv: list[str] | None = None) -> int:
    parser = raw_out_parser(__doc__)
    parser.add_argument("--trained", type=Path, default=Path("."),
                        help="the root under which the train stages wrote models/ (default: .)")
    args = parser.parse_args(argv)
    params = open_stage(STAGE)  # the schema checks the section and the entry it names
    cfg = params[STAGE]
    experiment = f"{cfg['group']}.{cfg['entry']}"
    exp = train_entry(params[cfg["group"]][cfg["entry"]])
    result: dict[str, Any]
    trained_on = ""
    try:
        data = load_dataset(exp["dataset"], args.raw)
    except DatasetUnavailable as exc:
        result = {"status": "no-data", "dataset": cfg["dataset"], "reason": str(exc)}
    else:
        saved = load_checkpoint(StageOutputs(cfg["group"], cfg["entry"], args.trained).model,
                                experiment, exp)
        f, run = propagation_input(exp, data, saved)
        trained_on = saved.device
        ops = GraphOps.from_graph(data.graph, dtype=torch.float64)
        lam = float(exp["model_cfg"]["lam"])
        result = {"status": "ok", "dataset": data.name, "split": run["split"],
                  "num_nodes": ops.n, "num_undirected_edges": ops.num_edges // 2,
                  "model": {"experiment": experiment, "model_cfg": exp["model_cfg"],
                            "train_cfg": exp.get("train_cfg") or {}, **run},
                  **measure(ops, f, lam, float(cfg["alpha"]), cfg["steps"], cfg["attention"],
                            float(cfg.get("monotone_rtol", 1.0e-10)))}
    write_energy(args.out, result, trained_on)
    print(summary_line(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
