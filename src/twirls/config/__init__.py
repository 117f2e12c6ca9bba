"""The pipeline's configuration: ``params.yaml`` grouped like the paper's tables, the complete
experiment entries the stages run (:mod:`twirls.config.entries`) and the one schema every value
is checked against before anything expensive runs (:mod:`twirls.config.schema`)."""
