"""Readers (`spec.readers`, docs/operator.md "Readers"), pure: a `Database` in, the reader
Deployment, its Service and NetworkPolicy out, and which reader retention policies are
left behind by pods that are gone.

Each reader pod runs `weaseldb reader`: it bootstraps from the newest snapshot in the
database's store, follows the client Service's `/v1/subscribe`, and keeps its position as
the retention policy `reader-POD` (through the same Service) so GC keeps what it needs.
Its state is an emptyDir: a reader that moves rebuilds from snapshot + log.
"""

from __future__ import annotations

from typing import Any

from weaseldb.core.channels import CONFIG_FILE
from weaseldb.core.types import Stage
from weaseldb_operator.resources import (
    POD_SECURITY_CONTEXT,
    SECURITY_CONTEXT,
    _metadata,
    config_name,
    container_env,
    labels,
    placement_for,
    port_of,
    security_volumes,
)
from weaseldb_operator.spec import CONFIG_DIR, Database

#: The reader's own port (`weaseldb reader --port`), on the pods and on the Service.
READER_PORT = 8090
#: Where the reader keeps its SQLite state: an emptyDir (see the module docstring).
STATE_DIR = "/var/lib/weaseldb-reader"
#: The reader pods' `app.kubernetes.io/name`: not the ring's, so no selector of the
#: database's pods (StatefulSet, Services, PDB, the leadership loop) ever counts a reader.
READER_APP = "weaseldb-reader"
#: The retention policy id of a reader pod: `reader-` + its pod name (downward API).
POLICY_PREFIX = "reader-"
POD_NAME_VAR = "POD_NAME"


def deployment_name(db: Database) -> str:
    return f"{db.name}-reader"


def service_name(db: Database) -> str:
    return f"{db.name}-readers"


def reader_selector(db: Database) -> dict[str, str]:
    return {"app.kubernetes.io/name": READER_APP, "app.kubernetes.io/instance": db.name}


def reader_labels(db: Database) -> dict[str, str]:
    return {**labels(db), **reader_selector(db), "app.kubernetes.io/component": "reader"}


def upstream_url(db: Database) -> str:
    """The client Service (resources.gateway_service_for): it follows the leader. Over
    TLS when spec.tls is on, checked against the database's CA (its config's
    `reader.upstream_ca_file`); the Service's name is in the certificate (certs.py)."""
    scheme = "https" if db.tls.enabled else "http"
    return f"{scheme}://{db.name}.{db.namespace}.svc:{port_of(db, Stage.GATEWAY)}"


def reader_command(db: Database) -> list[str]:
    """The reader's command line (ISSUE26's interface); `$(POD_NAME)` is expanded by
    Kubernetes from the container's environment. The database's config file gives the
    [reader] section's TLS and auth (spec.py `security_config`); the flags the rest."""
    return [
        "weaseldb", "reader",
        "--config", f"{CONFIG_DIR}/{CONFIG_FILE}",
        "--upstream", upstream_url(db),
        "--store", db.storage.url,
        "--state-dir", STATE_DIR,
        "--host", "0.0.0.0",
        "--port", str(READER_PORT),
        "--horizon-seconds", str(db.readers.horizon_seconds),
        "--policy-id", f"{POLICY_PREFIX}$({POD_NAME_VAR})",
    ]  # fmt: skip


def _probe(db: Database, path: str, period: int, failures: int) -> dict[str, Any]:
    https = {"scheme": "HTTPS"} if db.tls.enabled else {}
    return {
        "httpGet": {"path": path, "port": READER_PORT} | https,
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": 2,
    }


