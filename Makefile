# Two commands: `make run` runs the service, `make test` runs every check (ruff, mypy, lint-imports, pytest).
# `make test-quick` runs the tests not marked slow, browser or fault (pytest only), for quick rounds.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-quick lint bench stop clean

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

run: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m memory_project.launcher

# mypy's Django plugin loads the settings: a URL that is never dialled keeps it from starting
# the embedded PostgreSQL (and leaving it running).
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DATABASE_URL=postgres://typecheck@localhost/none REDIS_URL=redis://localhost:1/0 $(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

test-quick: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not slow and not browser and not fault"

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && DATABASE_URL=postgres://typecheck@localhost/none REDIS_URL=redis://localhost:1/0 $(VENV)/bin/mypy && $(VENV)/bin/lint-imports --no-cache

stop: $(STAMP)
	$(PY) -c "from pathlib import Path; from memory_project import embedded; embedded.postgres_stop(Path('var/pgdata').resolve()); embedded.redis_stop(Path('var').resolve())"

clean:
	rm -rf var $(VENV)
