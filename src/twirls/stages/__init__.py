"""One script per DVC stage, run as ``python -m twirls.stages.<name>`` (see dvc.yaml)."""
