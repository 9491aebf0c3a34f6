# kvselect: `make demo` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# the compiled reader (benchmarks/harness/framereader.c) is built by pip install: a change to it reinstalls
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml benchmarks/harness/framereader.c | sha1sum | cut -c1-12)
DEMO_SERVE ?= 1
export DEMO_SERVE
# `make demo PORT=8001` serves on another port; DEMO_ARGS=--fresh reruns the validation tests.
PORT ?= 8000
DEMO_ARGS ?=

.PHONY: venv system-deps demo test bench lint clean

$(STAMP): pyproject.toml benchmarks/harness/framereader.c
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "kvselect needs Python 3.11+"'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]" --config-settings editable_mode=compat
	rm -f $(VENV)/.installed-*
	touch $@

venv: $(STAMP)

system-deps:
	PYTHON="$(PYTHON)" bash scripts/install-system-deps.sh

demo: system-deps venv
	bash scripts/demo.sh --port "$(PORT)" $(DEMO_ARGS)

test: system-deps venv
	bash scripts/run-tests.sh

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

bench: venv
	BENCH="$(BENCH)" PEERS="$(PEERS)" bash scripts/run-bench.sh

clean:
	rm -rf $(VENV) var/*.sqlite3 var/media staticfiles benchmarks/harness/framereader.*.so
