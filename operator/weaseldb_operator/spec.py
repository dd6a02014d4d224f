"""A WeaselDB resource as the operator sees it: the custom resource's spec, read once into
frozen dataclasses, and the pipeline configuration the pods get.

Pure: no kopf, no Kubernetes client. The API server already applied the CRD schema's
defaults and ranges; what it cannot check (the configuration as a whole) is checked here
by the core's own validation, so a spec the services would refuse is refused up front.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

from croniter import croniter

from weaseldb.core.config import Config, ConfigError, build
from weaseldb.core.durations import parse_duration
from weaseldb.core.sizing import STAGES_WITH_IDS, memory_limit_mib
from weaseldb.core.types import Stage

API_GROUP = "weaseldb.io"
API_VERSION = f"{API_GROUP}/v1alpha1"
KIND = "WeaselDB"
PLURAL = "weaseldbs"

#: Where the pods mount the shared emptyDir (ring sockets, rendered config); kept short
#: because ipc:// socket paths are limited to about 107 bytes.
RUN_DIR = "/run/weasel"
#: Where the ConfigMap is mounted. The pod name reaches the services through the
#: WEASELDB_POD_NAME environment variable (downward API), not through the file.
CONFIG_DIR = "/etc/weaseldb"

#: spec section -> (config section, {camelCase field: config field})
_SECTIONS: dict[str, tuple[str, dict[str, str]]] = {
    "pipeline": (
        "persister",
        {
            "batchTimeoutMs": "batch_timeout_ms",
            "batchSizeThreshold": "batch_size_threshold",
            "maxInFlightRequests": "max_in_flight_requests",
            "targetPoolSize": "target_pool_size",
            "maxRetryAttempts": "max_retry_attempts",
            "retryBaseDelayMs": "retry_base_delay_ms",
        },
    ),
    "resolver": (
        "resolver",
        {
            "windowSeconds": "window_seconds",
            "windowVersions": "window_versions",
        },
    ),
    "gateway": (
        "gateway",
        {
            "maxBodyBytes": "max_body_bytes",
            "maxKeyBytes": "max_key_bytes",
            "maxValueBytes": "max_value_bytes",
            "maxItems": "max_items",
            "commitTimeoutSeconds": "commit_timeout_s",
            "workers": "workers",
        },
    ),
}


class SpecError(ValueError):
    """The spec cannot be turned into a working database; the message says which field."""


@dataclass(frozen=True)
class Storage:
    bucket: str
    prefix: str
    endpoint: str = ""
    region: str = "us-east-1"
    credentials_secret: str = ""

    @property
    def url(self) -> str:
        """The store URL the services and the operator open (see weaseldb.core.store)."""
        return self.url_with()

    def url_with(self, credentials: str = "") -> str:
        """The store URL; with `credentials=NAME` when given, so a process that opens two
        stores (backup, restore) reads each one's keys from NAME_ACCESS_KEY_ID and
        NAME_SECRET_ACCESS_KEY (weaseldb.runtime.stores.named_credentials)."""
        query = {"endpoint": self.endpoint, "region": self.region, "credentials": credentials}
        return (
            f"s3://{self.bucket}/{self.prefix}?{urlencode({k: v for k, v in query.items() if v})}"
        )

    @property
    def location(self) -> str:
        """Where the data is, without endpoint or keys (for messages)."""
        return f"s3://{self.bucket}/{self.prefix}"

    def overlaps(self, other: Storage) -> bool:
        """Same endpoint and bucket, and one prefix equal to the other or nested in it by
        whole path segments: "db" and "db/x" overlap, "db" and "db2" do not."""
        mine = (self.endpoint.rstrip("/").lower(), self.bucket)
        if mine != (other.endpoint.rstrip("/").lower(), other.bucket):
            return False
        first, second = _segments(self.prefix), _segments(other.prefix)
        shorter = min(len(first), len(second))
        return first[:shorter] == second[:shorter]


def _segments(prefix: str) -> list[str]:
    return [s for s in prefix.split("/") if s]


@dataclass(frozen=True)
class SparkResources:
    cores: int = 1
    memory: str = "1g"
    core_request: str | None = None  # the pod's CPU request when less than `cores`


@dataclass(frozen=True)
class Compaction:
    """`spec.compaction`: when to run the Spark job and with what (docs/operator.md)."""

    image: str
    schedule: str | None = None  # cron, five fields, UTC
    batch_threshold: int | None = None  # run when this many batches follow the snapshot
    executors: int = 2
    driver: SparkResources = SparkResources()
    executor: SparkResources = SparkResources()
    gc: bool = True
    service_account: str = "spark"
    ttl_seconds: int = 86400
    # Supervision (supervision.plan): a run not finished this long after its creation fails;
    # failures in a row wait backoff * 2^(n-1) seconds, at most max_backoff, before the
    # next scheduled or threshold run; suspend stops those runs.
    deadline_seconds: int = 7200
    backoff_seconds: int = 60
    max_backoff_seconds: int = 3600
    suspend: bool = False


@dataclass(frozen=True)
class KeepHistory:
    """`spec.backup.keepHistory`: how far back the database's own log stays restorable
    (GC keeps batches inside it); passed to the compaction job (`--keep-history-*`)."""

    seconds: int | None = None
    versions: int | None = None

    def arguments(self) -> list[str]:
        out = []
        if self.seconds is not None:
            out += ["--keep-history-seconds", str(self.seconds)]
        if self.versions is not None:
            out += ["--keep-history-versions", str(self.versions)]
        return out


@dataclass(frozen=True)
class Backup:
    """`spec.backup` (docs/operator.md "Backup and recovery"): `weaseldb backup` into
    `destination` on `schedule`, as a CronJob."""

    destination: Storage
    schedule: str
    keep_history: KeepHistory = KeepHistory()
    suspend: bool = False


@dataclass(frozen=True)
class Recovery:
    """`spec.bootstrap.recovery`: the database starts as `weaseldb restore` of `source` at
    `target_version` or `target_time` (neither: the newest restorable version, a clone)."""

    source: Storage
    image: str
    target_version: int | None = None
    target_time: str | None = None
    driver_memory: str = "1g"
    resources: dict[str, Any] = field(default_factory=dict)

    def target_arguments(self) -> list[str]:
        if self.target_version is not None:
            return ["--to-version", str(self.target_version)]
        if self.target_time is not None:
            return ["--to-time", self.target_time]
        return []


#: Pod label keys the operator owns: its selector (and managed-by) labels, and every key
#: under its own prefix (the role label the gateway Service selects on, the config hash).
#: `podLabels` and `podAnnotations` may not set them: a selector label changed in the
#: template would orphan the pods, and a role label set at creation would route clients to
#: a standby. The CRD refuses them with a CEL rule (at `kubectl apply`); `placement_from`
#: applies the same rule, as `compaction_from` does for its own, so a body that reached the
#: operator without that rule is refused with the same message.
RESERVED_POD_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
)
OPERATOR_KEY_PREFIX = f"{API_GROUP}/"
ANTI_AFFINITY = ("preferred", "required", "none")


@dataclass(frozen=True)
class Placement:
    """Where and as whom the pods run (docs/operator.md "Placement"): the pod spec fields
    of the same names, passed to the pod template as given."""

    anti_affinity: str = "preferred"  # the default podAntiAffinity across nodes
    affinity: dict[str, Any] = field(default_factory=dict)
    topology_spread_constraints: tuple[dict[str, Any], ...] = ()
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()
    priority_class_name: str = ""
    service_account_name: str = ""
    pod_labels: dict[str, str] = field(default_factory=dict)
    pod_annotations: dict[str, str] = field(default_factory=dict)
    image_pull_secrets: tuple[str, ...] = ()


@dataclass(frozen=True)
class Readers:
    """`spec.readers` (docs/operator.md "Readers"): `weaseldb reader` pods beside the
    database, and where they run. Placement has the shape of the database's own; the
    database's pull secrets, priority class, pod labels and annotations apply too."""

    replicas: int = 0
    horizon_seconds: int = 300
    resources: dict[str, Any] = field(default_factory=dict)
    placement: Placement = Placement()


