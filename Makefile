# Onceflow developer entry points. `make setup` is idempotent and cheap when nothing changed.
VENV ?= .venv
PY = $(VENV)/bin/python
PYTHON ?= python3
UV_VERSION = 0.13.8
SETUP_STAMP = $(VENV)/.onceflow-setup-stamp

.PHONY: setup up down status

## setup: create .venv and install the locked dependencies + onceflow (editable)
setup: $(SETUP_STAMP)

# Re-runs only when requirements.lock or pyproject.toml is newer than the stamp.
# uv is much faster (~7 s vs ~60 s); pip is the fallback when uv cannot be installed or fails.
$(SETUP_STAMP): requirements.lock pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@if $(PY) -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION) \
	  && $(VENV)/bin/uv pip sync --python $(PY) requirements.lock \
	  && $(VENV)/bin/uv pip install --python $(PY) --no-deps -e . ; then \
	  echo "setup: installed with uv"; \
	else \
	  echo "setup: uv failed, falling back to pip"; \
	  $(PY) -m pip install --disable-pip-version-check -r requirements.lock \
	  && $(PY) -m pip install --disable-pip-version-check --no-deps -e . ; \
	fi
	@touch $@

## up: start the local stack (PostgreSQL, tansu broker, Airflow) in the background
up: setup
	$(VENV)/bin/onceflow up

## down: stop the local stack, leaving no process behind
down:
	@if [ -x $(VENV)/bin/onceflow ]; then $(VENV)/bin/onceflow down; else echo "no $(VENV): nothing to stop"; fi

## status: what runs, on which ports, and the Airflow UI login
status:
	@$(VENV)/bin/onceflow status
