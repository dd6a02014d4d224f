"""Configuration for the whole process set, one section per stage.

Every field has a docstring (it is the reference; docs/configuration.md is generated from
it) and is validated at start; `load` turns a validation failure into a `ConfigError`
whose message names the field, e.g. ``persister.max_in_flight_requests: ...``.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from weaseldb.core.types import MAX_IN_FLIGHT_LIMIT, Stage

MiB = 1024 * 1024


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class PersisterConfig(_Section):
    batch_timeout_ms: float = Field(1.0, gt=0)
    """The least time a batch collects transactions while other batches are in flight; it
    waits up to the moving average of PUT latency, or until those PUTs are done (with
    nothing in flight it goes out at once)."""
    batch_size_threshold: int = Field(MiB, gt=0)
    """Encoded bytes of transactions that close a batch at once (the last one may exceed it)."""
    max_in_flight_requests: int = Field(50, ge=1, le=MAX_IN_FLIGHT_LIMIT)
    """Batch PUTs in flight, counting batches waiting in retry backoff. At most 1000, so that
    recovery needs only one LIST. Default 50 for S3; 4 for a ``dir:`` store, whose fsyncs
    serialize on the local disk, so more in flight would only queue instead of batching."""
    target_pool_size: int = Field(100, ge=1)
    """Connections kept open to the object store."""
    max_retry_attempts: int = Field(3, ge=0)
    """Retries of a failed PUT before the leader gives up and exits (0 disables retries)."""
    retry_base_delay_ms: float = Field(100.0, gt=0)
    """First retry delay; each further retry doubles it."""
    index_segment_batches: int = Field(1000, ge=1)
    """A request-id index segment is written after this many batches..."""
    index_segment_ids: int = Field(100_000, ge=1)
    """...or this many request ids..."""
    index_segment_interval_s: float = Field(60.0, gt=0)
    """...or this long, whichever comes first (docs/architecture.md, "Idempotency"). After a
    crash a new leader reads the batches written since the last segment."""
    term_watch_interval_s: float = Field(2.0, gt=0)
    """While leading, look for a newer term claim this often (one LIST of one key), so an
    idle deposed leader stops promptly instead of at its next batch."""
    retention_floor_interval_s: float = Field(30.0, gt=0)
    """While leading, read where the retained log starts this often (one LIST of one key)
    for ``weaseldb_retention_floor_version`` (docs/operator.md, "Monitoring")."""
    lease_renew_s: float = Field(1.0, gt=0)
    """With standbys (``claim_on_start = "unclaimed_or_own"``) the leader renews its lease
    (``leases/<term>``, one small PUT) this often, and standbys read it this often."""
    lease_timeout_s: float = Field(4.0, ge=0)
    """A standby claims the next term itself when the newest term's lease has not changed
    for this long on its own clock; 0: only ``POST /promote`` promotes it."""
    claim_on_start: Literal["always", "unclaimed_or_own"] = "always"
    """``always``: claim the next term at every start (one process set per database, as with
    ``weaseldb up``). ``unclaimed_or_own``: claim only when no term was claimed yet or the
    newest claim names this pod; otherwise wait as a standby until promoted (``POST
    /promote`` on the persister), so restarting standbys never depose the leader."""

    @model_validator(mode="after")
    def _lease_outlasts_renewals(self) -> PersisterConfig:
        # A timeout within two renewals would take one slow PUT for a dead leader.
        if 0 < self.lease_timeout_s < 2 * self.lease_renew_s:
            raise ValueError(
                f"lease_timeout_s ({self.lease_timeout_s:g}) must be 0 or at least twice "
                f"lease_renew_s ({self.lease_renew_s:g})"
            )
        return self


class ResolverConfig(_Section):
    window_seconds: float = Field(5.0, gt=0)
    """Writes are kept for conflict checks at least this long..."""
    window_versions: int = Field(10_000_000, ge=1)
    """...and at least this many versions, whichever keeps more."""


class IdempotencyConfig(_Section):
    request_id_memory: int = Field(1_000_000, ge=1)
    """A retried commit gets its original outcome for at least the last this many request
    ids (committed or banned by a status lookup), across restarts and leader changes..."""
    request_id_window_s: float = Field(600.0, ge=0)
    """...and at least those of this many seconds, whichever keeps more..."""
    request_id_max: int = Field(5_000_000, ge=1)
    """...but never more than this many (a memory bound). An id past the window is still
    recognised, approximately, for about `request_id_memory` more ids in the same process
    and answered ``commit_unknown`` rather than applied twice."""


class TlsConfig(_Section):
    """TLS on a client port (docs/operator.md, "Security"). Off while `cert_file` is empty."""

    cert_file: str = ""
    """PEM certificate chain the server presents (``tls.crt`` of a cert-manager Secret);
    empty: plain HTTP."""
    key_file: str = ""
    """PEM private key of `cert_file` (``tls.key``)."""
    client_ca_file: str = ""
    """PEM CA bundle that signs client certificates (``ca.crt``); empty: none are asked."""
    client_certs: Literal["none", "optional", "required"] = "none"
    """Whether a client certificate is asked for during the handshake (mTLS). ``required``
    refuses handshakes without one signed by `client_ca_file`; with ``optional`` a client
    may still authenticate by bearer token. A certificate's common name is the
    ``subject`` of its grant (`auth.grants_file`)."""
    reload_interval_s: float = Field(10.0, gt=0)
    """How often the files are checked; changed files are loaded into the live TLS
    context, so new connections get the new certificate and open ones keep theirs (no
    restart when cert-manager renews the Secret)."""

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file)

    @model_validator(mode="after")
    def _complete(self) -> TlsConfig:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("cert_file and key_file are given together")
        if self.client_certs != "none" and not (self.client_ca_file and self.cert_file):
            raise ValueError("client_certs needs cert_file, key_file and client_ca_file")
        return self


class AuthConfig(_Section):
    """Client authentication and authorisation (docs/operator.md, "Security")."""

    grants_file: str = ""
    """A TOML file of grants (weaseldb/core/access.py): bearer tokens or client-certificate
    subjects, each with the actions (commit, status, subscribe) and key prefixes it
    allows. When set, every ``/v1/`` request needs a token or a certificate a grant names
    (401 otherwise) and a request outside its grant is 403 with nothing applied. Read
    again when it changes (rotation without a restart). Empty (the default, as with
    ``weaseldb up``): no authentication. ``WEASELDB_GRANTS_FILE`` overrides it."""
    internal_grants_file: str = ""
    """A second grants file, read as `grants_file` is and added to it: the grants the
    operator writes for itself and the readers it runs (a Secret of its own), so the
    user's grants file stays the user's. Only with `grants_file`; a token in both files
    gets the grant of `grants_file`."""
    reload_interval_s: float = Field(1.0, gt=0)
    """How often the grants file is checked for a change."""

    @model_validator(mode="after")
    def _internal_beside(self) -> AuthConfig:
        if self.internal_grants_file and not self.grants_file:
            raise ValueError("internal_grants_file needs grants_file (auth is off without it)")
        return self


class GatewayConfig(_Section):
    max_body_bytes: int = Field(MiB, ge=1024)
    """Largest request body; larger ones get 413 too_large."""
    max_key_bytes: int = Field(10 * 1024, ge=1)
    """Largest key (and range bound) after base64 decoding."""
    max_value_bytes: int = Field(100 * 1024, ge=0)
    """Largest value after base64 decoding."""
    max_items: int = Field(10_000, ge=1)
    """Most operations plus preconditions in one commit."""
    commit_timeout_s: float = Field(30.0, gt=0)
    """A commit not answered by the pipeline in this time gets 503 commit_unknown."""
    request_timeout_s: float = Field(30.0, gt=0)
    """A connection must start a request, and then deliver its headers and its whole body,
    within this many seconds, or it is closed (against clients that trickle requests)."""
    leader_silence_s: float = Field(5.0, gt=0)
    """The persister speaks to every gateway worker at least once a second; a worker that
    hears nothing for this long stops taking commits (503 not_leader, /readyz not ready)
    until it does again, and answers what was waiting commit_unknown."""
    stop_linger_s: float = Field(0.0, ge=0, le=60)
    """After a stop signal and the drain, the worker keeps its port open this long,
    answering every request 503 not_leader with ``Connection: close``, so connections a
    Service still routes to the stopping pod are refused at once instead of hanging once
    the pod's network is gone. 0 where no Service routes (``weaseldb up``); the operator
    renders its own value (docs/operator.md)."""
    max_waiting_requests: int = Field(10_000, ge=1)
    """Commits and status lookups one gateway worker lets wait for the pipeline; more are
    refused at once with 503 not_leader (reason ``overloaded``: nothing was applied)."""
    workers: int = Field(1, ge=1, le=64)
    """Gateway worker processes sharing the client port. ``weaseldb up`` starts one per CPU
    core (at most 4) unless this is set."""
    subscriber_buffer_bytes: int = Field(10 * MiB, ge=1024)
    """Unsent change-stream data one ``/v1/subscribe`` client may fall behind by; beyond it
    that client alone is disconnected."""
    checkpoint_interval_s: float = Field(1.0, gt=0)
    """An idle change stream gets a ``checkpoint`` event this often."""
    subscriber_linger_s: float = Field(0.01, ge=0)
    """A live change stream sends what gathered at most this often (per subscriber), so a
    burst of rounds costs one wake-up and one write, not one per round. 0 sends each round
    at once."""
    keepalive_interval_s: float = Field(30.0, gt=0)
    """A change stream gets a ``: keepalive`` comment line this often."""
    store_pool_size: int = Field(10, ge=1)
    """Connections each gateway worker keeps to the object store (status lookups of older
    ids, history for subscribers, retention policies, snapshot listing)."""
    tls: TlsConfig = TlsConfig()


class ReaderConfig(_Section):
    """`weaseldb reader` (docs/reader.md): a read replica that follows the change stream."""

    upstream: str = "http://127.0.0.1:8080"
    """The database's client URL (the leader's gateway, or a Service that routes to it): the
    reader follows its ``/v1/subscribe`` and keeps its retention policy there."""
    state_dir: str = "./reader"
    """Where the reader keeps its SQLite state; a restart resumes from the version it holds."""
    port: int = Field(8090, ge=0, le=65535)
    """The reader's HTTP port (0 picks a free one and writes it to ``reader.port`` in the
    state directory)."""
    horizon_seconds: float = Field(300.0, ge=0)
    """Versions committed in the last this many seconds stay readable (by the timestamps
    the events carry); older ones answer 410 ``too_old``, and the change stream it serves
    again reaches back as far."""
    policy_id: str = ""
    """The retention policy that keeps the reader's position on the upstream; empty:
    ``reader-<hostname>``."""
    policy_interval_s: float = Field(5.0, gt=0)
    """How often the retention policy moves forward to the applied version."""
    release_policy_on_stop: bool = False
    """Delete the retention policy when the reader stops on a signal: for readers whose
    state does not outlive them (a pod with an ``emptyDir``, whose next incarnation starts
    from a snapshot under a new name), so a replaced reader does not hold GC back forever.
    Off: a restarted reader resumes from its state and GC kept what it needs meanwhile."""
    apply_batch: int = Field(1000, ge=1)
    """Most transactions applied in one SQLite transaction while catching up."""
    cache_mib: int = Field(64, ge=1)
    """SQLite page cache per connection."""
    default_wait_s: float = Field(5.0, ge=0)
    """A read at a version not applied yet waits this long unless it says ``timeout``..."""
    max_wait_s: float = Field(60.0, ge=0)
    """...and at most this long, then 503 ``not_caught_up``."""
    subscriber_buffer_bytes: int = Field(10 * MiB, ge=1024)
    """Unsent change-stream data one subscriber may fall behind by; beyond it that
    subscriber alone is disconnected."""
    checkpoint_interval_s: float = Field(1.0, gt=0)
    """An idle change stream gets a ``checkpoint`` event this often."""
    keepalive_interval_s: float = Field(30.0, gt=0)
    """A change stream gets a ``: keepalive`` comment line this often."""
    subscriber_linger_s: float = Field(0.01, ge=0)
    """A live change stream sends what gathered at most this often (per subscriber)."""
    auth: AuthConfig = AuthConfig()
    """The reader's own client auth, as `auth` is the gateway's (a read needs the ``read``
    action over the keys, a subscribe ``subscribe``)."""
    upstream_token_file: str = ""
    """A file holding the bearer token the reader sends upstream (when the upstream asks
    for one); read again at each reconnection."""
    upstream_ca_file: str = ""
    """PEM CA bundle that signs the upstream's certificate (an ``https://`` upstream);
    empty: the system's CAs."""
    tls: TlsConfig = TlsConfig()