#: Where the pods mount the secrets of `spec.tls` and `spec.auth` (docs/operator.md
#: "Security"); each its own directory, as a Secret volume replaces the directory it is on.
TLS_DIR = "/etc/weaseldb-tls"
CLIENT_CA_DIR = "/etc/weaseldb-client-ca"
GRANTS_DIR = "/etc/weaseldb-grants"
INTERNAL_DIR = "/etc/weaseldb-internal"
#: The keys of those Secrets (kubernetes.io/tls plus cert-manager's `ca.crt`; the grants
#: file of weaseldb/core/access.py; the operator's token Secret, tlssecrets.py).
TLS_CRT, TLS_KEY, CA_CRT, GRANTS_KEY = "tls.crt", "tls.key", "ca.crt", "grants.toml"
OPERATOR_TOKEN_KEY, READER_TOKEN_KEY = "token", "reader-token"


@dataclass(frozen=True)
class Tls:
    """`spec.tls`: TLS on the gateway's client port and the readers' port (on unless
    `mode: Disabled`). `secret_name` empty: the operator's own `NAME-tls`."""

    enabled: bool = True
    secret_name: str = ""
    client_certificates: str = "None"  # or "Optional" (mTLS beside tokens)
    client_ca_secret_name: str = ""


@dataclass(frozen=True)
class Auth:
    """`spec.auth`: client authentication from the grants Secret; off when none is named."""

    grants_secret_name: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.grants_secret_name)


