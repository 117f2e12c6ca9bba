"""Every model entry of the committed ``params.yaml`` is valid before anything runs: a typo in a
key of one of ~90 stages would otherwise surface hours into ``dvc repro``."""

from __future__ import annotations

import pytest
import yaml

from twirls.data.registry import LOADERS
from twirls.models import MODELS, build_model, requires_dgl
from twirls.reports.render import EXTRA_TABLES
from twirls.reports.results import read_paper
from twirls.train.loop import TrainConfig

from fixtures import REPO
from requires import needs

PARAMS = yaml.safe_load((REPO / "params.yaml").read_text())
NEEDS_DGL = needs("dgl", "GAT and GraphSAGE run on DGL's layers")


def model_entries() -> list[tuple[str, dict]]:
    entries = [(f"experiments.{k}", v) for k, v in PARAMS["experiments"].items()]
    entries += [(f"robust_attn.{k}", v) for k, v in PARAMS["robust_attn"].items()]
    for name, sweep in PARAMS["sweeps"].items():
        entries += [(f"sweeps.{name}.{c}", {**spec, "dataset": sweep["dataset"]})
                    for c, spec in sweep["curves"].items()]
    entries += [(f"timing.models.{k}", {**v, "dataset": "ogbn-arxiv"})
                for k, v in PARAMS["timing"]["models"].items()]
    return entries


def needing_dgl(where: str, entry: dict):
    """The parameter set of one entry, marked to skip without DGL for GAT and GraphSAGE."""
    dgl = entry.get("model") in MODELS and requires_dgl(entry["model"])
    return pytest.param(where, entry, marks=[NEEDS_DGL] if dgl else [])


@pytest.mark.parametrize(("where", "entry"), [needing_dgl(*e) for e in model_entries()],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_every_model_entry_builds_and_trains_with_its_settings(where, entry):
    assert entry["dataset"] in LOADERS, where
    build_model(entry["model"], entry.get("model_cfg"), 8, 3, num_nodes=10)
    TrainConfig.from_config(entry.get("train_cfg"))


def test_every_cell_of_an_experiment_names_a_table_of_the_report():
    tables = set(read_paper()["table"]) | set(EXTRA_TABLES)
    for name, exp in PARAMS["experiments"].items():
        assert set(exp["cells"]) <= tables, name
