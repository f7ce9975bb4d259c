# The two commands of the README: `make demo` and `make test`.
# The first use creates .venv with the project installed (editable).

VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# xdist workers: the machine has 2 cores; tests are mostly waiting on PostgreSQL
TEST_WORKERS ?= 4

.PHONY: demo test lint bench venv clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/engine demo

test: $(STAMP)
	@command -v chromium >/dev/null 2>&1 || echo "note: headless Chromium is missing, so the report browser test will fail; install it with: apt-get install -y chromium"
	$(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
