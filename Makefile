# MLModelScope: `make run` starts the hub; `make test` runs the whole suite.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000
PG_URL ?= postgres://postgres@127.0.0.1:5432/mlmodelscope
REDIS_URL ?= redis://127.0.0.1:6379

.PHONY: run test test-sqlite test-postgres lint venv chromium zoo migrate clean help

help:
	@echo "make run   - install what is missing, migrate, build the zoo, load manifests, serve http://$(HOST):$(PORT)"
	@echo "make test  - install what is missing and run the whole suite (SQLite, then PostgreSQL + Redis)"

# --- Installation ---------------------------------------------------------------------------
$(BIN)/python:
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	  echo "python venv support is missing; installing python3-venv" >&2; \
	  $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y python3-venv >&2 && $(PYTHON) -m venv $(VENV); }

$(STAMP): $(BIN)/python requirements.txt requirements-frameworks.txt pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -r requirements-frameworks.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $(STAMP)

venv: $(STAMP)

# Browser tests drive Debian's Chromium (never a downloaded browser build).
chromium:
	@command -v chromium >/dev/null || { \
	  echo "installing Debian's chromium for the browser tests" >&2; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -q chromium chromium-driver >&2 || \
	  { $$SUDO apt-get update -q >&2 && $$SUDO apt-get install -y -q chromium chromium-driver >&2; } || \
	  echo "could not install chromium: browser tests will be skipped" >&2; }

migrate: venv
	$(BIN)/python manage.py migrate --noinput

zoo: venv
	$(BIN)/python -m predictors.zoo build

# --- Run ------------------------------------------------------------------------------------
run: migrate zoo
	$(BIN)/python manage.py load_manifests
	@TOKEN_FILE=$$($(BIN)/python manage.py agent_token) && \
	echo && echo "  MLModelScope hub: http://$(HOST):$(PORT)/   (API: http://$(HOST):$(PORT)/api/v1/manifests/)" && echo && \
	echo "  Reference results: the zoo is evaluated in every framework and published on /leaderboards/ in the background; progress in var/reference-results.log" && echo && \
	{ $(BIN)/python -m predictors.agent --hub http://$(HOST):$(PORT) --token-file "$$TOKEN_FILE" --pool & AGENT=$$!; \
	  $(BIN)/python manage.py reference_results > var/reference-results.log 2>&1 & REFERENCE=$$!; \
	  trap 'kill $$AGENT $$REFERENCE 2>/dev/null; wait $$AGENT $$REFERENCE' EXIT INT TERM; \
	  $(BIN)/daphne -b $(HOST) -p $(PORT) mlmodelscope.asgi:application; }

# --- Test -----------------------------------------------------------------------------------
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy hub evaluations traces predictors mlmodelscope

test-sqlite: venv
	@echo "=== test suite on SQLite (embedded default) ==="
	env -u DATABASE_URL -u CELERY_BROKER_URL -u CHANNEL_LAYER_URL $(BIN)/python -m pytest

test-postgres: venv
	@if $(BIN)/python -m tests.services postgres redis; then \
	  echo "=== test suite on PostgreSQL + Redis ==="; \
	  DATABASE_URL=$(PG_URL) CELERY_BROKER_URL=$(REDIS_URL)/0 CHANNEL_LAYER_URL=$(REDIS_URL)/1 \
	    $(BIN)/python -m pytest; \
	elif [ "$$CI" = "true" ]; then \
	  echo "CI: PostgreSQL and Redis must be reachable" >&2; exit 1; \
	else \
	  echo "=== PostgreSQL or Redis unreachable: skipping the production-mode run ==="; \
	fi

test: chromium lint test-sqlite test-postgres

clean:
	rm -rf $(VENV) var staticfiles .pytest_cache .mypy_cache .ruff_cache
