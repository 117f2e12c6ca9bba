"""Simple baselines with the TWIRLS interface: ``Model.from_config(cfg, in_dim, out_dim,
num_nodes=None)`` and ``forward(ops: GraphOps, x) -> logits``; each module's ``<Model>Config``
dataclass holds the model's hyperparameters and their defaults."""

from twirls.models.baselines.appnp import APPNP
from twirls.models.baselines.dagnn import DAGNN
from twirls.models.baselines.gat import GAT
from twirls.models.baselines.gcn import GCN
from twirls.models.baselines.gcnii import GCNII
from twirls.models.baselines.gcnii_dense import GCNIIDense
from twirls.models.baselines.geom_gcn import GeomGCN
from twirls.models.baselines.graphsage import GraphSAGE
from twirls.models.baselines.h2gcn import H2GCN
from twirls.models.baselines.ignn import IGNN
from twirls.models.baselines.jknet import JKNet
from twirls.models.baselines.mlp import MLP
from twirls.models.baselines.sgc import SGC
from twirls.models.baselines.sse import SSE

__all__ = ["APPNP", "DAGNN", "GAT", "GCN", "GCNII", "GCNIIDense", "GraphSAGE", "H2GCN", "JKNet",
           "MLP", "SGC", "SSE", "IGNN", "GeomGCN"]
