# Onceflow developer entry points. `make setup` is idempotent and cheap when nothing changed.
VENV ?= .venv
PY = $(VENV)/bin/python
PYTHON ?= python3
UV_VERSION = 0.13.8
SETUP_STAMP = $(VENV)/.onceflow-setup-stamp
# the checkout's own commands (onceflow_dev.cli: the embedded stack, demo, chaos); `make setup`
# writes it, and the wheel ships no such script
ONCEFLOW_DEV = $(VENV)/bin/onceflow-dev

.PHONY: setup system-deps wheel up down status demo test test-unit test-cluster lint format

JVM_STAMP = $(VENV)/share/onceflow/jvm/.onceflow-setup-stamp

## setup: create .venv, install the locked dependencies + onceflow (editable), resolve the JVM
##        artifacts pinned in pom.xml with Maven (Apache Kafka's broker, Spark's Kafka connector,
##        PostgreSQL's JDBC driver) and write the driver JVM's class archive once
##        (onceflow spark-archive); writes $(VENV)/bin/onceflow-dev, the checkout's own commands
setup: $(SETUP_STAMP) $(JVM_STAMP)
	@# bytecode of the package's own modules, as a wheel's install writes it: an editable
	@# install has none, and where PYTHONDONTWRITEBYTECODE is set every Python process (each
	@# task, Spark worker, test) compiled the ~70 modules it imports again (60 ms here).
	@# Only what changed since the last run is compiled.
	@$(PY) -m compileall -q include spark_jobs >/dev/null
	@printf '#!/bin/sh\nexec "$$(dirname "$$0")/python" -m onceflow_dev "$$@"\n' > $(ONCEFLOW_DEV)
	@chmod +x $(ONCEFLOW_DEV)
	@$(VENV)/bin/onceflow spark-archive \
	  || echo "setup: the Spark class archive was not written (onceflow spark-archive); process tasks start without it"

# Re-runs only when pom.xml changed; Maven's local repository (~/.m2) keeps the jars, so a second
# run needs no network. Without mvn, root installs Debian's maven; anyone else is told to.
$(JVM_STAMP): pom.xml $(SETUP_STAMP)
	@if ! command -v mvn >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "setup: installing Debian's maven (mvn resolves the JVM artifacts of pom.xml)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends maven >/dev/null; } \
	    || echo "setup: apt-get could not install maven"; \
	fi
	@$(PY) -m onceflow_dev.jvm resolve
	@touch $@

# Re-runs only when requirements.lock or pyproject.toml is newer than the stamp.
# uv is much faster (~7 s vs ~60 s); pip is the fallback when uv cannot be installed or fails.
# --compile-bytecode: the .pyc files pip writes by default and uv does not; without them every
# process of the tests compiles what it imports again (none is written where
# PYTHONDONTWRITEBYTECODE is set, as on the CI machines).
# `uv cache prune`: uv builds pyspark's sdist again for every fresh venv and keeps each build
# (about 1.4 GB) in its cache, never to be read again; the prune drops those.
$(SETUP_STAMP): requirements.lock pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@if $(PY) -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION) \
	  && $(VENV)/bin/uv pip sync --compile-bytecode --python $(PY) requirements.lock \
	  && $(VENV)/bin/uv pip install --python $(PY) --no-deps -e . ; then \
	  $(VENV)/bin/uv cache prune --quiet || true; \
	  echo "setup: installed with uv"; \
	else \
	  echo "setup: uv failed, falling back to pip"; \
	  $(PY) -m pip install --disable-pip-version-check -r requirements.lock \
	  && $(PY) -m pip install --disable-pip-version-check --no-deps -e . ; \
	fi
	@touch $@

## wheel: build dist/onceflow-<version>-py3-none-any.whl, the package to install into your own Airflow
wheel: setup
	@rm -rf build
	$(PY) -m pip wheel --no-deps --no-build-isolation --quiet -w dist .
	@rm -rf build
	@ls -l dist/onceflow-*.whl

## up: start the local stack (PostgreSQL, Apache Kafka, Spark Connect, Airflow) in the background
up: setup
	$(ONCEFLOW_DEV) up

## down: stop the local stack, leaving no process behind
down:
	@if [ -x $(ONCEFLOW_DEV) ]; then $(ONCEFLOW_DEV) down; else echo "no $(ONCEFLOW_DEV): nothing to stop"; fi

## status: what runs, on which ports, and the Airflow UI login
status:
	@$(ONCEFLOW_DEV) status