def reader_container(db: Database) -> dict[str, Any]:
    """`weaseldb reader` with the store's credentials as the ring containers get them.
    Ready once bootstrapped and following (/readyz); a snapshot load may take long, so
    liveness waits for /healthz to answer first (the startup probe)."""
    env = container_env(db)
    pod_name = {"name": POD_NAME_VAR, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    return {
        "name": "reader",
        "image": db.image,
        "imagePullPolicy": db.image_pull_policy,
        "command": reader_command(db),
        "ports": [{"name": "reader", "containerPort": READER_PORT}],
        "startupProbe": _probe(db, "/healthz", period=1, failures=600),
        "readinessProbe": _probe(db, "/readyz", period=2, failures=2),
        "livenessProbe": _probe(db, "/healthz", period=10, failures=3),
        "resources": dict(db.readers.resources),
        "securityContext": SECURITY_CONTEXT,
        "volumeMounts": [
            {"name": "state", "mountPath": STATE_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            *security_volumes(db, reader=True)[1],
        ],
        **env,
        "env": [*env["env"], pod_name],
    }


def reader_deployment_for(db: Database) -> dict[str, Any] | None:
    """The readers, or None with `replicas: 0`. A rolling update starts a new reader
    before it stops an old one (it must bootstrap before it is Ready)."""
    if db.readers.replicas == 0:
        return None
    placement = db.readers.placement
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**_metadata(db, deployment_name(db)), "labels": reader_labels(db)},
        "spec": {
            "replicas": db.readers.replicas,
            "selector": {"matchLabels": reader_selector(db)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
            },
            "template": {
                "metadata": {
                    "labels": {**placement.pod_labels, **reader_labels(db)},
                    "annotations": dict(placement.pod_annotations),
                },
                "spec": {
                    "containers": [reader_container(db)],
                    "volumes": [
                        {"name": "state", "emptyDir": {}},
                        {"name": "tmp", "emptyDir": {}},
                        {"name": "config", "configMap": {"name": config_name(db)}},
                        *security_volumes(db, reader=True)[0],
                    ],
                    "securityContext": POD_SECURITY_CONTEXT,
                    "enableServiceLinks": False,
                    **placement_for(placement, reader_selector(db)),
                },
            },
        },
    }


def readers_service_for(db: Database) -> dict[str, Any] | None:
    """Reads and re-served subscriptions: every Ready reader (each serves any version
    it has applied; a read above it waits, see docs/reader.md)."""
    if db.readers.replicas == 0:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**_metadata(db, service_name(db)), "labels": reader_labels(db)},
        "spec": {
            "type": "ClusterIP",
            "selector": reader_selector(db),
            "ports": [{"name": "http", "port": READER_PORT, "targetPort": "reader"}],
        },
    }


def readers_network_policy_for(db: Database) -> dict[str, Any] | None:
    """Beside the database's NetworkPolicy (door.py): the reader port admits anyone, as
    the gateway port does; nothing else of a reader pod is reachable. Egress is not
    restricted (the readers reach the client Service and the store)."""
    if db.readers.replicas == 0:
        return None
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {**_metadata(db, service_name(db)), "labels": reader_labels(db)},
        "spec": {
            "podSelector": {"matchLabels": reader_selector(db)},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"protocol": "TCP", "port": READER_PORT}]}],
        },
    }


def readers_pdb_for(db: Database) -> dict[str, Any] | None:
    """A node drain evicts one reader at a time, so the readers' Service never empties by
    choice; none for a single reader (it would block every drain). Any reader serves any
    read, so one down costs capacity only."""
    if db.readers.replicas < 2:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {**_metadata(db, service_name(db)), "labels": reader_labels(db)},
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": reader_selector(db)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def reader_children(db: Database) -> list[dict[str, Any]]:
    """The Service, the Deployment and the PDB (what the replica count calls for), in
    apply order."""
    built = [readers_service_for(db), reader_deployment_for(db), readers_pdb_for(db)]
    return [obj for obj in built if obj is not None]


def reader_leftovers(db: Database) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of what readers leave when `replicas` drops: the PDB below
    two, everything at 0."""
    pdb = (
        [] if db.readers.replicas >= 2 else [("policy/v1", "PodDisruptionBudget", service_name(db))]
    )
    if db.readers.replicas > 0:
        return pdb
    return [
        ("apps/v1", "Deployment", deployment_name(db)),
        ("v1", "Service", service_name(db)),
        ("networking.k8s.io/v1", "NetworkPolicy", service_name(db)),
        *pdb,
    ]


def policy_owner(db: Database, policy_id: str) -> str | None:
    """The pod a retention policy id belongs to, when it is one of this database's
    readers' (`reader-NAME-reader-...`); None for any other policy, which is never
    touched."""
    pod = policy_id.removeprefix(POLICY_PREFIX)
    if pod == policy_id or not pod.startswith(f"{deployment_name(db)}-"):
        return None
    return pod


def stale_policies(db: Database, policy_ids: list[str], pods: list[str]) -> list[str]:
    """This database's reader policies whose pod no longer exists: nothing advances them
    again, and each would hold GC back for ever. `policy_ids` must be listed BEFORE
    `pods`: a policy is PUT by a process in a pod that existed when it was written, so a
    pod created after the pod list cannot own a policy in the earlier policy list."""
    alive = set(pods)
    return sorted(
        p for p in policy_ids if (owner := policy_owner(db, p)) is not None and owner not in alive
    )