class Ports(_Section):
    gateway: int = Field(8080, ge=0, le=65535)
    """Client API port."""
    sequencer: int = Field(8081, ge=0, le=65535)
    """Health and metrics port of the sequencer (0 picks a free one)."""
    resolver: int = Field(8082, ge=0, le=65535)
    """Health and metrics port of the resolver."""
    persister: int = Field(8083, ge=0, le=65535)
    """Health and metrics port of the persister."""

    def of(self, stage: Stage) -> int:
        """The port of `stage` (its field here is named after it)."""
        port: int = getattr(self, stage)
        return port


#: The ring transports (`Config.ring`).
RingKind = Literal["unix", "shm", "tcp"]


class Config(_Section):
    store: str = "dir:./data"
    """Object store: ``dir:PATH`` (embedded default) or ``s3://BUCKET/PREFIX?endpoint=URL&region=R``."""
    run_dir: str = "./run"
    """Directory for the ring's ipc:// sockets; keep it short (socket paths allow ~107 bytes)."""
    host: str = "127.0.0.1"
    """Address every service listens on."""
    ring: RingKind = "unix"
    """How the stages pass frames to each other: ``unix``, Unix sockets in run_dir (one
    write and one wake-up per frame); ``shm``, single-producer rings in shared files in
    run_dir, the Unix sockets kept only as doorbells for a sleeping peer and to notice a
    dead one (x86-64 only); or ``tcp`` on host (service port + 1000; gateway worker i at
    gateway port + 1100 + i). ``ipc`` is the old name of ``unix``. The ``WEASELDB_RING``
    environment variable overrides it. docs/architecture.md, "The ring", says why
    ``unix`` is the default."""

    @field_validator("ring", mode="before")
    @classmethod
    def _old_ring_name(cls, value: object) -> object:
        return "unix" if value == "ipc" else value

    ports: Ports = Ports()
    pod_name: str = ""
    """Recorded in term claims; the ``WEASELDB_POD_NAME`` environment variable overrides it
    (Kubernetes sets that from the pod name)."""
    drain_timeout_s: float = Field(30.0, gt=0)
    """How long a stopping service waits for in-flight work to drain."""
    admin_token_file: str = ""
    """A file holding the admin token: when set, the admin endpoints (``POST /promote`` on
    the persister) answer 401 unless the request carries ``Authorization: Bearer TOKEN``.
    Empty (the default, as with ``weaseldb up``): no token is asked for. The
    ``WEASELDB_ADMIN_TOKEN_FILE`` environment variable overrides it (the operator sets it
    to the Secret it mounts)."""
    persister: PersisterConfig = PersisterConfig()
    resolver: ResolverConfig = ResolverConfig()
    idempotency: IdempotencyConfig = IdempotencyConfig()
    gateway: GatewayConfig = GatewayConfig()
    reader: ReaderConfig = ReaderConfig()
    auth: AuthConfig = AuthConfig()


