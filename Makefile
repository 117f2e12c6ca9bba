# Two commands do all set-up on a fresh machine (see README):
#   make repro          - create .venv if missing, install, run the whole pipeline (dvc repro)
#   make test           - create .venv if missing, install, run the whole test suite
#   make test-reference - the same in .venv-reference (torch 2.2.1 + DGL 2.1): the tests whose
#                         oracle is one of DGL's layers (the authors' TWIRLSConv, GATConv, ...)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
MKL_INTEL_PATH_LIB := $(VENV)/lib/libmkl_intel_path.so
CSR_KERNEL_LIB := $(VENV)/lib/libtwirls_csr_kernel.so
MASKS_KERNEL_LIB := $(VENV)/lib/libtwirls_masks_kernel.so
KERNELS := $(CSR_KERNEL_LIB) $(MASKS_KERNEL_LIB)

.PHONY: repro test lint bench clean-venv check-python

# requirements.txt is pinned and checked on these Pythons (pandas 3 starts at 3.11; numpy 2.4 and
# scipy 1.17 are the newest that still have wheels for 3.11, and 3.15 takes numpy 2.5, scipy 1.18).
PINNED_PYTHON := 3.11 3.12 3.13 3.14 3.15
define CHECK_PYTHON
import os, sys
version = "%d.%d" % sys.version_info[:2]
allowed = os.environ["PINNED_PYTHON"].split()
if version not in allowed:
    sys.exit("make: %s is Python %s, but %s installs on Python %s only. Install one and rerun "
             "with it, e.g. `make %s PYTHON=python%s`%s."
             % (sys.executable, version, os.environ.get("PINS", "requirements.txt"),
                ", ".join(allowed), os.environ["GOAL"], allowed[-1],
                " after `make clean-venv`" if os.environ["IN_VENV"] else ""))
endef
export CHECK_PYTHON PINNED_PYTHON

check-python:  # the interpreter of .venv (or $(PYTHON) before .venv exists) can take the pins
	@if test -x $(BIN)/python; then py=$(BIN)/python; venv=1; else py=$(PYTHON); venv=; fi; \
	GOAL="$(or $(firstword $(MAKECMDGOALS)),repro)" IN_VENV=$$venv $$py -c "$$CHECK_PYTHON"

$(STAMP): requirements.txt requirements-nodeps.txt pyproject.toml | check-python
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps -r requirements-nodeps.txt
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

repro: $(STAMP) $(KERNELS) $(if $(filter 1,$(MKL_INTEL_PATH)),$(MKL_INTEL_PATH_LIB))
	$(if $(filter 1,$(MKL_INTEL_PATH)),LD_PRELOAD="$(abspath $(MKL_INTEL_PATH_LIB))" )PATH="$(abspath $(BIN)):$$PATH" DVC_NO_ANALYTICS=1 OUTDATED_IGNORE=1 $(BIN)/dvc repro

# MKL, torch's BLAS and sparse BLAS on x86-64, runs generic kernels on CPUs not made by Intel.
# Preloaded, this one-function library (mkl_serv_intel_cpu_true: yes) has it run the kernels of an
# Intel CPU with the same instructions: on AMD ~1.2x as fast for seeds in batches, 1.4x for GCNII's
# layer, slower for one seed's narrow steps, and other rounding in the last bits (docs/costs.md).
# Opt-in: `make repro MKL_INTEL_PATH=1`.
.PHONY: mkl-intel-path
mkl-intel-path: $(MKL_INTEL_PATH_LIB)
$(MKL_INTEL_PATH_LIB):
	@command -v $(CC) >/dev/null || { echo "make: building $@ needs a C compiler ($(CC)):" \
	  "install one (e.g. gcc), or leave MKL_INTEL_PATH out (MKL then runs its generic kernels)."; \
	  exit 1; }
	mkdir -p $(dir $@)
	printf 'int mkl_serv_intel_cpu_true(void) { return 1; }\n' | $(CC) -shared -fPIC -O2 -x c -o $@ -

# The C kernels, each built into the environment from src/twirls/models/<name>.c: CSR x dense
# products with the bits of MKL's generic kernel (AMD CPUs), faster from 5 columns
# (csr_kernel.py), and dropout masks from NumPy's PCG64 stream, ~2x as fast (masks.py); see
# docs/costs.md. Without a C compiler the products stay MKL's and the masks NumPy's: the same
# results, slower. Built beside the library, then moved over it: a process that has the old one
# loaded keeps it.
$(VENV)/lib/libtwirls_%.so: src/twirls/models/%.c | $(STAMP)
	@mkdir -p $(dir $@)
	@if ! command -v $(CC) >/dev/null; then \
	  echo "make: no C compiler ($(CC)): $* stays torch's and NumPy's (the same results, slower)"; \
	elif ! { $(CC) -O3 -ffp-contract=off -fPIC -shared -o $@.tmp $< && mv -f $@.tmp $@; }; then \
	  rm -f $@.tmp; echo "make: $@ did not build: $* stays torch's and NumPy's (the same results, slower)"; \
	fi