@dataclass(frozen=True)
class Database:
    """One WeaselDB resource: identity, spec and the validated pipeline configuration."""

    name: str
    namespace: str
    uid: str
    generation: int
    replicas: int
    image: str
    image_pull_policy: str
    deletion_policy: str
    leader_failover_seconds: int
    storage: Storage
    config: Config
    gateway_service_type: str
    resources: dict[str, dict[str, Any]]
    compaction: Compaction | None = None
    leader_not_ready_seconds: int = 30
    target_leader: str | None = None
    paused: bool = False
    placement: Placement = Placement()
    readers: Readers = Readers()
    backup: Backup | None = None
    recovery: Recovery | None = None
    tls: Tls = Tls(enabled=False)
    auth: Auth = Auth()

    @property
    def tls_secret(self) -> str:
        """The Secret the pods' certificate comes from (given, or the operator's own)."""
        return self.tls.secret_name or f"{self.name}-tls"

    @property
    def own_certificate(self) -> bool:
        """The operator makes and renews the certificate (no `spec.tls.secretName`)."""
        return self.tls.enabled and not self.tls.secret_name

    @property
    def delete_data(self) -> bool:
        return self.deletion_policy == "Delete"

    def container_resources(self, stage: Stage) -> dict[str, Any]:
        """The stage's own entry, else `default`; a stage that holds request ids and is
        given no memory limit gets the one derived from the idempotency cap (requested
        too, so it is not the first pod evicted under memory pressure)."""
        given = dict(self.resources.get(stage) or self.resources.get("default") or {})
        if stage not in STAGES_WITH_IDS or "memory" in (given.get("limits") or {}):
            return given
        limit = f"{memory_limit_mib(stage, self.config)}Mi"
        return given | {
            "requests": {"memory": limit} | (given.get("requests") or {}),
            "limits": (given.get("limits") or {}) | {"memory": limit},
        }


#: Seconds a standby waits beyond leaderFailoverSeconds before it claims without the
#: operator (the operator down, or partitioned from the leader's pod only).
LEASE_GRACE_S = 5


