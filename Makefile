# Two entry points: `make demo` and `make test`. Each creates .venv with Python 3.12 when missing.
VENV   ?= .venv
PY      = $(VENV)/bin/python
ROUNDS ?= 6
# pyenv reads .python-version (3.12); a plain python3.12 on PATH works too.
PYTHON ?= $(shell command -v python3.12 2>/dev/null || command -v python3)

# LiteLLM's proxy in a venv of its own: its proxy extra pins rich 13, which repro's console output
# is not made with. The tests find it through REPRO_LITELLM.
LITELLM_VENV ?= .venv-litellm
LITELLM_VERSION ?= 1.108.7
export REPRO_LITELLM = $(abspath $(LITELLM_VENV))/bin/litellm

.PHONY: demo test test-fast setup setup-litellm bench clean

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else "repro needs Python >= 3.12 (mitmproxy 12): install it or set PYTHON=/path/to/python3.12")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test,bench]'
	touch $@

setup: $(VENV)/.installed

$(LITELLM_VENV)/.installed:
	test -x $(LITELLM_VENV)/bin/python || $(PYTHON) -m venv $(LITELLM_VENV)
	$(LITELLM_VENV)/bin/python -m pip install -q --disable-pip-version-check 'litellm[proxy]==$(LITELLM_VERSION)'
	touch $@

setup-litellm: $(LITELLM_VENV)/.installed

demo: setup
	$(VENV)/bin/repro run --rounds $(ROUNDS)

test: setup setup-litellm
	$(PY) -m ruff check .
	$(PY) -m pytest -q

# The socket-free tests only (no port, no process): tests/conftest.py fails any that opens one.
test-fast: setup
	$(PY) -m pytest -q -m "not network"

bench: setup
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) $(LITELLM_VENV) runs
