"""Pure builders: a `Database` in, Kubernetes objects (plain dicts) out.

Nothing here talks to a cluster; the reconciler applies what these return with
server-side apply, so applying the same output twice changes nothing.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from weaseldb.core.channels import CONFIG_FILE
from weaseldb.core.types import Stage
from weaseldb_operator.spec import (
    API_VERSION,
    CA_CRT,
    CLIENT_CA_DIR,
    CONFIG_DIR,
    GRANTS_DIR,
    GRANTS_KEY,
    INTERNAL_DIR,
    KIND,
    READER_TOKEN_KEY,
    RUN_DIR,
    TLS_DIR,
    Database,
    Placement,
)

ROLE_LABEL = "weaseldb.io/role"
LEADER, STANDBY = "leader", "standby"
CONFIG_HASH = "weaseldb.io/config-hash"
#: Set by the StatefulSet controller on each pod: the template revision it was made from.
REVISION_LABEL = "controller-revision-hash"
USER_ID = 10001


def selector_labels(db: Database) -> dict[str, str]:
    return {"app.kubernetes.io/name": "weaseldb", "app.kubernetes.io/instance": db.name}


def labels(db: Database) -> dict[str, str]:
    return {**selector_labels(db), "app.kubernetes.io/managed-by": "weaseldb-operator"}


def owner_reference(db: Database) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": db.name,
        "uid": db.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(db: Database, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": db.namespace,
        "labels": labels(db),
        "ownerReferences": [owner_reference(db)],
    }


def config_name(db: Database) -> str:
    """Named after its content: a configuration change is a new ConfigMap and a new pod
    template revision, so a pod sees exactly the configuration it was rolled with."""
    return f"{db.name}-config-{config_hash(db)[:10]}"


def headless_name(db: Database) -> str:
    return f"{db.name}-pods"


def config_json(db: Database) -> str:
    return db.config.model_dump_json(indent=2)


def config_hash(db: Database) -> str:
    return hashlib.sha256(config_json(db).encode()).hexdigest()[:16]


def configmap_for(db: Database) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(db, config_name(db)),
        "data": {CONFIG_FILE: config_json(db)},
        "immutable": True,
    }


def port_of(db: Database, stage: Stage) -> int:
    return db.config.ports.of(stage)


def _probe(db: Database, stage: Stage, path: str, period: int, failures: int) -> dict[str, Any]:
    # The gateway's port is the client port: TLS when spec.tls is on (the kubelet does not
    # verify the certificate of an HTTPS probe). The other stages' ports stay plain.
    https = stage == Stage.GATEWAY and db.tls.enabled
    return {
        "httpGet": {"path": path, "port": port_of(db, stage)}
        | ({"scheme": "HTTPS"} if https else {}),
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": 2,
    }


SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


POD_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": USER_ID,
    "runAsGroup": USER_ID,
    "fsGroup": USER_ID,
    "seccompProfile": {"type": "RuntimeDefault"},
}


POD_NAME_ENV = {
    "name": "WEASELDB_POD_NAME",
    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
}


def container_env(db: Database) -> dict[str, Any]:
    env: dict[str, Any] = {"env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}, POD_NAME_ENV]}
    if db.storage.credentials_secret:
        env["envFrom"] = [{"secretRef": {"name": db.storage.credentials_secret}}]
    return env


def internal_secret_name(db: Database) -> str:
    """The operator's Secret of a database with auth (tlssecrets.py): its own token, the
    readers' token and the grants file naming both."""
    return f"{db.name}-operator-token"


def _secret_volume(name: str, secret: str, items: dict[str, str] | None = None) -> dict[str, Any]:
    source: dict[str, Any] = {"secretName": secret, "defaultMode": 0o440}
    if items:
        source["items"] = [{"key": k, "path": p} for k, p in items.items()]
    return {"name": name, "secret": source}