PYTEST_ARGS ?=
# make test's workers (pytest-xdist; tests/conftest.py groups the suite): three on two cores,
# since a worker whose test waits on a scheduler, a broker or a JVM leaves its core idle;
# the unit tests never wait: two, one per core
TEST_WORKERS ?= 3
UNIT_WORKERS ?= 2
XDIST = --dist loadgroup --no-loadscope-reorder

## system-deps: Debian packages the tests use (docker-compose to validate the compose file,
##              chromium + chromium-driver for the `ui` browser tests, redis-server as the Celery
##              executor's broker); root only, skipped when present
system-deps:
	@need=; \
	command -v docker-compose >/dev/null 2>&1 || need="$$need docker-compose"; \
	[ -x /usr/bin/chromium ] || need="$$need chromium chromium-driver"; \
	command -v redis-server >/dev/null 2>&1 || need="$$need redis-server"; \
	if [ -n "$$need" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq || echo "system-deps: apt-get update failed"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$need >/dev/null \
	      || echo "system-deps: could not install$$need; the tests needing them will fail"; \
	  else echo "system-deps:$$need missing and not root: install them (apt-get install$$need)"; fi; \
	fi

## demo: set up, start the stack and run the seven example pipelines (orders: append with a fast form,
##       revenue: merge, inventory: upsert, pageviews: merge, inventory_lake: an Iceberg table, payments_avro: Avro,
##       shop_cdc: Debezium's change events of three tables): produce their records, trigger the runs through the
##       scheduler, audit each with --reread, check shop_cdc's tables against their source, print a summary
##       (onceflow-dev demo); again: more records, still exactly-once
demo: setup
	$(ONCEFLOW_DEV) up
	$(ONCEFLOW_DEV) demo

## lint: ruff check and format check
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

## test: lint, then unit, integration and e2e tests on real services (one shared test stack;
##       the Spark standalone cluster test, the installed wheel and the compatibility matrix
##       each on their own), in TEST_WORKERS workers (3; TEST_WORKERS=0 runs them in this
##       process): what CI runs
test: setup system-deps lint
	$(VENV)/bin/pytest -n $(TEST_WORKERS) $(XDIST) $(PYTEST_ARGS)

## test-unit: the tests that need no server (pytest -m unit: about 50 s)
test-unit: setup system-deps
	$(VENV)/bin/pytest -m unit -n $(UNIT_WORKERS) $(XDIST) $(PYTEST_ARGS)

## test-cluster: the scale-out test alone (a Spark standalone master and two workers on
##       127.0.0.1, about 90 s; `make test` runs it too)
test-cluster: setup
	$(VENV)/bin/pytest -m cluster $(PYTEST_ARGS)

## chaos: fault-injection run on a dedicated stack (ports 25435/29095/28083); writes chaos-report.json
##        (CHAOS_ARGS="--batches 20" for a short run; --pipeline NAME for a pipeline of
##        dags/pipelines.toml instead of the orders one; --seed N, --max-minutes M, --keep)
.PHONY: chaos
CHAOS_ARGS ?=
chaos: setup
	$(ONCEFLOW_DEV) chaos $(CHAOS_ARGS)

## bench: throughput, fixed cost, scaling and a 10-minute soak, measured side by side on data
##        it produces (~30-50 min on 2 cores; run on a quiet machine), on Apache Kafka with
##        Spark's own Kafka connector as the peer (both from the jars `make setup` resolves
##        from Maven Central). Writes bench/results.json, bench/throughput.png and
##        bench/BENCHMARKS.md; exits 1 when the soak finds a record not committed, a failed run or
##        an audit that is not exactly-once. BENCH_ARGS="--quick" for a smoke run (1-minute
##        soak); BENCH_ARGS="--only lake": only the PostgreSQL-against-Iceberg section
##        (~5-10 min); BENCH_ARGS="--only soak --soak-minutes 10": the soak alone.
.PHONY: bench
BENCH_ARGS ?=
bench: setup
	$(PY) bench/run.py $(BENCH_ARGS)

## test-compat: the compatibility matrix (tests/e2e/test_compat_matrix.py): the wheel in a fresh
##       venv per cell (Python 3.10 + Airflow 3.1.0 + pyspark 4.0.0 and every floor; Python 3.12
##       + Airflow 3.2.1 + pyspark 4.3.0; Python 3.13 + Airflow 3.3.2 + pyspark 4.3.0), the
##       unit suite against it and one pipeline through that Airflow's scheduler (about 8
##       minutes alone; `make test` runs it too)
.PHONY: test-compat
test-compat: setup
	$(VENV)/bin/pytest -m compat $(PYTEST_ARGS)
