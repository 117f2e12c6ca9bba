"""Chinese word segmentation on PKU as node classification on chain graphs (paper Table 12).

* :mod:`.batching`: sentences as chains of characters, a mini-batch as one block-diagonal graph.
* :mod:`.models`: an embedding in front of the project's graph models (MLP, GCN, TWIRLS-base),
  and the bi-LSTM baseline.
* :mod:`.metrics`: macro F1 over the tags B/M/E/S.
* :mod:`.train`: the seeded mini-batch training loop of one run.
* :mod:`.protocols`: the paper's protocol (PKU training file + fastNLP embedding) or the
  labelled stand-in (train and test on disjoint parts of the PKU test gold).
* :mod:`.experiment`: every model and seed of Table 12, as report cells.
* the ``table12`` params group and its check: :mod:`twirls.config.table12` (each model's name
  and config: :func:`.models.check_models`).
"""