def security_volumes(
    db: Database, reader: bool = False
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The volumes and read-only mounts of `spec.tls` and `spec.auth` for the gateway
    containers (`reader`: the reader's). Each container gets only the keys it reads: the
    gateway the operator's grants file, a reader its own upstream token."""
    volumes: list[tuple[dict[str, Any], str]] = []
    if db.tls.enabled:
        volumes.append((_secret_volume("tls", db.tls_secret), TLS_DIR))
        if db.tls.client_ca_secret_name:
            ca = _secret_volume("client-ca", db.tls.client_ca_secret_name, {CA_CRT: CA_CRT})
            volumes.append((ca, CLIENT_CA_DIR))
    if db.auth.enabled:
        grants = {GRANTS_KEY: GRANTS_KEY}
        volumes.append((_secret_volume("grants", db.auth.grants_secret_name, grants), GRANTS_DIR))
        own = {READER_TOKEN_KEY: READER_TOKEN_KEY} if reader else grants
        volumes.append((_secret_volume("internal", internal_secret_name(db), own), INTERNAL_DIR))
    mounts = [{"name": v["name"], "mountPath": path, "readOnly": True} for v, path in volumes]
    return [v for v, _ in volumes], mounts


def _volume_mounts() -> list[dict[str, Any]]:
    return [
        {"name": "run", "mountPath": RUN_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
    ]


def stage_container(db: Database, stage: Stage, worker: int = 0) -> dict[str, Any]:
    """One ring container: `weaseldb service STAGE` on the rendered config."""
    name = stage if worker == 0 else f"{stage}-{worker}"
    container: dict[str, Any] = {
        "name": name,
        "image": db.image,
        "imagePullPolicy": db.image_pull_policy,
        "command": ["weaseldb", "service", stage, "--config", f"{CONFIG_DIR}/{CONFIG_FILE}"],
        # Liveness only once the process answers: ten Python processes importing at once
        # on a small node take longer than liveness' 30 s of patience (seen on kind).
        # Startup and readiness every second: a promoted leader's gateway joins the
        # Service's endpoints within a second of serving (part of the failover time).
        "startupProbe": _probe(db, stage, "/healthz", period=1, failures=180),
        "readinessProbe": _probe(db, stage, "/readyz", period=1, failures=2),
        "livenessProbe": _probe(db, stage, "/healthz", period=10, failures=3),
        "resources": db.container_resources(stage),
        "securityContext": SECURITY_CONTEXT,
        "volumeMounts": _volume_mounts(),
        **container_env(db),
    }
    if stage == Stage.GATEWAY:
        container["command"] += ["--worker", str(worker)]
        container["volumeMounts"] += security_volumes(db)[1]
    if worker == 0:
        container["ports"] = [{"name": stage, "containerPort": port_of(db, stage)}]
    return container


def containers_for(db: Database) -> list[dict[str, Any]]:
    workers = range(db.config.gateway.workers)
    gateways = [stage_container(db, Stage.GATEWAY, w) for w in workers]
    return gateways + [stage_container(db, stage) for stage in Stage if stage != Stage.GATEWAY]


def run_volume(db: Database) -> dict[str, Any]:
    """The emptyDir the containers share. With `ring: shm` it is memory-backed: the rings
    are written at every frame, and on disk the kernel would write them back for nothing.
    Their pages count toward the memory of the container that writes them (4 MiB per
    ring: one by each gateway worker and by the sequencer, one per worker plus one by the
    resolver, one per worker by the persister)."""
    return {"medium": "Memory"} if db.config.ring == "shm" else {}


#: The node label the kubelet sets to its CPU architecture.
ARCH_LABEL = "kubernetes.io/arch"


def pod_spec(db: Database) -> dict[str, Any]:
    spec = {
        "containers": containers_for(db),
        "volumes": [
            {"name": "run", "emptyDir": run_volume(db)},
            {"name": "tmp", "emptyDir": {}},
            {"name": "config", "configMap": {"name": config_name(db)}},
            *security_volumes(db)[0],
        ],
        "securityContext": POD_SECURITY_CONTEXT,
        "terminationGracePeriodSeconds": int(
            db.config.drain_timeout_s + db.config.gateway.stop_linger_s + 15
        ),
        "enableServiceLinks": False,
        **placement_for(db.placement, selector_labels(db)),
    }
    if db.config.ring == "shm":
        # The shm ring relies on x86-64's store order and refuses to start elsewhere: the
        # scheduler keeps such pods off other nodes rather than the kubelet crash-looping.
        spec["nodeSelector"] = {**spec.get("nodeSelector", {}), ARCH_LABEL: "amd64"}
    return spec


def statefulset_replicas(db: Database, leader_pod: str | None) -> int:
    """`spec.replicas`, except while the leader holds an ordinal a scale-down would remove:
    then the pods stay until the operator has switched over to a kept standby (leadership
    `switchover`), so scaling down never takes the leader's pod from under it."""
    _, _, number = (leader_pod or "").rpartition("-")
    leader_ordinal = int(number) if number.isdigit() else -1
    return max(db.replicas, leader_ordinal + 1)


#: The default anti-affinity spreads a database's pods over nodes: a standby on the
#: leader's node survives the leader's crash but not its node's.
NODE_TOPOLOGY = "kubernetes.io/hostname"


def default_anti_affinity(placement: Placement, selector: dict[str, str]) -> dict[str, Any] | None:
    """`antiAffinity` as a podAntiAffinity over the pods `selector` matches."""
    term = {"labelSelector": {"matchLabels": selector}, "topologyKey": NODE_TOPOLOGY}
    if placement.anti_affinity == "required":
        return {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    if placement.anti_affinity == "preferred":
        weighted = {"weight": 100, "podAffinityTerm": term}
        return {"preferredDuringSchedulingIgnoredDuringExecution": [weighted]}
    return None


def affinity_for(placement: Placement, selector: dict[str, str]) -> dict[str, Any]:
    """`affinity` as given, plus the default podAntiAffinity unless it has its own."""
    given, default = placement.affinity, default_anti_affinity(placement, selector)
    if default is None or "podAntiAffinity" in given:
        return dict(given)
    return {**given, "podAntiAffinity": default}


def placement_for(placement: Placement, selector: dict[str, str]) -> dict[str, Any]:
    """The pod spec's placement fields; unset ones are left out. A spread constraint
    without a labelSelector counts the pods `selector` matches (without one it counts
    none). `selector`: the database's ring pods, or its readers (readers.py)."""
    p = placement
    fields = {
        "affinity": affinity_for(p, selector),
        "topologySpreadConstraints": [
            {"labelSelector": {"matchLabels": selector}} | c for c in p.topology_spread_constraints
        ],
        "nodeSelector": dict(p.node_selector),
        "tolerations": list(p.tolerations),
        "priorityClassName": p.priority_class_name,
        "serviceAccountName": p.service_account_name,
        "imagePullSecrets": [{"name": name} for name in p.image_pull_secrets],
    }
    # The pods never call the Kubernetes API: no token to steal from a pod.
    return {"automountServiceAccountToken": False} | {k: v for k, v in fields.items() if v}


def statefulset_for(db: Database, leader_pod: str | None = None) -> dict[str, Any]:
    """Pods that each run the whole ring; the config hash in the template rolls them when
    the configuration changes. `leader_pod`: the pod the newest claim names (see
    `statefulset_replicas`)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _metadata(db, db.name),
        "spec": {
            "replicas": statefulset_replicas(db, leader_pod),
            "serviceName": headless_name(db),
            "podManagementPolicy": "Parallel",
            # The operator deletes outdated pods itself, standbys first (rollout.py): the
            # StatefulSet's rolling update would wait for a standby to become Ready.
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": selector_labels(db)},
            "template": {
                "metadata": {
                    "labels": {**db.placement.pod_labels, **labels(db)},
                    "annotations": {**db.placement.pod_annotations, CONFIG_HASH: config_hash(db)},
                },
                "spec": pod_spec(db),
            },
        },
    }


def gateway_service_for(db: Database) -> dict[str, Any]:
    """The client endpoint: selects only the pod the operator labelled leader, Ready or
    not. The label is what routes: a new leader takes clients the moment it serves, not a
    readiness probe and an endpoint update later, and while it recovers (or a dead
    leader still carries the label for a pass) a client is refused at once, 503
    not_leader or a reset, instead of its connection attempts being dropped for want of
    a Ready endpoint and retried on TCP's backoff (1, 3, 7 s...)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(db, db.name),
        "spec": {
            "type": db.gateway_service_type,
            "publishNotReadyAddresses": True,
            "selector": {**selector_labels(db), ROLE_LABEL: LEADER},
            "ports": [
                {"name": "http", "port": port_of(db, Stage.GATEWAY), "targetPort": Stage.GATEWAY}
            ],
        },
    }


def headless_service_for(db: Database) -> dict[str, Any]:
    """Stable pod DNS names and every pod's ports, Ready or not (standbys never are)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(db, headless_name(db)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(db),
            "ports": [{"name": s, "port": port_of(db, s), "targetPort": s} for s in Stage],
        },
    }


def pdb_for(db: Database) -> dict[str, Any] | None:
    """At most one pod down by choice at a time; none for a single replica (it would block
    every node drain). Standbys are never Ready, so they may always be evicted."""
    if db.replicas < 2:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(db, db.name),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(db)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def children_for(db: Database, leader_pod: str | None = None) -> list[dict[str, Any]]:
    """Everything a database owns, in apply order."""
    built = [
        configmap_for(db),
        headless_service_for(db),
        gateway_service_for(db),
        statefulset_for(db, leader_pod),
        pdb_for(db),
    ]
    return [obj for obj in built if obj is not None]


def canonical(obj: dict[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True)
