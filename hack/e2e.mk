# The kind end-to-end cluster (tests/e2e), included by the Makefile. The script does the
# work and caches everything under ~/.cache/weaseldb; see docs/tools.md ("kind cluster").
E2E_CLUSTER := bash hack/e2e-cluster.sh

.PHONY: e2e-cluster e2e-cluster-down e2e-images test-e2e

## A two-node kind cluster (idempotent); the last line printed is KUBECONFIG=<path>.
e2e-cluster:
	WEASELDB_TOOLS=$(TOOLS_BIN) $(E2E_CLUSTER) up

## Undo every host change `make e2e-cluster` made (caches kept; `down --purge` drops them).
e2e-cluster-down:
	WEASELDB_TOOLS=$(TOOLS_BIN) $(E2E_CLUSTER) down

## Build the project images (WeaselDB, MinIO, Spark operator) and load them into the cluster.
e2e-images:
	WEASELDB_TOOLS=$(TOOLS_BIN) $(E2E_CLUSTER) images

## Only the kind tier (make test runs it too, on one xdist worker).
test-e2e: install tools
	PATH="$(TOOLS_BIN):$$PATH" $(PY) -m pytest tests/e2e $(PYTEST_ARGS)
