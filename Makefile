# The two set-up commands of the README:
#   make demo   one real agent turn on the embedded model server (no account needed)
#   make test   lint, type-check and the whole test suite (real agents included)
# Both install what they need first: a virtualenv in .venv and the pinned agents in engines/.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
ENGINES_STAMP := engines/node_modules/.installed
PYTEST_ARGS ?=

.PHONY: demo test install engines sandbox podman harbor chromium lint typecheck pytest compliance bench record compat clean

demo: $(STAMP) $(ENGINES_STAMP)
	$(BIN)/agentrun run

test: lint typecheck pytest

install: $(STAMP)
engines: $(ENGINES_STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

$(ENGINES_STAMP): engines/package.json engines/package-lock.json
	cd engines && npm install --no-audit --no-fund --loglevel=error
	touch $(ENGINES_STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/pyright

# Codex runs sandboxed commands (codex-acp's modes, app-server's plan mode) under bubblewrap
# where it is installed, and the tests of those commands need it: installed here when it is
# missing and we are root with apt-get, else the step says what to install (and goes on).
sandbox:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing bubblewrap (Codex's sandbox)"; \
		(apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
		 (apt-get update -qq && apt-get install -y -qq bubblewrap)) >/dev/null || \
		echo "note: bubblewrap could not be installed; its tests will be skipped"; \
	else echo "note: install bubblewrap (bwrap) for the tests of Codex's sandboxed commands"; fi

# Sandbox(backend="podman") runs agents in a podman container (docs/sandbox.md); runc too, as
# crun refuses hybrid cgroup hierarchies. Installed when missing and we are root with apt-get,
# else its tests skip, saying why.
podman:
	@if command -v podman >/dev/null 2>&1 && command -v runc >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing podman and runc (the container sandbox)"; \
		(apt-get install -y -qq podman runc >/dev/null 2>&1 || \
		 (apt-get update -qq && apt-get install -y -qq podman runc)) >/dev/null || \
		echo "note: podman could not be installed; its tests will be skipped"; \
	else echo "note: install podman (and runc) for the tests of the container sandbox"; fi

# Harbor's own ATIF models check the library's trajectories (tests/harbor_support.py). Harbor
# needs Python >= 3.12: where one is here (on PATH or under pyenv), it gets a virtualenv of its
# own in .venv-harbor with Harbor and pydantic only (Harbor's trajectory models need no more);
# elsewhere those tests skip, saying why.
HARBOR := .venv-harbor
HARBOR_STAMP := $(HARBOR)/.installed
harbor: $(HARBOR_STAMP)
$(HARBOR_STAMP):
	@py=""; for p in python3.14 python3.13 python3.12 $$HOME/.pyenv/versions/3.1[2-9]*/bin/python3; do \
		if "$$p" -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1; then py=$$p; break; fi; \
	done; \
	if [ -z "$$py" ]; then echo "note: no Python >= 3.12 here: the tests against Harbor's validator will skip"; \
	elif "$$py" -m venv $(HARBOR) && $(HARBOR)/bin/pip install -q --no-deps harbor==0.26.0 >/dev/null 2>&1 \
		&& $(HARBOR)/bin/pip install -q 'pydantic>=2.11' >/dev/null 2>&1; then touch $(HARBOR_STAMP); \
	else echo "note: Harbor could not be installed: the tests against its validator will skip"; fi

# Real agents and the model server run inside a loopback-only network namespace where the
# machine allows it (see docs/testing-offline.md). The suite runs on one worker per CPU (at most
# four): most of a test with a real agent is spent waiting on the agent, so workers overlap
# well even on two CPUs. A test file's tests share a worker (--dist loadfile): a docs page's
# blocks build on each other, and grouping them by page (loadgroup) was seen to split a page
# across workers.
PYTEST_WORKERS ?= -n auto --maxprocesses 4 --dist loadfile
pytest: $(STAMP) $(ENGINES_STAMP) sandbox podman harbor chromium
	$(if $(wildcard $(HARBOR_STAMP)),AGENTRUN_HARBOR_PYTHON=$(CURDIR)/$(HARBOR)/bin/python) \
		$(BIN)/python -m agentrun.offline netns -- $(BIN)/python -m pytest $(PYTEST_WORKERS) $(PYTEST_ARGS)

# agentrun view's browser tests load the page in headless Chromium: installed from the
# distribution's packages when it is missing and this is root with apt-get (else they skip).
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get install -y -q chromium >/dev/null 2>&1 || \
		{ apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; } || \
		echo "chromium: could not be installed (the browser tests of agentrun view will skip)"; \
	else echo "chromium: not installed (the browser tests of agentrun view will skip)"; fi

# The engine compliance suite alone, for the engines named in ENGINES (default: all):
#   make compliance ENGINES=claude,codex
compliance: $(STAMP) $(ENGINES_STAMP) sandbox
	AGENTRUN_COMPLIANCE_ENGINES=$(ENGINES) $(BIN)/python -m agentrun.offline netns -- \
		$(BIN)/python -m pytest tests/compliance $(PYTEST_ARGS)

# Every benchmark, one table of ratios (docs/performance.md); BENCH_ARGS=--quick for a short run.
bench: $(STAMP)
	cd bench && PYTHONPATH=$(CURDIR) ../$(BIN)/python run.py $(BENCH_ARGS)

# Opt-in: the latest published agents beside the pinned ones; writes docs/compatibility.md.
compat: $(STAMP) $(ENGINES_STAMP)
	$(BIN)/python scripts/compatibility.py

record: $(STAMP) $(ENGINES_STAMP)
	$(BIN)/python -m agentrun.offline netns -- $(BIN)/python fixtures/record_all.py

clean:
	rm -rf $(VENV) $(HARBOR) engines/node_modules
