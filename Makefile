# The two commands of the README: `make demo` and `make test`.
# The first use creates .venv with the project installed (editable).

VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# xdist workers: the machine has 2 cores; tests are mostly waiting on PostgreSQL
TEST_WORKERS ?= 4

.PHONY: demo test lint bench bench-peers venv clean chromium pgbouncer needs-chromium needs-pgbouncer

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[worker,dev]'
	touch $(STAMP)

venv: $(STAMP)

# Without ENGINE_DATABASE_URL the demo starts an embedded PostgreSQL and leaves
# it running (the reports, `engine status` and a second demo use it): say so.
demo: $(STAMP)
	$(VENV)/bin/engine demo
	@if [ -z "$$ENGINE_DATABASE_URL" ]; then \
		echo; \
		echo "make demo left the embedded PostgreSQL running for the next commands; stop it with: $(VENV)/bin/engine db stop"; \
		$(VENV)/bin/engine db status; \
	fi

test: $(STAMP) needs-chromium needs-pgbouncer
	$(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

# what `make test` and `make chaos` need from Debian, installed when missing (below)
needs-chromium:
	@command -v chromium >/dev/null 2>&1 || $(MAKE) --no-print-directory chromium

needs-pgbouncer:
	@PATH="$$PATH:/usr/sbin" command -v pgbouncer >/dev/null 2>&1 || $(MAKE) --no-print-directory pgbouncer

# The report browser tests need headless Chromium, a Debian package: installed
# here when we are root (`make test` does it when it is missing; the one place),
# otherwise the exact command to run is printed.
chromium:
	@if [ "$$(id -u)" -eq 0 ]; then \
		echo "installing headless Chromium for the report browser tests (apt-get install chromium)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		command -v chromium >/dev/null; \
	else \
		echo "headless Chromium is missing; install it with: sudo apt-get update && sudo apt-get install -y chromium" >&2; \
		exit 1; \
	fi

# The pooler tests and the chaos run's pooler scenario run the engine behind a
# real PgBouncer (transaction pooling), a Debian package: installed here when we
# are root, like Chromium (`make test` and `make chaos` do it when it is missing),
# otherwise the exact command to run is printed (tests/support/pooler.py says the same).
pgbouncer:
	@if [ "$$(id -u)" -eq 0 ]; then \
		echo "installing PgBouncer for the pooler tests (apt-get install pgbouncer)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null; \
		PATH="$$PATH:/usr/sbin" command -v pgbouncer >/dev/null; \
	else \
		echo "PgBouncer is missing; install it with: sudo apt-get update && sudo apt-get install -y pgbouncer" >&2; \
		exit 1; \
	fi

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) -m bench

# the engine against Procrastinate, DBOS and pgqueuer in one run (bench/peers/); the
# peers live in their own virtualenv, never in the project's. Without the network the
# install fails, the pip command is printed and the bench runs without them.
PEERS_VENV  := bench/.peers-venv
PEERS_STAMP := $(PEERS_VENV)/.installed
PEERS_PKGS  := procrastinate dbos pgqueuer 'psycopg[binary]'

bench-peers: $(STAMP)
	@test -f $(PEERS_STAMP) || { \
		{ test -x $(PEERS_VENV)/bin/python || python3 -m venv $(PEERS_VENV); } && \
		$(PEERS_VENV)/bin/pip install --quiet $(PEERS_PKGS) && touch $(PEERS_STAMP); \
	} || echo "installing the peers failed; run: $(PEERS_VENV)/bin/pip install $(PEERS_PKGS)" >&2
	BENCH_PEERS_PYTHON=$${BENCH_PEERS_PYTHON:-$(PEERS_VENV)/bin/python} $(PY) -m bench.peers

# real workers on both transports under seeded faults; one JSON line per scenario
# (size with CHAOS_ROUNDS, CHAOS_SEED, CHAOS_SCENARIOS, CHAOS_TRANSPORTS, CHAOS_FAULTS)
chaos: $(STAMP) needs-pgbouncer
	PYTHONPATH=$(CURDIR):$(CURDIR)/tests/support $(PY) -m tests.chaos

clean:
	rm -rf $(VENV) $(PEERS_VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