#: Seconds a stopping pod's gateway keeps answering 503 not_leader after its drain
#: (gateway.stop_linger_s): past the two failed readiness probes (one a second) that mark
#: its endpoint not serving, and kube-proxy's next sync. Sooner, the pod's network could
#: vanish while the Service still routes new connections to it, and those hang.
STOP_LINGER_S = 5.0


def lease_timeout_for(spec: dict[str, Any]) -> float:
    return float(int(spec.get("leaderFailoverSeconds", 1)) + LEASE_GRACE_S)


def tls_from(spec: dict[str, Any]) -> Tls:
    """`spec.tls` (the CRD applies the defaults and refuses unknown values; this refuses
    them too, for a body that reached the operator without the schema)."""
    raw = spec.get("tls") or {}
    mode = str(raw.get("mode", "Enabled"))
    client = str(raw.get("clientCertificates", "None"))
    if mode not in ("Enabled", "Disabled"):
        raise SpecError(f"spec.tls.mode: {mode!r} is not Enabled or Disabled")
    if client not in ("None", "Optional"):
        raise SpecError(f"spec.tls.clientCertificates: {client!r} is not None or Optional")
    tls = Tls(
        enabled=mode == "Enabled",
        secret_name=str(raw.get("secretName", "")),
        client_certificates=client,
        client_ca_secret_name=str(raw.get("clientCASecretName", "")),
    )
    if client == "Optional" and not (tls.enabled and tls.client_ca_secret_name):
        raise SpecError(
            "spec.tls.clientCertificates: Optional needs mode Enabled and clientCASecretName "
            "(the CA that signs the clients' certificates)"
        )
    return tls


def auth_from(spec: dict[str, Any]) -> Auth:
    return Auth(str((spec.get("auth") or {}).get("grantsSecretName", "")))


def _tls_section(tls: Tls) -> dict[str, Any]:
    """A port's [*.tls] from the mounted Secrets (weaseldb.core.config.TlsConfig)."""
    section: dict[str, Any] = {
        "cert_file": f"{TLS_DIR}/{TLS_CRT}",
        "key_file": f"{TLS_DIR}/{TLS_KEY}",
    }
    if tls.client_certificates == "Optional":
        section |= {"client_ca_file": f"{CLIENT_CA_DIR}/{CA_CRT}", "client_certs": "optional"}
    return section


def security_config(tls: Tls, auth: Auth) -> dict[str, Any]:
    """The config sections `spec.tls` and `spec.auth` make: TLS on the gateway's client
    port and the reader's, the grants files (the user's, and the operator's own for
    itself and its readers), and how the readers reach the secured client Service."""
    gateway: dict[str, Any] = {}
    reader: dict[str, Any] = {}
    data: dict[str, Any] = {"gateway": gateway, "reader": reader}
    if tls.enabled:
        gateway["tls"] = reader["tls"] = _tls_section(tls)
        reader["upstream_ca_file"] = f"{TLS_DIR}/{CA_CRT}"
    if auth.enabled:
        grants = f"{GRANTS_DIR}/{GRANTS_KEY}"
        data["auth"] = {
            "grants_file": grants,
            "internal_grants_file": f"{INTERNAL_DIR}/{GRANTS_KEY}",
        }
        reader["auth"] = {"grants_file": grants}
        reader["upstream_token_file"] = f"{INTERNAL_DIR}/{READER_TOKEN_KEY}"
    return data


