# One entry point for people and CI. `make test` leaves the servers as it found them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SS := $(VENV)/bin/sessionstream
STAMP := $(VENV)/.installed

.PHONY: help install up down status logs topics demo dashboard dashboard-stop test unit integration lint clean

help:
	@echo "make demo | dashboard | dashboard-stop | test | unit | lint | up | down | status | logs | topics | clean"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

up: $(STAMP)
	$(SS) up

down: $(STAMP)
	$(SS) down

status: $(STAMP)
	$(SS) status

logs: $(STAMP)
	$(SS) logs

topics: $(STAMP)
	$(SS) topics ensure

# The demo ends with the dashboard running in the background; `make dashboard-stop` stops it.
demo: up
	$(SS) topics ensure
	$(SS) demo
	$(SS) dashboard --detach

dashboard: $(STAMP)
	$(SS) dashboard --detach

dashboard-stop: $(STAMP)
	$(SS) dashboard --stop

unit: $(STAMP)
	$(PY) -m pytest tests/unit

# Starts what is not running, runs unit + integration tests, stops only what it started.
# pytest's exit status is kept; 5 ("no tests collected") counts as a failure.
test: $(STAMP)
	@started=$$(mktemp); \
	if $(SS) up --started-file $$started; then \
	  $(PY) -m pytest --durations=5 tests/unit tests/integration; rc=$$?; \
	else rc=1; fi; \
	if [ -s $$started ]; then $(SS) down $$(cat $$started); fi; \
	rm -f $$started; \
	if [ $$rc -eq 5 ]; then echo "make test: no tests were collected" >&2; rc=1; fi; \
	exit $$rc

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
