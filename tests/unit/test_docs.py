"""The reference docs against the code: every number or rule a doc states that the code
defines (a default, a limit, a port rule, a pattern, a module list) is compared with the
code here, as docs/configuration.md is compared with the config models in test_config.py.
A failure names the doc and the statement; fix whichever side is wrong."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from services.gateway import errors as gateway_errors
from services.gateway import retention, snapshots, subscriptions
from services.persister import app as persister_app
from services.persister import assembly, engine, fullness, leader
from services.resolver import app as resolver_app
from weaseldb.core import config, gc, idring, layout, recovery, requestids, sizing, types
from weaseldb.core.types import Stage
from weaseldb.runtime import ring, shmring, stalls
from weaseldb.runtime.ring import Endpoints
from weaseldb.runtime.stores import directory
from weaseldb_cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
REFERENCE = [*DOCS, ROOT / "README.md"]
TOP_DIRS = tuple(f"{top}/" for top in ("weaseldb", "services", "operator", "spark", "charts",
                                         "tests", "bench", "hack", "docs", "examples"))  # fmt: skip
#: Paths in other projects' trees that the docs cite.
ELSEWHERE = {"hack/lib/golang.sh"}  # Kubernetes' build flags (docs/tools.md)


@cache
def read(name: str) -> str:
    """A doc's text with its lines joined, so a statement wrapped over two lines matches."""
    return " ".join((ROOT / name).read_text().split())


def stated(name: str, *phrases: str) -> None:
    text = read(name)
    for phrase in phrases:
        assert " ".join(phrase.split()) in text, f"{name} should say: {phrase!r}"