#: max_in_flight_requests when the configuration does not set it, by store kind.
LOCAL_DISK_IN_FLIGHT = 4


def _store_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """Defaults that depend on the store (documented on the fields they fill)."""
    store = str(data.get("store", Config.model_fields["store"].default))
    persister = dict(data.get("persister") or {})
    if store.startswith("dir:") and "max_in_flight_requests" not in persister:
        persister["max_in_flight_requests"] = LOCAL_DISK_IN_FLIGHT
        return {**data, "persister": persister}
    return data


class ConfigError(ValueError):
    """A configuration problem; the message names the offending field."""


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(root)"
        lines.append(f"{field}: {item['msg']}")
    return "; ".join(lines)


def build(data: dict[str, Any]) -> Config:
    try:
        return Config.model_validate(_store_defaults(data))
    except ValidationError as e:
        raise ConfigError(f"invalid configuration: {_describe(e)}") from e


#: Environment variables that override a setting (for values only known where a service runs).
ENVIRONMENT = {
    "WEASELDB_POD_NAME": "pod_name",
    "WEASELDB_ADMIN_TOKEN_FILE": "admin_token_file",
    "WEASELDB_GRANTS_FILE": "auth.grants_file",
    "WEASELDB_RING": "ring",
}


def load(path: str | Path | None, overrides: dict[str, Any] | None = None) -> Config:
    """Read a TOML or JSON file (or nothing), apply the environment (ENVIRONMENT) and then
    dotted-key overrides, validate."""
    data: dict[str, Any] = {}
    if path is not None:
        text = Path(path).read_text()
        try:
            data = json.loads(text) if str(path).endswith(".json") else tomllib.loads(text)
        except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(
                f"{path}: not valid {'JSON' if str(path).endswith('.json') else 'TOML'}: {e}"
            ) from e
    environment = {key: os.environ[var] for var, key in ENVIRONMENT.items() if var in os.environ}
    for dotted, value in {**environment, **(overrides or {})}.items():
        _set_dotted(data, dotted, value)
    return build(data)


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[leaf] = value
