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

.PHONY: run test test-sqlite test-postgres test-zoo lint venv chromium espeak zoo migrate clean help \
	engine images compose-up compose-down compose-token constraints

help:
	@echo "make run   - install what is missing, migrate, build the zoo, load manifests, serve http://$(HOST):$(PORT)"
	@echo "make test  - install what is missing and run the whole suite (SQLite, then PostgreSQL + Redis)"
	@echo "make images [IMAGES='onnxruntime hub'] [GPU=1] - build the images, offline (docker/)"
	@echo "make compose-up / compose-down - the production stack in containers (docker-compose.yml)"
	@echo "make compose-token TOKEN_USER=alice [SCOPES=read,evaluate] - an API token of that stack's hub"

# --- Installation ---------------------------------------------------------------------------
$(BIN)/python:
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	  echo "python venv support is missing; installing python3-venv" >&2; \
	  $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y python3-venv >&2 && $(PYTHON) -m venv $(VENV); }

$(STAMP): $(BIN)/python requirements.txt $(wildcard requirements/*.txt requirements/pretrained/*.txt) constraints.txt pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps $(addprefix -r ,$(wildcard requirements/pretrained/*.txt))
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $(STAMP)

venv: $(STAMP)

# After a pin in requirements/ changed: pin everything the virtualenv then holds.
constraints: venv
	@{ sed -n '1,3p' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable | \
	  sed 's/^torch==2.13.0+cpu$$/torch==2.13.0/'; } > constraints.txt.new && mv constraints.txt.new constraints.txt

# Browser tests drive Debian's Chromium (never a downloaded browser build).
chromium:
	@command -v chromium >/dev/null || { \
	  echo "installing Debian's chromium for the browser tests" >&2; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -q chromium chromium-driver >&2 || \
	  { $$SUDO apt-get update -q >&2 && $$SUDO apt-get install -y -q chromium chromium-driver >&2; } || \
	  echo "could not install chromium: browser tests will be skipped" >&2; }

# The zoo's speech clips are spoken by eSpeak NG (Debian's espeak-ng; predictors/zoo/speech.py).
espeak:
	@command -v espeak-ng >/dev/null || { \
	  echo "installing Debian's espeak-ng for the zoo's speech clips" >&2; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -q espeak-ng >&2 || \
	  { $$SUDO apt-get update -q >&2 && $$SUDO apt-get install -y -q espeak-ng >&2; } || \
	  echo "could not install espeak-ng: the zoo cannot make datasets/speech-clips" >&2; }

migrate: venv
	$(BIN)/python manage.py migrate --noinput

zoo: venv espeak
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

# --- Images and the compose stack ----------------------------------------------------------
# A Docker engine (docker.io installed, dockerd started, where missing).
engine:
	@docker/engine.sh

# The images, built offline from a debootstrapped Debian base and a wheelhouse of the pinned
# wheels; what did not change is not built again (docker/build.py, docker/README.md).
images: venv engine
	$(BIN)/python docker/build.py $(IMAGES) $(if $(GPU),--gpu)

# Redis's password for the compose stack: made once, kept in var/compose/ (not in the file).
REDIS_PASSWORD_FILE := var/compose/redis.password
COMPOSE = MLMS_REDIS_PASSWORD="$$(cat $(REDIS_PASSWORD_FILE))" docker-compose -p mlmodelscope -f docker-compose.yml

$(REDIS_PASSWORD_FILE):
	@mkdir -p var/compose && umask 077 && $(PYTHON) -c "import secrets; print(secrets.token_hex(24))" > $@

# The production stack: PostgreSQL, Redis, the hub, the sweeper, an agent per framework image.
# The agents' containers are told their image's digest (no image can hold its own).
compose-up: images zoo $(REDIS_PASSWORD_FILE)
	$(BIN)/python docker/build.py --digests > var/compose/digests.env
	set -a && . var/compose/digests.env && set +a && $(COMPOSE) up -d
	@echo && echo "  MLModelScope hub (compose): http://127.0.0.1:$${MLMS_PORT:-8080}/" && echo

compose-down: $(REDIS_PASSWORD_FILE)
	$(COMPOSE) down

# An API token of the compose stack's hub for TOKEN_USER (made if new), printed on the last line.
SCOPES ?= read,evaluate
compose-token: $(REDIS_PASSWORD_FILE)
	@test -n "$(TOKEN_USER)" || { echo "make compose-token: name the user: TOKEN_USER=alice" >&2; exit 2; }
	@$(COMPOSE) exec -T hub django-admin create_token --user "$(TOKEN_USER)" --create-user \
	  --scopes "$(SCOPES)"

# --- Test -----------------------------------------------------------------------------------
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy hub evaluations traces predictors mlmodelscope frontend

# The slowest tests of each pass are listed at its end (what the suite's time goes to).
PYTEST_FLAGS ?= --durations=25
# In CI each pass stops after PASS_SECONDS (pytest-timeout's session timeout) and still prints
# its summary and its slowest tests: a slow machine ends with a report, not a killed job. On a
# slow shared VM the SQLite pass has taken 35 minutes and the PostgreSQL one 40: with the
# set-up, a PostgreSQL pass cut at 45 still ends inside CI's 90.
PASS_SECONDS ?= $(if $(filter true,$(CI)),2700,)
PASS_LIMIT = $(if $(PASS_SECONDS),--session-timeout=$(PASS_SECONDS))

# On its own, the SQLite pass runs every test. Before a PostgreSQL + Redis pass
# (POSTGRES_PASS_FOLLOWS=true, as `make test` sets it where one can run) it runs the tests that
# touch no database and those marked `both_stacks` (end to end on the embedded default, fuzzing,
# trust, live WebSockets), and leaves the rest to that pass: each test once, on the production
# stack, except those whose subject is the stack (tests/conftest.py).
POSTGRES_PASS_FOLLOWS ?=
test-sqlite: venv
	@echo "=== test suite on SQLite (embedded default), $$(date +%T) ==="
	env -u DATABASE_URL -u CELERY_BROKER_URL -u CHANNEL_LAYER_URL \
	  MLMS_FUZZ_EXAMPLES=$${MLMS_FUZZ_EXAMPLES:-15} \
	  MLMS_POSTGRES_PASS_FOLLOWS=$(POSTGRES_PASS_FOLLOWS) \
	  $(BIN)/python -m pytest $(PYTEST_FLAGS) $(PASS_LIMIT)

# The machine's Redis lets a client without a password in, on which a hub refuses to start
# unless BROKER_ALLOW_OPEN_DEFAULT_USER says so (docs/reliability.md, broker isolation).
test-postgres: venv
	@if $(BIN)/python -m tests.services postgres redis; then \
	  echo "=== test suite on PostgreSQL + Redis, $$(date +%T) ==="; \
	  DATABASE_URL=$(PG_URL) CELERY_BROKER_URL=$(REDIS_URL)/0 CHANNEL_LAYER_URL=$(REDIS_URL)/1 \
	  BROKER_ALLOW_OPEN_DEFAULT_USER=true MLMS_FUZZ_EXAMPLES=$${MLMS_FUZZ_EXAMPLES:-10} \
	    $(BIN)/python -m pytest $(PYTEST_FLAGS) $(PASS_LIMIT); \
	elif [ "$$CI" = "true" ]; then \
	  echo "CI: PostgreSQL and Redis must be reachable" >&2; exit 1; \
	else \
	  echo "=== PostgreSQL or Redis unreachable: skipping the production-mode run ==="; \
	fi

# The images the docker tests run: built once, reused while unchanged. Without a Docker engine
# the docker tests are skipped (in CI they fail).
test-images: venv
	@if docker/engine.sh; then $(BIN)/python docker/build.py; \
	elif [ "$$CI" = "true" ]; then echo "CI: a Docker engine is required" >&2; exit 1; \
	else echo "=== no Docker engine: the docker tests will be skipped ==="; fi

# The zoo entries the suite evaluates, built where the tests look for them (tests/artifacts,
# `tests/predictors/zoo_store.py`) while the images build and the linters run.
TEST_ZOO := digits-cnn shapes-color resnet-18 resnet-50 alexnet mobilenet-v2 text-direction \
	toggle-gru silero-vad shapes-detector shapes-segmenter shapes-tagger diabetes-mlp \
	text-recognizer text-transcripts file-type file-types speaker-encoder speaker-clips \
	basic-pitch piano-chords text-detector text-pages review-sentiment short-reviews

test-zoo: venv espeak
	$(BIN)/python -m predictors.zoo build --store tests/artifacts --only $(TEST_ZOO) > /dev/null

test: chromium espeak
	@echo "=== make test, $$(date +%T): linters, images and the test zoo, side by side ==="
	$(MAKE) -j3 --output-sync=target lint test-images test-zoo
	@if [ "$$CI" = "true" ] || $(BIN)/python -m tests.services postgres redis; then \
	  $(MAKE) test-sqlite POSTGRES_PASS_FOLLOWS=true; \
	else $(MAKE) test-sqlite; fi
	$(MAKE) test-postgres

clean:
	rm -rf $(VENV) var staticfiles .pytest_cache .mypy_cache .ruff_cache