def source_constant(path: str, name: str) -> Any:
    """A module-level constant, read from the source without importing it (the operator's
    and the Spark job's modules pull in kopf, kubernetes and pyspark)."""
    for node in ast.parse((ROOT / path).read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            target, value = node.target.id, node.value
        else:
            continue
        if target == name:  # arithmetic of literals, like 64 * 1024 * 1024
            return eval(compile(ast.Expression(value), path, "eval"), {})
    raise AssertionError(f"{path} defines no {name}")


def mib(n: int) -> str:
    assert n % 2**20 == 0
    return f"{n // 2**20} MiB"


def seconds(value: float) -> str:
    return f"{value:g} s"


# --- paths, sections, metrics ---------------------------------------------------------------


def _repo_paths(text: str) -> set[str]:
    found = set()
    for token in re.findall(r"`([^`\s]+)`", text):
        token = token.split("::")[0].rstrip(".,:")
        if (
            token.startswith(TOP_DIRS)
            and token not in ELSEWHERE
            and not re.search(r"[{}<>*$]|\.\.\.", token)
        ):
            # `make bench` writes bench/results/*.json (not in git): its directory must exist
            found.add("bench/results" if token.startswith("bench/results/") else token)
    return found


@pytest.mark.parametrize("doc", REFERENCE, ids=lambda p: p.name)
def test_every_repository_path_a_doc_names_exists(doc: Path) -> None:
    missing = sorted(p for p in _repo_paths(doc.read_text()) if not (ROOT / p).exists())
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


#: Where each top-level package's source lives.
PACKAGES = {
    "weaseldb": ROOT / "weaseldb",
    "weaseldb_cli": ROOT / "weaseldb_cli",
    "services": ROOT / "services",
    "weaseldb_operator": ROOT / "operator" / "weaseldb_operator",
    "weaseldb_compaction": ROOT / "spark" / "weaseldb_compaction",
}


def _names_a_real_module(dotted: str) -> bool:
    """`a.b.c.Name`: the longest prefix that is a module of this tree, and the next part
    (if any) defined at its top level. Read from the source, so nothing is imported."""
    top, *rest = dotted.split(".")
    path = PACKAGES[top]
    for i, part in enumerate(rest):
        if (path / part).is_dir():
            path = path / part
        elif (path / f"{part}.py").is_file():
            path = path / f"{part}.py"
        else:
            source = path / "__init__.py" if path.is_dir() else path
            defined = _top_level_names(source)
            return i == len(rest) - 1 and part in defined
    return True


def _top_level_names(source: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


@pytest.mark.parametrize("doc", REFERENCE, ids=lambda p: p.name)
def test_every_module_a_doc_names_exists(doc: Path) -> None:
    """`weaseldb.core.store`, `services.gateway.errors.TABLE`: a module or name moved
    (as in the split of the core) must not leave its old name in the docs."""
    # `weaseldb.io` is the CRD's API group, not a module.
    pattern = r"`((?:{})(?!\.io\b)(?:\.\w+)+)".format("|".join(PACKAGES))
    named = set(re.findall(pattern, doc.read_text()))
    missing = sorted(n for n in named if not _names_a_real_module(n))
    assert not missing, f"{doc.name} names modules that do not exist: {missing}"


def _headings(doc: Path) -> list[str]:
    return [
        " ".join(line.lstrip("#").split())
        for line in doc.read_text().splitlines()
        if line.startswith("#")
    ]


@pytest.mark.parametrize("doc", REFERENCE, ids=lambda p: p.name)
def test_every_section_a_doc_points_to_exists(doc: Path) -> None:
    """`docs/X.md, "Title"` (or `X.md "Title"`) must name a heading of docs/X.md (a heading
    that starts with the title: "Idempotency" finds "Idempotency and the request-id index")."""
    text = " ".join(doc.read_text().split())
    broken = []
    for name, title in re.findall(r"(?:docs/)?(\w+)\.md`?,? \"([^\"]+)\"", text):
        target = ROOT / "docs" / f"{name}.md"
        if not target.exists():
            continue  # the contract's own docs (../shared/spec/)
        if not any(h.startswith(title) for h in _headings(target)):
            broken.append(f"{name}.md, {title!r}")
    assert not broken, f"{doc.name} points to sections that do not exist: {broken}"


CODE = sorted(
    path
    for top in ("weaseldb", "weaseldb_cli", "services", "operator", "spark", "bench")
    for path in (ROOT / top).rglob("*.py")
)


def test_every_section_the_code_points_to_exists() -> None:
    """Comments and docstrings cite `docs/X.md, "Title"` for the why; when a doc is
    rewritten, the citation must follow it (the contract's own api.md, cited without
    `docs/`, is not checked here)."""
    broken = []
    for path in CODE:
        text = " ".join(re.sub(r"#:?", " ", path.read_text()).split())
        for name, title in re.findall(r"docs/(\w+)\.md`?,? \"([^\"]+)\"", text):
            target = ROOT / "docs" / f"{name}.md"
            if not target.exists() or not any(h.startswith(title) for h in _headings(target)):
                broken.append(f"{path.relative_to(ROOT)}: {name}.md, {title!r}")
    assert not broken, f"code points to doc sections that do not exist: {broken}"


@cache
def _code_text() -> str:
    return "\n".join(
        path.read_text()
        for top in ("weaseldb", "services", "operator", "spark")
        for path in (ROOT / top).rglob("*.py")
    )


@pytest.mark.parametrize("doc", REFERENCE, ids=lambda p: p.name)
def test_every_metric_a_doc_names_is_exported(doc: Path) -> None:
    names = set(re.findall(r"\b(weaseldb_[a-z_]+)\b", doc.read_text()))
    names = {
        n
        for n in names
        if not n.startswith(("weaseldb_operator", "weaseldb_compaction", "weaseldb_cli"))
    }
    missing = sorted(n for n in names if f'"{n}"' not in _code_text())
    assert not missing, f"{doc.name} names metrics no process exports: {missing}"


# --- configuration defaults quoted in prose -------------------------------------------------

SECTIONS = ("persister", "resolver", "idempotency", "gateway", "ports")
QUOTED = re.compile(
    r"`((?:" + "|".join(SECTIONS) + r")\.[a-z_]+)`(?: [a-z]+)? \(([0-9][0-9,.]*)( s| MiB)?\)"
)


def _default(key: str) -> Any:
    value: Any = config.Config()
    for part in key.split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize("doc", REFERENCE, ids=lambda p: p.name)
def test_defaults_quoted_in_prose_are_the_config_defaults(doc: Path) -> None:
    """ "`gateway.request_timeout_s` (30 s)", "`idempotency.request_id_memory` ids
    (1,000,000)", "`gateway.subscriber_buffer_bytes` (10 MiB)"."""
    text = " ".join(doc.read_text().split())
    for key, number, unit in QUOTED.findall(text):
        value = float(number.replace(",", ""))
        if unit == " MiB":
            value *= 2**20
        assert value == _default(key), f"{doc.name}: `{key}` ({number}{unit}) != {_default(key)}"
    for key in re.findall(r"`((?:" + "|".join(SECTIONS) + r")\.[a-z_]+)(?<!\.sock)`", text):
        _default(key)  # every key a doc names exists (AttributeError otherwise)


# --- docs/architecture.md -------------------------------------------------------------------


def test_ring_port_rule() -> None:
    ports = config.Ports(gateway=9000, sequencer=9001, resolver=9002, persister=9003)
    endpoints = Endpoints(config.Config(ring="tcp", ports=ports))
    assert endpoints.sequencer.endswith(":10001")
    assert endpoints.resolver.endswith(":10002")
    assert endpoints.persister.endswith(":10003")
    assert endpoints.gateway(2).endswith(":10102")
    stated(
        "docs/architecture.md",
        "each stage's service port + 1000 on `host`; "
        "gateway worker N at the gateway port + 1100 + N",
    )
    stated(
        "docs/configuration.md", "service port + 1000; gateway worker i at gateway port + 1100 + i"
    )
    ipc = Endpoints(config.Config(run_dir="/r"))
    assert [ipc.sequencer, ipc.gateway(3)] == ["ipc:///r/sequencer.sock", "ipc:///r/gateway-3.sock"]
    stated(
        "docs/architecture.md",
        "`run_dir`: `sequencer.sock`, `resolver.sock`, `persister.sock`, `gateway-N.sock`",
        f"(`sequencer.sock.<generation>.ring`, {mib(shmring.RING_BYTES)})",
    )


def test_architecture_numbers() -> None:
    doc = "docs/architecture.md"
    assert recovery.FENCE_LENGTH == types.MAX_IN_FLIGHT_LIMIT - 1
    assert ring.REFUSAL_LOG_EVERY_S == 60  # "at ERROR once a minute", and the log line
    stated(
        doc,
        f"LIST of at most {types.MAX_IN_FLIGHT_LIMIT} batch keys",
        f"`max_in_flight_requests` of any earlier leader (at most {recovery.FENCE_LENGTH};",
        f"(a claim without the field counts as {types.MAX_IN_FLIGHT_LIMIT}; a first term",
        f"(logged once after {seconds(assembly.RING_ASSEMBLY_S)}).",
        f"the refused sender tries again, waiting twice as long after each refusal, up to "
        f"{seconds(ring.REFUSED_BACKOFF_S)}. A sender whose connection lived at least "
        f"{seconds(ring.ACCEPTED_AFTER_S)} reconnects at once",
        f"answers `/readyz` with 503 gets up to {seconds(assembly.RING_ASSEMBLY_S)} for its",
        f"speaks to every worker at least every {seconds(leader.HEARTBEAT_S)}",
        f"every {seconds(fullness.PROBE_INTERVAL_S)} (`services/persister/fullness.py`, "
        "`PROBE_INTERVAL_S`)",
        f"tops up {directory.SPARE_FILES} unnamed spare files",
        f"`persister.max_in_flight_requests` batches (the window rule) and "
        f"{engine.MAX_UNRELEASED_SLOTS:,} slots",
        f"| persister queue per gateway worker | {mib(persister_app.WORKER_BACKLOG_BYTES)}",
        f"| resolver accepted-event backlog | {mib(resolver_app.ACCEPTED_BACKLOG_BYTES)}",
        f"ids at {sizing.WINDOW_BYTES_PER_ID + idring.INDEX_BYTES_PER_ID:g} B each",
        f"{sizing.OUTCOME_BYTES_PER_ID + idring.INDEX_BYTES_PER_ID:g} B per id |",
    )
    stated(
        "docs/observability.md",
        f"a timer due every {seconds(stalls.LAG_INTERVAL_S)}",
        f"young generation to {stalls.GC_YOUNG_THRESHOLD} allocations",
    )


# --- docs/idempotency.md --------------------------------------------------------------------


def test_idempotency_numbers() -> None:
    doc = "docs/idempotency.md"
    defaults = config.Config()
    two_workers = defaults.model_copy(
        update={"gateway": defaults.gateway.model_copy(update={"workers": 2})}
    )
    fan_in, levels = requestids.MERGE_FAN_IN, requestids.MAX_MERGE_LEVEL
    words = {4: "four", 8: "Eight"}

    def limit(stage: Stage) -> int:
        return sizing.memory_limit_mib(stage, two_workers)

    stated(
        doc,
        f"{words[fan_in]} adjacent segments of a level are merged into one of the next, up to "
        f"level {levels} ({fan_in**levels} level-0 segments)",
        f"plus a {gc.CLOCK_MARGIN_MS // 1000} s margin",
        f"groups of {words[requestids.READ_PARALLEL]} segments",
        f"buckets of ~{requestids._BUCKET_TARGET} entries",
        f"a mark every {idring.MARK_EVERY_MS} ms",
        f"a {mib(sizing.BASE_BYTES)} base",
        f"x {sizing.MARGIN:g}",
        f"the sequencer needs {limit(Stage.SEQUENCER):,} MiB and the "
        f"persister {limit(Stage.PERSISTER):,} MiB (two gateway workers)",
    )


# --- docs/compaction.md ---------------------------------------------------------------------


def test_compaction_numbers() -> None:
    doc = "docs/compaction.md"
    assert cli._parser().parse_args(["compact"]).gc_grace_seconds == gc.DEFAULT_GRACE_S
    spark = "spark/weaseldb_compaction"
    stated(
        doc,
        f"(`--gc-grace-seconds`, default {seconds(gc.DEFAULT_GRACE_S)}",
        f"every {seconds(gc.HEARTBEAT_S)} from a thread of the driver",
        f"at most {source_constant(f'{spark}/fetch.py', 'SAMPLES_PER_PARTITION')} sampled keys",
        f"about {source_constant(f'{spark}/job.py', 'TARGET_FILE_BYTES') // 2**20} MB of log",
        f"never one of the newest {types.MAX_IN_FLIGHT_LIMIT}",
        f"back up to {recovery.FENCE_LENGTH} batches",
    )


# --- docs/api.md ----------------------------------------------------------------------------

POLICY_RULE = "1..128 characters of `[A-Za-z0-9._-]`, not starting with `.`, matched whole"


@pytest.mark.parametrize(
    ("policy_id", "valid"),
    [
        pytest.param("a", True, id="one"),
        pytest.param("a" * 128, True, id="128"),
        pytest.param("a" * 129, False, id="129"),
        pytest.param("", False, id="empty"),
        pytest.param(".a", False, id="leading-dot"),
        pytest.param(".", False, id="dot"),
        pytest.param("a.b_c-D9", True, id="every-class"),
        pytest.param("-a", True, id="leading-dash"),
        pytest.param("abc\n", False, id="newline"),
        pytest.param("a/b", False, id="slash"),
    ],
)
def test_policy_id_rule_is_the_code_s(policy_id: str, valid: bool) -> None:
    assert layout.is_policy_id(policy_id) is valid


def test_policy_id_rule_is_stated_once() -> None:
    stated("docs/api.md", POLICY_RULE)
    statements = sum(read(f"docs/{doc.name}").count("1..128 characters") for doc in DOCS)
    assert statements == 1, "the policy-id rule is stated once, in docs/api.md's input rules"


def test_error_table_lists_every_answer() -> None:
    rows = [
        line for line in (ROOT / "docs/api.md").read_text().splitlines() if line.startswith("|")
    ]
    for answer in gateway_errors.TABLE.values():
        assert any(f"| {answer.status}" in row and f"`{answer.code}`" in row for row in rows), (
            f"docs/api.md's error table has no {answer.status} `{answer.code}`"
        )
    stated("docs/api.md", f"`Retry-After: {gateway_errors.RETRY_AFTER}`")


def test_change_stream_is_one_journal_per_kind() -> None:
    """The gateway keeps one journal per kind of events, read through per-subscriber cursors
    (services/gateway/subscriptions.py), not a buffer per subscriber."""
    hub = subscriptions.Hub(1024)
    first, second = hub.register(durable=True), hub.register(durable=True)
    assert first.journal is second.journal is not hub.register(durable=False).journal
    stated("docs/architecture.md", "**One journal per kind** (`services/gateway/subscriptions.py`)")
    stated("docs/api.md", "renders every transaction once into one journal per kind")
    for doc in REFERENCE:
        assert "subscriber's buffer" not in read(doc.relative_to(ROOT).as_posix()), doc.name


def test_api_numbers() -> None:
    assert types.VERSION_MAX == 2**63 - 1
    fields = ", ".join(f'"{f}"' for f in retention.SNAPSHOT_FIELDS)
    stated("docs/api.md", "stay below 2^63", f"each as `{{{fields}}}`")
    ttl = seconds(snapshots.RESTORABLE_TTL_S)
    stated("docs/api.md", f"at most once per {ttl} per gateway worker")


# --- README.md ------------------------------------------------------------------------------


def test_readme_numbers() -> None:
    ids = config.Config().idempotency
    minutes = ids.request_id_window_s / 60
    assert gc.DEFAULT_GRACE_S == 3600
    names = [f"{stage} {'on port N' if i == 0 else f'N+{i}'}" for i, stage in enumerate(Stage)]
    stated(
        "README.md",
        f"at least the last {ids.request_id_memory:,} ids and {minutes:g} minutes",
        "keeps an old snapshot for an hour",
        f"one gateway worker per CPU core, at most {cli.MAX_AUTO_WORKERS}",
        ", ".join(names),
    )


# --- docs/operator.md -----------------------------------------------------------------------

OPERATOR = ROOT / "operator" / "weaseldb_operator"


def test_operator_module_table_lists_every_module() -> None:
    text = (ROOT / "docs/operator.md").read_text()
    section = text[text.index("## Modules") : text.index("## CRD reference")]
    listed = set(re.findall(r"^\| `(\w+\.py)` \|", section, re.M))
    present = {p.name for p in OPERATOR.glob("*.py")} - {"__init__.py"}
    assert listed == present, f"listed only: {listed - present}, missing: {present - listed}"
    for row in re.findall(r"^\| `(\w+)\.py` \|(.*)$", section, re.M):
        module, cells = row
        tree = ast.parse((OPERATOR / f"{module}.py").read_text())
        names = {
            n.name
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        }
        for called in re.findall(r"`(\w+)\(", cells):
            assert called in names, f"docs/operator.md: {module}.py has no {called}()"


def test_operator_numbers() -> None:
    def constant(module: str, name: str) -> Any:
        return source_constant(f"operator/weaseldb_operator/{module}.py", name)

    assert constant("observer", "INTERVAL_S") == 1.0
    ports = config.Ports()
    settle = constant("deletion", "SETTLE_S")
    grace = 2 * config.PersisterConfig().term_watch_interval_s + settle
    stated(
        "docs/operator.md",
        "Every second the observer",
        f"at most one promotion every {constant('actions', 'PROMOTION_PATIENCE_S'):g} s",
        f"at most every {constant('compactor', 'LAG_INTERVAL_S'):g} s",
        f"gives up after {constant('handlers', 'PURGE_TIMEOUT_S') // 60} minutes",
        f"every {constant('deletion', 'POLL_PODS_S')} s. Pods drain",
        f"twice the term watch interval plus {settle:g} s has passed",
        f"since the fence ({grace:g} s by default)",
        f"runs as uid {constant('resources', 'USER_ID')}",
        f"its rings ({mib(shmring.RING_BYTES)} each:",
        f"`pyspark=={constant('compaction', 'SPARK_VERSION')}`",
        f"{ports.gateway} gateway, {ports.sequencer} sequencer, {ports.resolver} resolver, "
        f"{ports.persister} persister",
        f"(the operator renders {constant('spec', 'STOP_LINGER_S'):g} s)",
        f"`leaderFailoverSeconds` or {constant('leadership', 'LEASE_QUIET_S'):g} s",
        f"{config.PersisterConfig().max_in_flight_requests - 1} at the S3 default",
        f"at most every {constant('readersweep', 'SWEEP_INTERVAL_S'):g} s, it lists",
        "`/var/lib/weaseldb-reader` (the reader's SQLite state)",
    )
    assert constant("readers", "STATE_DIR") == "/var/lib/weaseldb-reader"


# --- docs/tools.md --------------------------------------------------------------------------


def test_tools_pins_are_hack_tools_env() -> None:
    env = dict(
        line.split("=", 1)
        for line in (ROOT / "hack/tools.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    kubernetes = env["KUBERNETES_VERSION"]
    stated(
        "docs/tools.md",
        f"| minio | `github.com/minio/minio` | `{env['MINIO_RELEASE']}` = module "
        f"`{env['MINIO_MODULE_VERSION']}` |",
        f"| etcd | `go.etcd.io/etcd/server/v3` | `{env['ETCD_VERSION']}` |",
        f"| kubectl | `k8s.io/kubernetes/cmd/kubectl` | `{kubernetes}` |",
        f"| helm | `helm.sh/helm/v3/cmd/helm` | `{env['HELM_VERSION']}` |",
        f"| promtool | `github.com/prometheus/prometheus/cmd/promtool` | "
        f"`{env['PROMETHEUS_VERSION']}` |",
        f"`sigs.k8s.io/kind@{env['KIND_VERSION']}`",
        f"pyspark {env['PYSPARK_VERSION']}",
    )


# --- docs/operator.md's CRD reference -------------------------------------------------------


@cache
def _crd_spec() -> dict[str, Any]:
    import yaml

    crd = yaml.safe_load((ROOT / "charts/weaseldb/crds/weaseldb.io_weaseldbs.yaml").read_text())
    spec: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return spec["properties"]["spec"]  # type: ignore[no-any-return]


def _crd_field(path: str) -> dict[str, Any]:
    node = _crd_spec()
    for part in path.split("."):
        node = node["properties"][part]
    return node


def _crd_rows() -> list[tuple[str, str, str]]:
    text = (ROOT / "docs/operator.md").read_text()
    section = text[text.index("## CRD reference") : text.index("## What the operator creates")]
    rows = re.findall(r"^\| `([\w.]+)` \|([^|]*)\|([^|]*)\|", section, re.M)
    return [(field, default.strip(), limits.strip()) for field, default, limits in rows]


@pytest.mark.parametrize("row", _crd_rows(), ids=lambda row: row[0])
def test_crd_table_row_is_the_crd(row: tuple[str, str, str]) -> None:
    field, default, limits = row
    node = _crd_field(field)
    if re.fullmatch(r"[\w.-]+", default) and default not in ("none", "required"):
        assert str(node["default"]).lower() == default.lower(), f"{field} default"
    if default in ("none", "required"):
        assert "default" not in node, f"{field} has a default in the CRD"
    if span := re.fullmatch(r"(\d+)\.\.(\d+)", limits):
        assert (node["minimum"], node["maximum"]) == tuple(map(int, span.groups())), field
    if low := re.fullmatch(r">= (\d+)", limits):
        assert node["minimum"] == int(low.group(1)) and "maximum" not in node, field
    if "enum" in node and "," in limits:
        assert limits.split(", ") == node["enum"], field


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", camel).lower()


@pytest.mark.parametrize("section", ["pipeline", "resolver", "gateway"])
def test_crd_defaults_are_the_configuration_defaults(section: str) -> None:
    """docs/operator.md says the CRD's pipeline and gateway defaults are "as in
    docs/configuration.md": each CRD default equals the config default it becomes."""
    stated("docs/operator.md", "| as in docs/configuration.md |")
    target = getattr(config.Config(), {"pipeline": "persister"}.get(section, section))
    for name, node in _crd_field(section)["properties"].items():
        if "default" not in node or name == "serviceType":  # the Service's, not the pods'
            continue
        key = _snake(name)
        key = key if hasattr(target, key) else key.replace("_seconds", "_s")
        owner = config.Config() if key == "ring" else target  # the set's, in spec.pipeline
        assert getattr(owner, key) == node["default"], f"{section}.{name}"