def pipeline_config(spec: dict[str, Any], storage: Storage) -> Config:
    """The configuration every container reads (`weaseldb service NAME --config FILE`),
    the readers too (`weaseldb reader --config FILE`: its [reader] section)."""
    security = security_config(tls_from(spec), auth_from(spec))
    data: dict[str, Any] = {
        "store": storage.url,
        "run_dir": RUN_DIR,
        "host": "0.0.0.0",
        # Several pods per database: only the pod named by the newest claim (or the first
        # pod ever) claims at start; the others wait as standbys until promoted. A standby
        # claims on its own only once the operator has had its chance to (leadership.py):
        # the operator's promotion comes first, and respects spec.paused.
        "persister": {
            "claim_on_start": "unclaimed_or_own",
            "lease_timeout_s": lease_timeout_for(spec),
        },
        "gateway": {"stop_linger_s": STOP_LINGER_S, **security.pop("gateway")},
        **security,
    }
    # A setting of the whole set, not of the persister: spec.pipeline is where a user looks
    # for how the pipeline runs. Unset (no CRD default applied), the config's default holds.
    if ring := (spec.get("pipeline") or {}).get("ring"):
        data["ring"] = ring
    for section, (target, fields) in _SECTIONS.items():
        values = spec.get(section) or {}
        data[target] = {
            **data.get(target, {}),
            **{fields[k]: v for k, v in values.items() if k in fields},
        }
    try:
        return build(data)
    except ConfigError as e:
        raise SpecError(str(e)) from e


def _storage(spec: dict[str, Any]) -> Storage:
    return _store(spec.get("storage") or {}, "spec.storage")


def _store(raw: dict[str, Any], where: str) -> Storage:
    """A store's fields (bucket, prefix, endpoint, region, credentialsSecret): the shape
    of spec.storage, spec.backup.destination and spec.bootstrap.recovery.source."""
    missing = [k for k in ("bucket", "prefix") if not raw.get(k)]
    if missing:
        raise SpecError(f"{where}.{missing[0]} is required")
    return Storage(
        bucket=raw["bucket"],
        prefix=str(raw["prefix"]).strip("/"),
        endpoint=raw.get("endpoint", ""),
        region=raw.get("region", "us-east-1"),
        credentials_secret=raw.get("credentialsSecret", ""),
    )


def _spark_resources(raw: dict[str, Any] | None) -> SparkResources:
    raw = raw or {}
    request = raw.get("coreRequest")
    return SparkResources(
        int(raw.get("cores", 1)),
        str(raw.get("memory", "1g")),
        None if request is None else str(request),
    )


def compaction_from(raw: dict[str, Any] | None) -> Compaction | None:
    """`spec.compaction`, or None when absent. The CRD schema checks shapes and ranges;
    this adds what a pattern cannot (a cron expression that parses)."""
    if not raw:
        return None
    schedule = raw.get("schedule")
    if schedule is not None and not croniter.is_valid(schedule):
        raise SpecError(f"spec.compaction.schedule: {schedule!r} is not a valid cron expression")
    threshold = raw.get("batchThreshold")
    if schedule is None and threshold is None:
        raise SpecError("spec.compaction needs a schedule, a batchThreshold or both")
    if not raw.get("image"):
        raise SpecError("spec.compaction.image is required")
    return Compaction(
        image=str(raw["image"]),
        schedule=schedule,
        batch_threshold=int(threshold) if threshold is not None else None,
        executors=int(raw.get("executors", 2)),
        driver=_spark_resources(raw.get("driver")),
        executor=_spark_resources(raw.get("executor")),
        gc=bool(raw.get("gc", True)),
        service_account=str(raw.get("serviceAccount", "spark")),
        ttl_seconds=int(raw.get("ttlSecondsAfterFinished", 86400)),
        deadline_seconds=int(raw.get("deadlineSeconds", 7200)),
        backoff_seconds=int(raw.get("backoffSeconds", 60)),
        max_backoff_seconds=int(raw.get("maxBackoffSeconds", 3600)),
        suspend=bool(raw.get("suspend", False)),
    )


def _elsewhere(store: Storage, own: Storage, where: str) -> Storage:
    """`store`, refused when it overlaps the database's own storage (a backup inside the
    database's prefix would be copied into itself, and purged with it)."""
    if store.overlaps(own):
        raise SpecError(
            f"{where}: {store.location} overlaps this database's own storage "
            f"{own.location}; give it a bucket or prefix of its own"
        )
    return store


