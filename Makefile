# Two commands do all set-up on a fresh machine (see README):
#   make repro   - create .venv if missing, install, run the whole pipeline (dvc repro)
#   make test    - create .venv if missing, install, run the whole test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: repro test lint bench clean-venv

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

repro: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" DVC_NO_ANALYTICS=1 OUTDATED_IGNORE=1 $(BIN)/dvc repro

test: $(STAMP)
	DVC_NO_ANALYTICS=1 $(BIN)/ruff check src tests
	DVC_NO_ANALYTICS=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=15

bench: $(STAMP)
	$(BIN)/python -m twirls.bench.epoch_time
	$(BIN)/python -m twirls.bench.mettack --dr-flips 20  # ~10 min: DeepRobust takes ~25 s per flip

clean-venv:
	rm -rf $(VENV)
