"""The admin door of a database's pods: who may ask the persister to promote, and who
may reach which port at all (docs/operator.md, "The admin door").

Pure builders, like resources.py: the operator's identity in (its admin token, its
namespace and pod labels, read once from its environment), Kubernetes objects out.

- Secret `NAME-admin-token` in the database's namespace: a copy of the operator's token.
  A pod can mount Secrets of its own namespace only, and the operator may watch every
  namespace, so each database gets its copy, owned by the WeaselDB (it goes with it).
- The persister container mounts it and reads it through `WEASELDB_ADMIN_TOKEN_FILE`
  (weaseldb.core.config `admin_token_file`); `POST /promote` then asks for it.
- NetworkPolicy `NAME`: the gateway port admits anyone; the persister port only the
  operator's pods; the other ports nobody from outside the pod (the stages reach each other
  over Unix sockets and 127.0.0.1, which no NetworkPolicy filters), except the metrics
  scrapers the chart names (`monitoring.scrapeFrom`), which reach every stage's port.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from weaseldb.core.types import Stage
from weaseldb_operator.readers import readers_network_policy_for
from weaseldb_operator.resources import _metadata, port_of, selector_labels
from weaseldb_operator.spec import Database

#: The operator's own token file (the chart mounts its Secret there); the persister reads
#: the same variable (weaseldb.core.config.ENVIRONMENT).
TOKEN_FILE_ENV = "WEASELDB_ADMIN_TOKEN_FILE"
#: The operator's namespace and pod labels (downward API and the chart): the
#: NetworkPolicy admits the operator's pods by them.
NAMESPACE_ENV = "WEASELDB_OPERATOR_NAMESPACE"
POD_LABELS_ENV = "WEASELDB_OPERATOR_POD_LABELS"
SECRET_KEY = "token"
#: Where the persister container finds the token (a directory of its own: a Secret volume
#: replaces the directory it is mounted on).
TOKEN_DIR = "/etc/weaseldb-admin"
VOLUME = "admin-token"
#: NetworkPolicy peers (a JSON list; the chart's monitoring.scrapeFrom) admitted to every
#: stage's port, for its /metrics: without them a scrape reaches the gateway's only.
SCRAPERS_ENV = "WEASELDB_METRICS_SCRAPERS"
#: Set by the API server on every namespace (Kubernetes 1.22+).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Operator:
    """What the operator knows of itself. No token: the pods run without one (as before
    the door); no namespace or labels: no NetworkPolicy (it could not admit the operator)."""

    token: bytes | None = None
    namespace: str = ""
    pod_labels: dict[str, str] = field(default_factory=dict)
    #: Who scrapes metrics (NetworkPolicyPeers), admitted to every stage's port.
    scrapers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def admin_headers(self) -> dict[str, str]:
        """Headers of a request to an admin endpoint (`POST /promote`)."""
        return {"Authorization": f"Bearer {self.token.decode()}"} if self.token else {}

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None) -> Operator:
        env = dict(os.environ if environ is None else environ)
        path = env.get(TOKEN_FILE_ENV, "")
        token = Path(path).read_bytes().strip() if path else b""
        labels = json.loads(env.get(POD_LABELS_ENV) or "{}")
        scrapers = json.loads(env.get(SCRAPERS_ENV) or "[]")
        return cls(token or None, env.get(NAMESPACE_ENV, ""), dict(labels), list(scrapers))


def secret_name(db: Database) -> str:
    return f"{db.name}-admin-token"


def secret_for(db: Database, operator: Operator) -> dict[str, Any] | None:
    if operator.token is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(db, secret_name(db)),
        "type": "Opaque",
        "data": {SECRET_KEY: base64.b64encode(operator.token).decode()},
    }


def guard_statefulset(statefulset: dict[str, Any], db: Database) -> dict[str, Any]:
    """The StatefulSet with the Secret mounted into the persister container, which reads
    it through WEASELDB_ADMIN_TOKEN_FILE. Only the persister serves an admin endpoint."""
    pod = statefulset["spec"]["template"]["spec"]
    pod["volumes"] = [
        *pod["volumes"],
        {"name": VOLUME, "secret": {"secretName": secret_name(db), "defaultMode": 0o440}},
    ]
    for container in pod["containers"]:
        if container["name"] == Stage.PERSISTER:
            container["volumeMounts"] = [
                *container["volumeMounts"],
                {"name": VOLUME, "mountPath": TOKEN_DIR, "readOnly": True},
            ]
            token_file = {"name": TOKEN_FILE_ENV, "value": f"{TOKEN_DIR}/{SECRET_KEY}"}
            container["env"] = [*container["env"], token_file]
    return statefulset


def network_policy_for(db: Database, operator: Operator) -> dict[str, Any] | None:
    """Ingress to the database's pods: the gateway port from anywhere, the persister port
    from the operator's pods only (its /readyz tells a standby, its /promote fails over),
    every stage's port from the metrics scrapers (/promote still asks for the admin token),
    nothing else. The kubelet's probes come from the node, which most network plugins
    (Calico, Cilium) let through whatever the policy says."""
    if not operator.namespace or not operator.pod_labels:
        return None
    the_operator = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: operator.namespace}},
        "podSelector": {"matchLabels": dict(operator.pod_labels)},
    }
    ingress: list[dict[str, Any]] = [
        {"ports": [{"protocol": "TCP", "port": port_of(db, Stage.GATEWAY)}]},
        {
            "from": [the_operator],
            "ports": [{"protocol": "TCP", "port": port_of(db, Stage.PERSISTER)}],
        },
    ]
    if operator.scrapers:
        others = [{"protocol": "TCP", "port": port_of(db, s)} for s in Stage if s != Stage.GATEWAY]
        ingress.append({"from": list(operator.scrapers), "ports": others})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(db, db.name),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(db)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def secured(
    db: Database, operator: Operator, children: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """`children` (resources.children_for, readers.reader_children) behind the door: the
    Secret before the StatefulSet that mounts it, the StatefulSet guarded, the
    NetworkPolicies (the database's, the readers') last."""
    secret = secret_for(db, operator)
    if secret is None:
        out = list(children)
    else:
        guarded = [guard_statefulset(c, db) if c["kind"] == "StatefulSet" else c for c in children]
        out = [secret, *guarded]
    policy = network_policy_for(db, operator)
    if policy is None:
        return out
    readers = readers_network_policy_for(db)  # only beside the database's own
    return [*out, policy] if readers is None else [*out, policy, readers]
