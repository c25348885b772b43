# One entry point for people and CI. `make test` leaves the servers as it found them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SS := $(VENV)/bin/sessionstream
STAMP := $(VENV)/.installed

.PHONY: help install native up down status logs topics demo dashboard dashboard-stop test unit integration lint bench bench-quick clean

help:
	@echo "make demo | dashboard | dashboard-stop | test | unit | lint | bench [QUICK=1] | bench-quick | up | down | status | logs | topics | clean"

# The install builds the native fold extension too (native/, Rust + PyO3, through
# setuptools-rust, into sessionstream/_native*.so). Cargo keeps its target dir in
# native/target, so a rebuild after an edit is incremental; `make native` is that rebuild.
NATIVE_STAMP := $(VENV)/.native
# No RUSTFLAGS: the AEAD (ring) picks AES-NI/CLMUL when it runs, so one build is portable.
NATIVE_ENV := PATH="$(abspath $(VENV))/bin:$$HOME/.cargo/bin:$$PATH" \
	CARGO_TARGET_DIR="$(abspath native/target)"
NEED_CARGO := $(NATIVE_ENV) command -v cargo >/dev/null || { echo "installing sessionstream \
	builds its native fold with Rust's cargo (rustup.rs, or Debian's cargo and gcc)" >&2; exit 1; }

$(STAMP): pyproject.toml
	@bash deploy/local/system-deps.sh
	@$(NEED_CARGO)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(NATIVE_ENV) $(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP) $(NATIVE_STAMP)

$(NATIVE_STAMP): $(STAMP) native/Cargo.toml $(wildcard native/src/*.rs native/src/*/*.rs)
	@$(NEED_CARGO)
	$(NATIVE_ENV) $(PY) -m pip install -q --no-build-isolation --no-deps -e .
	@touch $(NATIVE_STAMP)

native: $(NATIVE_STAMP)

install: $(STAMP) $(NATIVE_STAMP)

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

unit: $(STAMP) $(NATIVE_STAMP)
	$(PY) -m pytest tests/unit

# Starts what is not running, runs unit + integration tests, stops only what it started.
# pytest's exit status is kept; 5 ("no tests collected") counts as a failure.
test: $(STAMP) $(NATIVE_STAMP)
	@bash deploy/local/system-deps.sh --browser
	@started=$$(mktemp); \
	if $(SS) up --started-file $$started; then \
	  $(PY) -m pytest --durations=5 tests/unit tests/integration; rc=$$?; \
	else rc=1; fi; \
	if [ -s $$started ]; then $(SS) down $$(cat $$started); fi; \
	rm -f $$started; \
	if [ $$rc -eq 5 ]; then echo "make test: no tests were collected" >&2; rc=1; fi; \
	exit $$rc

# The benchmark set against the running local servers, then one table of ratios; by hand
# only (never part of `make test`): the figures depend on the machine and its load.
# QUICK=1 (or `make bench-quick`): sized down to under 5 minutes, figures marked quick.
# BASELINE=DIR: another commit's checkout, installed (`git worktree add DIR <commit> &&
# make -C DIR install`): its worker and replays run beside this one's, in the same run.
bench: $(STAMP) $(NATIVE_STAMP)
	PYTHONPATH=. $(PY) bench/run.py $(if $(QUICK),--quick) $(if $(BASELINE),--baseline $(BASELINE))

bench-quick: $(STAMP) $(NATIVE_STAMP)
	PYTHONPATH=. $(PY) bench/run.py --quick

lint: $(STAMP)
	$(NATIVE_ENV) cargo test -q --release --lib --manifest-path native/Cargo.toml
	$(PY) -m ruff check .
	$(PY) tools/typetree.py build/typecheck >/dev/null
	cd build/typecheck && $(abspath $(PY)) -m mypy --config-file $(abspath pyproject.toml)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
