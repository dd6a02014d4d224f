# WeaselDB developer entry points. `make run` and `make test` are all a fresh clone needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TOOLS_BIN ?= $(HOME)/.cache/weaseldb/bin
PYTEST_ARGS ?=
# P7 (compaction): operations in the benchmark log.
COMPACTION_OPS ?= 10000000
# Point-in-time restore: operations in the restored history.
RESTORE_OPS ?= 10000000
# P13 (soak): seconds at saturation (`make bench SOAK_SECONDS=120` for a short check).
SOAK_SECONDS ?= 600

.PHONY: install run test test-fast lint format tools bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## Run WeaselDB in the foreground on 127.0.0.1:8080, data under ./data.
run: install
	$(VENV)/bin/weaseldb up --data-dir ./data --port 8080 --run-dir ./run

## The whole suite: unit, component, system and kind tiers (slow ones included). The kind
## tier (tests/e2e) runs after the rest, its cluster prepared meanwhile (hack/test.sh).
test: install tools
	PATH="$(TOOLS_BIN):$$PATH" WEASELDB_TOOLS=$(TOOLS_BIN) bash hack/test.sh $(PY) $(PYTEST_ARGS)

## Everything but the slow system tier, for the edit-test loop.
test-fast: install
	$(PY) -m pytest -n 2 -m "not slow" $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(MAKE) --no-print-directory helm-lint

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

## Build MinIO, etcd, kube-apiserver, kubectl and helm once into $(TOOLS_BIN), and fetch
## the S3A jars for the compaction job into ~/.cache/weaseldb/s3a-jars (needs the venv).
tools: install
	WEASELDB_TOOLS=$(TOOLS_BIN) WEASELDB_PYTHON=$(abspath $(PY)) bash hack/tools.sh

## Benchmarks (performance.md): JSON and PNG under bench/results/, then the README table.
bench: install tools
	PATH="$(TOOLS_BIN):$$PATH" $(PY) bench/bench_resolver.py --out bench/results/resolver.json
	PATH="$(TOOLS_BIN):$$PATH" $(PY) bench/bench_commit.py
	PATH="$(TOOLS_BIN):$$PATH" $(PY) bench/bench_security.py
	PATH="$(TOOLS_BIN):$$PATH" $(PY) bench/bench_ring.py
	PATH="$(TOOLS_BIN):$$PATH" $(PY) bench/bench_subscribe.py
	PATH="$(TOOLS_BIN):$$PATH" $(PY) bench/bench_readers.py
	PATH="$(TOOLS_BIN):$$PATH" $(PY) bench/bench_recovery.py --store dir --counts 10,1000000
	PATH="$(TOOLS_BIN):$$PATH" $(PY) bench/bench_stage_restart.py
	PATH="$(TOOLS_BIN):$$PATH" $(PY) bench/bench_compaction.py --operations $(COMPACTION_OPS)
	PATH="$(TOOLS_BIN):$$PATH" $(PY) bench/bench_restore.py --operations $(RESTORE_OPS)
	PATH="$(TOOLS_BIN):$$PATH" $(PY) bench/bench_soak.py --seconds $(SOAK_SECONDS)
	PATH="$(TOOLS_BIN):$$PATH" WEASELDB_TOOLS=$(TOOLS_BIN) $(PY) bench/bench_failover.py --rounds 5
	$(PY) bench/report.py

# Kubernetes targets (operator image, dev-cluster, ...) live with the operator.
-include operator/operator.mk
# The kind cluster of the e2e tier (e2e-cluster, e2e-cluster-down, e2e-images, test-e2e).
-include hack/e2e.mk

clean:
	rm -rf $(VENV) run data .pytest_cache .mypy_cache .ruff_cache
