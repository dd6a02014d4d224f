# Kubernetes targets, included by the Makefile. See docs/operator.md.
IMAGE_REPO ?= weaseldb
IMAGE_TAG ?= dev
DOCKER ?= docker
DEV_CLUSTER_DIR ?= $(CURDIR)/.dev-cluster

.PHONY: images image-weaseldb dev-cluster dev-cluster-down helm-lint

## Build the container images (one image serves the services and the operator).
images: image-weaseldb

image-weaseldb:
	$(DOCKER) build -t $(IMAGE_REPO):$(IMAGE_TAG) -f Dockerfile .

## A local control plane (etcd + kube-apiserver, no kubelet) with the CRDs installed;
## the last line printed is KUBECONFIG=<path>.
dev-cluster: install
	WEASELDB_TOOLS=$(TOOLS_BIN) PYTHON=$(PY) bash hack/dev-cluster.sh up $(DEV_CLUSTER_DIR)

dev-cluster-down:
	bash hack/dev-cluster.sh down $(DEV_CLUSTER_DIR)

# The chart (its values checked by values.schema.json) and the alerts it ships.
helm-lint:
	$(TOOLS_BIN)/helm lint --strict charts/weaseldb
	$(TOOLS_BIN)/promtool check rules charts/weaseldb/monitoring/alerts.yaml
