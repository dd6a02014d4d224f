"""`weaseldb operator [--namespace NS]`: run the operator against the current kubeconfig
(or the pod's service account in a cluster)."""

from __future__ import annotations

import os

import kopf

#: When set (the chart sets http://0.0.0.0:8080/healthz), kopf serves a liveness probe there.
#: Its metrics: weaseldb_operator.metrics.METRICS_ENV.
HEALTH_ENV = "WEASELDB_OPERATOR_HEALTH"


def run_operator(namespace: str | None = None) -> int:
    from weaseldb_operator import handlers, metrics  # noqa: F401 - importing handlers registers them

    address = os.environ.get(metrics.METRICS_ENV)
    if address:
        metrics.serve(address)

    memo = kopf.Memo(namespace=namespace)
    kopf.run(
        registry=kopf.get_default_registry(),
        standalone=True,
        clusterwide=namespace is None,
        namespaces=[namespace] if namespace else [],
        liveness_endpoint=os.environ.get(HEALTH_ENV) or None,
        memo=memo,
    )
    return 0
