# Two commands set everything up on a fresh machine:
#   make quickstart   create .venv if needed, install, run SFT -> RLVR -> eval on the embedded default
#   make test         create .venv if needed, install, run the whole test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BFCL_PIN := 2026.3.23
BFCL_DIR := $(VENV)/share/bfcl
BFCL_STAMP := $(BFCL_DIR)/.installed-$(BFCL_PIN)
# OUT: the quickstart's run directory (default: runs/quickstart, or runs/quickstart-N once taken)
OUT ?=

.PHONY: install quickstart test lint bench clean sandbox-deps test-deps bfcl-data

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch is pinned to the CPU wheel first so that nothing pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[test]"
	touch $(STAMP)

install: $(STAMP) $(BFCL_STAMP)

# BFCL v4's data, checker and stateful backends (posttrain.envs.bfcl), offline after install: the
# wheel is downloaded without its dependencies and unzipped under the venv, never pip-installed
# (it pins numpy, torch, API clients, ...). Once, stamped; tests never fetch it.
$(BFCL_STAMP): | $(BIN)/python
	rm -rf $(BFCL_DIR) && mkdir -p $(BFCL_DIR)
	$(BIN)/pip download -q --no-deps --only-binary=:all: bfcl-eval==$(BFCL_PIN) -d $(BFCL_DIR)
	$(BIN)/python -m zipfile -e $(BFCL_DIR)/bfcl_eval-$(BFCL_PIN)-py3-none-any.whl $(BFCL_DIR)/wheel
	touch $(BFCL_STAMP)

bfcl-data: $(BFCL_STAMP)

# Debian packages. The sandbox runs Debian's /usr/bin/python3 inside bubblewrap, filters syscalls
# with libseccomp2 and drops privileges with util-linux's setpriv/prlimit; chromium renders the
# HTML report in a test.
sandbox-deps:
	@if ! ldconfig -p | grep -q libseccomp.so.2 || [ ! -x /usr/bin/python3 ] || ! command -v setpriv >/dev/null 2>&1; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp2 python3 util-linux >/dev/null) \
		|| echo "warning: could not install libseccomp2 python3 util-linux (needs root and the Debian registry)"; \
	fi

test-deps: sandbox-deps
	@if ! command -v chromium >/dev/null 2>&1; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
		|| echo "warning: could not install chromium (needs root and the Debian registry)"; \
	fi

quickstart: install sandbox-deps
	$(BIN)/posttrain quickstart $(if $(OUT),--out $(OUT))

test: install test-deps
	$(BIN)/python -m pytest -q tests

lint: install
	$(BIN)/ruff check .

bench: install
	$(BIN)/posttrain bench sandbox
	$(BIN)/posttrain bench train

clean:
	rm -rf $(VENV) runs .pytest_cache
