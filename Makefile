# Two commands set everything up on a fresh machine:
#   make quickstart   create .venv if needed, install, run SFT -> RLVR -> eval on the embedded default
#   make test         create .venv if needed, install, run the whole test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# OUT: the quickstart's run directory (default: runs/quickstart, or runs/quickstart-N once taken)
OUT ?=

.PHONY: install quickstart test lint bench clean sandbox-deps test-deps

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch is pinned to the CPU wheel first so that nothing pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

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
