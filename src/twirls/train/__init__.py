"""The shared training protocol: device choice (``device``), full-batch training with model
selection on validation accuracy and repeated runs over seeds (``loop``), metrics, outputs.

Nothing is imported here, so a module that needs one part (the attack stage writes its metrics
with ``twirls.train.outputs``) does not run, and does not depend on, the models the training
loop builds."""