def backup_from(raw: dict[str, Any] | None, own: Storage) -> Backup | None:
    """`spec.backup`, or None when absent. The CRD checks shapes and the duration's
    pattern; this parses the cron expression and the duration."""
    if not raw:
        return None
    schedule = str(raw.get("schedule") or "")
    if not croniter.is_valid(schedule):
        raise SpecError(f"spec.backup.schedule: {schedule!r} is not a valid cron expression")
    keep = raw.get("keepHistory") or {}
    try:
        seconds = parse_duration(str(keep["duration"])) if "duration" in keep else None
    except ValueError as e:
        raise SpecError(f"spec.backup.keepHistory.duration: {e}") from e
    versions = keep.get("versions")
    return Backup(
        destination=_elsewhere(
            _store(raw.get("destination") or {}, "spec.backup.destination"),
            own,
            "spec.backup.destination",
        ),
        schedule=schedule,
        keep_history=KeepHistory(seconds, None if versions is None else int(versions)),
        suspend=bool(raw.get("suspend", False)),
    )


def recovery_from(spec: dict[str, Any], own: Storage) -> Recovery | None:
    """`spec.bootstrap.recovery`, or None. At most one target; a time must be RFC 3339
    with a zone (the CRD says so too)."""
    raw = (spec.get("bootstrap") or {}).get("recovery")
    if not raw:
        return None
    where = "spec.bootstrap.recovery"
    version, moment = raw.get("targetVersion"), raw.get("targetTime")
    if version is not None and moment is not None:
        raise SpecError(f"{where}: give targetVersion or targetTime, not both")
    if moment is not None:
        try:
            parsed = datetime.datetime.fromisoformat(str(moment).replace("Z", "+00:00"))
        except ValueError as e:
            raise SpecError(f"{where}.targetTime: {moment!r} is not an RFC 3339 time") from e
        if parsed.tzinfo is None:
            raise SpecError(f"{where}.targetTime: {moment!r} has no zone (add Z or +HH:MM)")
    source = _elsewhere(_store(raw.get("source") or {}, f"{where}.source"), own, f"{where}.source")
    image = raw.get("image") or (spec.get("compaction") or {}).get("image")
    if not image:
        raise SpecError(f"{where}.image is required (the Spark image) unless "
                        "spec.compaction.image is set")  # fmt: skip
    return Recovery(
        source=source,
        image=str(image),
        target_version=None if version is None else int(version),
        target_time=None if moment is None else str(moment),
        driver_memory=str(raw.get("driverMemory", "1g")),
        resources=dict(raw.get("resources") or {}),
    )


def _target_leader(name: str, spec: dict[str, Any]) -> str | None:
    target = spec.get("targetLeader") or None
    replicas = int(spec.get("replicas", 1))
    pods = [f"{name}-{i}" for i in range(replicas)]
    if target is not None and target not in pods:
        raise SpecError(
            f"spec.targetLeader: {target!r} is not a pod of this database ({', '.join(pods)})"
        )
    return target


def reserved_key(key: str) -> bool:
    """A pod label or annotation key only the operator may set."""
    return key in RESERVED_POD_LABELS or key.startswith(OPERATOR_KEY_PREFIX)


def _strings(spec: dict[str, Any], name: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in (spec.get(name) or {}).items()}