test: $(STAMP) $(KERNELS)
	DVC_NO_ANALYTICS=1 $(BIN)/ruff check src tests
	DVC_NO_ANALYTICS=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=15

bench: $(STAMP)
	$(BIN)/python -m twirls.bench.epoch_time
	$(BIN)/python -m twirls.bench.mettack --dr-flips 20  # ~10 min: DeepRobust takes ~25 s per flip

clean-venv:
	rm -rf $(VENV)

# `make test` on the newest of PINNED_PYTHON, on a clone of HEAD in a Debian sid chroot (root;
# ~11 min; CI runs it after the two stacks): .ci/newest-python
.PHONY: test-newest-python
test-newest-python:
	bash .ci/newest-python

# The reference stack: the last torch (2.2.1) and numpy (1.26) that PyPI's DGL 2.1.0 runs on, for
# the tests whose oracle is a DGL layer (marked `reference` by tests/conftest.py).
REFERENCE_PYTHON := 3.11 3.12
VENV_REFERENCE := .venv-reference
BIN_REFERENCE := $(VENV_REFERENCE)/bin
STAMP_REFERENCE := $(VENV_REFERENCE)/.installed

.PHONY: test-reference clean-venv-reference

$(STAMP_REFERENCE): requirements-reference.txt pyproject.toml
	@if test -x $(BIN_REFERENCE)/python; then py=$(BIN_REFERENCE)/python; venv=1; else \
	  py=$(PYTHON); venv=; fi; GOAL=test-reference IN_VENV=$$venv \
	  PINS=requirements-reference.txt PINNED_PYTHON="$(REFERENCE_PYTHON)" $$py -c "$$CHECK_PYTHON"
	test -x $(BIN_REFERENCE)/python || $(PYTHON) -m venv $(VENV_REFERENCE)
	$(BIN_REFERENCE)/pip install --quiet --upgrade pip
	$(BIN_REFERENCE)/pip install --quiet -r requirements-reference.txt
	$(BIN_REFERENCE)/pip install --quiet --no-deps -e .
	touch $(STAMP_REFERENCE)

test-reference: $(STAMP_REFERENCE)
	DVC_NO_ANALYTICS=1 OUTDATED_IGNORE=1 $(BIN_REFERENCE)/python -m pytest -q -n 2 --dist loadfile \
	  -m "reference and not slow" -rs

clean-venv-reference:
	rm -rf $(VENV_REFERENCE)

# Full-size rehearsal (synthetic files of Pubmed, ogbn-arxiv, Amazon, PKU at Table 5's sizes) of
# every stage that reads them, 1 and 2 epochs each: reports/benchmarks/rehearsal.json (~20 min).
.PHONY: rehearsal
rehearsal: $(STAMP)
	DVC_NO_ANALYTICS=1 OUTDATED_IGNORE=1 $(BIN)/python -m twirls.rehearsal.run

# On a GPU machine (CUDA checks skip, each saying why, without one). GPU_PYTHON: an interpreter
# with this package's needs, e.g. `make test-gpu GPU_PYTHON=python3` on a machine's own stack.
GPU_PYTHON ?= $(BIN)/python
.PHONY: test-gpu bench-gpu

test-gpu:  # every model family on CUDA vs the CPU, fast Mettack flips, peak GPU memory per test
	PYTHONPATH=src GPU_REPORT=reports/benchmarks/gpu-tests.json $(GPU_PYTHON) -m pytest -m gpu -rs -q tests/test_gpu.py

bench-gpu:  # reports/benchmarks/gpu.json: Table 11's models per epoch on the GPU, Mettack per flip
	PYTHONPATH=src $(GPU_PYTHON) -m twirls.bench.gpu --device cuda --out reports/benchmarks/gpu.json

# All of the GPU measurements in one command with a time budget (docs/gpu-session.md): the GPU
# tests, bench-gpu, real stages vs their committed scores and the large-data rehearsal on the
# GPU, into reports/benchmarks/.
.PHONY: gpu-session cost-table
gpu-session:
	PYTHONPATH=src $(GPU_PYTHON) -m twirls.bench.gpu_session --out reports/benchmarks $(SESSION_ARGS)

cost-table: $(STAMP)  # reports/benchmarks/README.md ("What a full run costs") from reports/benchmarks/*.json
	$(BIN)/python -m twirls.rehearsal.costs

# DVC as wheels for a GPU machine's own Python 3.12 without internet (docs/gpu-session.md): carry
# .wheels there and `python3 -m pip install --no-deps --no-index .wheels/*.whl`.
.PHONY: device-wheels
device-wheels:
	rm -rf .wheels
	$(PYTHON312) -m pip wheel --quiet --no-deps -w .wheels -r requirements-device.txt
