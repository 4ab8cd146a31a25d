# Two commands set everything up on a fresh machine:
#   make quickstart   create .venv if needed, install, run SFT -> RLVR -> eval on the embedded default
#   make test         create .venv if needed, install, run the whole test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
OUT ?= runs/quickstart

.PHONY: install quickstart test lint bench clean system-deps

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch is pinned to the CPU wheel first so that nothing pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

# Debian packages the test suite needs: chromium renders the HTML report; libseccomp2 backs pyseccomp.
system-deps:
	@if ! command -v chromium >/dev/null 2>&1 || [ ! -e /usr/lib/x86_64-linux-gnu/libseccomp.so.2 ]; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium libseccomp2 >/dev/null) \
		|| echo "warning: could not install chromium/libseccomp2 (need root and the Debian registry)"; \
	fi

quickstart: install
	$(BIN)/posttrain quickstart --out $(OUT)

test: install system-deps
	$(BIN)/python -m pytest -q tests

lint: install
	$(BIN)/ruff check .

bench: install
	$(BIN)/posttrain bench sandbox
	$(BIN)/posttrain bench train

clean:
	rm -rf $(VENV) runs .pytest_cache