def placement_from(spec: dict[str, Any], where: str = "spec.") -> Placement:
    """The placement fields of a spec. The CRD checks their shapes (affinity only at its
    top level; the API server checks the rest when the StatefulSet is applied); this
    refuses what would take a pod away from the operator."""
    for kind in ("podLabels", "podAnnotations"):
        taken = sorted(k for k in spec.get(kind) or {} if reserved_key(k))
        if taken:
            raise SpecError(
                f"{where}{kind}: {', '.join(taken)} is the operator's own (the keys "
                f"{', '.join(RESERVED_POD_LABELS)} and {OPERATOR_KEY_PREFIX}* are reserved)"
            )
    anti_affinity = str(spec.get("antiAffinity", "preferred"))
    if anti_affinity not in ANTI_AFFINITY:
        raise SpecError(f"{where}antiAffinity: {anti_affinity!r} is not one of {ANTI_AFFINITY}")
    return Placement(
        anti_affinity=anti_affinity,
        affinity=dict(spec.get("affinity") or {}),
        topology_spread_constraints=tuple(spec.get("topologySpreadConstraints") or ()),
        node_selector=_strings(spec, "nodeSelector"),
        tolerations=tuple(spec.get("tolerations") or ()),
        priority_class_name=str(spec.get("priorityClassName", "")),
        service_account_name=str(spec.get("serviceAccountName", "")),
        pod_labels=_strings(spec, "podLabels"),
        pod_annotations=_strings(spec, "podAnnotations"),
        image_pull_secrets=tuple(str(s["name"]) for s in spec.get("imagePullSecrets") or ()),
    )


def readers_from(spec: dict[str, Any], shared: Placement) -> Readers:
    """`spec.readers`; the database's placement (`shared`) lends the fields `spec.readers`
    has none of (pull secrets, priority class, pod labels, annotations)."""
    raw = spec.get("readers") or {}
    own = placement_from({k: raw[k] for k in READER_PLACEMENT if k in raw}, "spec.readers.")
    return Readers(
        replicas=int(raw.get("replicas", 0)),
        horizon_seconds=int(raw.get("horizonSeconds", 300)),
        resources=dict(raw.get("resources") or {}),
        placement=replace(
            own,
            priority_class_name=shared.priority_class_name,
            pod_labels=shared.pod_labels,
            pod_annotations=shared.pod_annotations,
            image_pull_secrets=shared.image_pull_secrets,
        ),
    )


#: The placement fields `spec.readers` has of its own (the rest come from the database's).
READER_PLACEMENT = ("antiAffinity", "affinity", "topologySpreadConstraints", "nodeSelector",
                    "tolerations")  # fmt: skip


def database_from(body: dict[str, Any]) -> Database:
    """Read a WeaselDB object (as returned by the API server); SpecError when unusable."""
    meta, spec = body.get("metadata", {}), body.get("spec") or {}
    storage = _storage(spec)
    placement = placement_from(spec)
    return Database(
        name=meta["name"],
        namespace=meta.get("namespace", "default"),
        uid=meta.get("uid", ""),
        generation=int(meta.get("generation", 0)),
        replicas=int(spec.get("replicas", 1)),
        image=spec.get("image", "ghcr.io/weaseldb/weaseldb:0.1.0"),
        image_pull_policy=spec.get("imagePullPolicy", "IfNotPresent"),
        deletion_policy=spec.get("deletionPolicy", "Retain"),
        leader_failover_seconds=int(spec.get("leaderFailoverSeconds", 1)),
        leader_not_ready_seconds=int(spec.get("leaderNotReadySeconds", 30)),
        target_leader=_target_leader(meta["name"], spec),
        paused=bool(spec.get("paused", False)),
        storage=storage,
        config=pipeline_config(spec, storage),
        gateway_service_type=(spec.get("gateway") or {}).get("serviceType", "ClusterIP"),
        resources=dict(spec.get("resources") or {}),
        compaction=compaction_from(spec.get("compaction")),
        placement=placement,
        readers=readers_from(spec, placement),
        backup=backup_from(spec.get("backup"), storage),
        recovery=recovery_from(spec, storage),
        tls=tls_from(spec),
        auth=auth_from(spec),
    )


def storage_from(body: dict[str, Any]) -> Storage:
    """Where a WeaselDB object's data is, whatever the rest of its spec says (SpecError
    when bucket or prefix is missing)."""
    return _storage(body.get("spec") or {})
