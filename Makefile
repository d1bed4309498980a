# Wire: two commands do all the set-up on a fresh machine.
#   make run   - create .venv, install Wire, run the main job (NYC flights 2013)
#   make test  - create .venv, install Wire, check the import layers (lint-imports) and the types
#                (mypy --strict on src/wire), run the test suite (all but the tests marked slow)
#   make test-all - the same, slow tests included (24-kill fault injection, Spark cluster)
# Both install Wire with every optional extra and the test tools: pip install -e '.[all,dev]'.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test test-all bench lint java-check clean bytecode

java-check:
	@command -v java >/dev/null 2>&1 || { echo "error: Java 17 or newer is required (Spark runs on the JVM) and 'java' was not found on PATH"; exit 1; }
	@java -version 2>&1 | awk -F'"' '/version/ { split($$2, v, "."); if (v[1] + 0 < 17) { print "error: Java 17 or newer is required, found Java " $$2; exit 1 } }'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[all,dev]'
	@# the JVM's class-data-sharing archive of Spark's classes (wire.runtime.class_archive):
	@# local sessions start ~2.5 s sooner; without it they start as before
	-$(PY) -m wire.cli.class_archive > $(VENV)/class-archive.log 2>&1
	touch $(STAMP)

# Wire's bytecode, as a non-editable pip install has it: each Python process of a flow (the
# driver, the fork server, the worker daemon) otherwise compiles the modules it imports
# when PYTHONDONTWRITEBYTECODE is set (0.1 s each); stale files are recompiled, quietly
bytecode: $(STAMP)
	@$(PY) -m compileall -q src/wire > /dev/null

run: java-check $(STAMP) bytecode
	$(PY) -m wire.examples.flights_job

test: java-check $(STAMP) bytecode
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(PY) -m pytest -m "not slow"

test-all: java-check $(STAMP) bytecode
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(PY) -m pytest

bench: java-check $(STAMP) bytecode
	$(PY) bench/windows_bench.py
	$(PY) bench/backlog_memory.py
	$(PY) bench/nexmark.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf out .pytest_cache
