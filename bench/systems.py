"""What the benchmarks start and how they drive it: WeaselDB, etcd and the no-op server on
loopback, MinIO for the S3 runs, and the compiled load generator (bench/loadgen)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.certs import Authority  # noqa: E402
from tests.support.cluster import ProcessSet, free_port_block, short_run_dir  # noqa: E402
from tests.support.minio import MinioServer, minio_binary  # noqa: E402
from tests.support.waiting import http_ok, stop_process, wait_for  # noqa: E402
from weaseldb.core import config  # noqa: E402
from weaseldb.core.types import Stage  # noqa: E402
from weaseldb_cli.main import gateway_for_host  # noqa: E402

TOOLS = Path(os.environ.get("WEASELDB_TOOLS", Path.home() / ".cache/weaseldb/bin"))
LOADGEN = TOOLS / "loadgen"
#: Where every benchmark keeps the data of the systems it starts (see `data_dir`).
DATA_ROOT = TOOLS.parent / "bench-data"


def data_dir(prefix: str) -> Path:
    """A new, empty data directory for one system of one run. Its parent is marked as a
    top directory (chattr +T), so ext4 puts each one in a block group of its own: this
    VM's ext4 has no journal, and its inode allocator then skips every inode freed in the
    last minutes one at a time, so the tens of thousands of files one run removes made
    the next run's files slow to create (O_TMPFILE: 600-900 us in /tmp after earlier
    runs, 7 us in a fresh group, 2026-11-24) and a benchmark measured its predecessor's
    cleanup. Where chattr is refused, the directories still work, only without that."""
    if not DATA_ROOT.exists():
        DATA_ROOT.mkdir(parents=True)
        subprocess.run(["chattr", "+T", str(DATA_ROOT)], capture_output=True, check=False)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=DATA_ROOT))


def busy_cores(seconds: float = 2.0) -> float:
    """How many cores the machine spent outside idle over `seconds` (/proc/stat)."""

    def sample() -> tuple[int, int]:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(values), values[3] + values[4]  # all, idle + iowait

    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    return (os.cpu_count() or 1) * (1 - (idle1 - idle0) / max(total1 - total0, 1))


def _process_table() -> tuple[dict[int, int], dict[int, float]]:
    """(pid -> parent pid, pid -> CPU seconds) of every process (/proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    return parents, times


def process_tree(root: int, parents: dict[int, int] | None = None) -> set[int]:
    """`root` and its live descendants."""
    parents = parents if parents is not None else _process_table()[0]
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        tree.update(children)
        frontier += children
    return tree


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user + system) spent so far by `root` and every live descendant
    (children that exited are not counted, which suits long-lived services)."""
    parents, times = _process_table()
    return sum(times.get(pid, 0.0) for pid in process_tree(root, parents))


def pin_tree(root: int, cores: set[int]) -> None:
    """Every thread of `root` and its descendants may run only on `cores`."""
    for pid in process_tree(root):
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(task.name), cores)


def warn_if_busy() -> None:
    """The ratios are only worth something on a quiet machine: say so when it is not (a
    kind cluster left up by `make test` alone takes about a quarter of a core)."""
    busy = busy_cores()
    if busy > 0.15:
        print(
            f"warning: the machine is busy before the benchmark ({busy:.2f} cores); "
            "results will be noisy (make e2e-cluster-down stops the kind cluster)",
            flush=True,
        )


def write_summary(summary: dict[str, Any], out: str) -> None:
    """Print a benchmark's summary and keep it as JSON at `out` (bench/results/...)."""
    print(json.dumps(summary, indent=2))
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2))


def build_loadgen() -> Path:
    """Build bench/loadgen (Go, standard library only) when its source is newer."""
    source = REPO / "bench" / "loadgen"
    newest = max(p.stat().st_mtime for p in source.iterdir())
    if not LOADGEN.exists() or LOADGEN.stat().st_mtime < newest:
        LOADGEN.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["go", "build", "-o", str(LOADGEN), "."], cwd=source, check=True)
    return LOADGEN


def load(
    address: str,
    workload: str,
    connections: int,
    seconds: float,
    rate: float = 0,
    *,
    cacert: str = "",
    token_file: str = "",
) -> Any:
    """One run of the load generator; its JSON result. With `cacert` it speaks TLS, with
    `token_file` it sends that bearer token."""
    command = [str(LOADGEN), "-addr", address, "-workload", workload, "-c", str(connections)]
    command += ["-d", f"{seconds}s", "-rate", str(rate)]
    command += ["-cacert", cacert, "-token-file", token_file]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


@dataclass
class Running:
    address: str  # host:port the load goes to
    metrics_url: str = ""  # the persister's metrics, for WeaselDB
    pid: int = 0  # the `weaseldb up` process, for WeaselDB
    store: str = ""  # the store URL, for WeaselDB (readers and compaction open it too)
    cacert: str = ""  # the client port speaks TLS signed by this CA (`secured`)
    token_file: str = ""  # a bearer token the gateway's grants admit to every key


BENCH_TOKEN = "bench-token-0123456789abcdef"


def secured_config(folder: Path, *, auth: bool) -> tuple[Path, Path, Path]:
    """A config file turning on TLS on the client port (a CA of its own, a server
    certificate for 127.0.0.1) and, with `auth`, a grants file with one token for every
    key. Returns (config, CA file, token file)."""
    authority = Authority(folder / "pki")
    pair = authority.issue("bench-server", server=True)
    token = folder / "token"
    token.write_text(BENCH_TOKEN)
    lines = [
        "[gateway.tls]",
        f'cert_file = "{pair.cert}"',
        f'key_file = "{pair.key}"',
    ]
    if auth:
        grants = folder / "grants.toml"
        grants.write_text(f'[[grant]]\nname = "bench"\ntoken = "{BENCH_TOKEN}"\n')
        lines += ["[auth]", f'grants_file = "{grants}"']
    config_file = folder / "weasel.toml"
    config_file.write_text("\n".join(lines) + "\n")
    return config_file, authority.ca, token


@contextlib.contextmanager
def weaseldb(
    store: str = "dir",
    extra: list[str] | None = None,
    *,
    tls: bool = False,
    auth: bool = False,
    ring: str = "",
) -> Iterator[Running]:
    """A `weaseldb up` set on a directory store (fsync) or on a MinIO of its own; with
    `tls` its client port speaks TLS, with `auth` it also asks for a bearer token; `ring`
    chooses the ring transport (default: the configuration's)."""
    data = data_dir("wdb-bench-")
    run_dir = short_run_dir()
    minio = None
    if store == "s3":
        binary = minio_binary() or TOOLS / "minio"
        minio = MinioServer(binary, data_dir=data).start()
        os.environ.update(minio.env)
        url = minio.store_url(minio.new_bucket())
    else:
        url = f"dir:{data}"
    # What `weaseldb up` itself chooses: one gateway worker per core (the test helper would
    # otherwise pin one).
    arguments = ["--workers", str(gateway_for_host(config.build({})).workers)]
    arguments += ["--ring", ring] if ring else []
    ca: Path | None = None
    token_file = ""
    pki = data_dir("wdb-bench-pki-")  # beside the store, never inside it
    if tls:
        config_file, ca, token = secured_config(pki, auth=auth)
        arguments += ["--config", str(config_file)]
        token_file = str(token) if auth else ""
    cluster = ProcessSet(
        url, free_port_block(), run_dir, extra=arguments + (extra or []), ca_file=ca
    ).start()
    try:
        assert cluster.process is not None
        yield Running(
            f"127.0.0.1:{cluster.port}",
            f"http://127.0.0.1:{cluster.port + 3}/metrics",
            cluster.process.pid,
            url,
            str(ca or ""),
            token_file,
        )
    finally:
        cluster.stop()
        if minio is not None:
            minio.destroy()
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(pki, ignore_errors=True)
        shutil.rmtree(run_dir, ignore_errors=True)


@contextlib.contextmanager
def etcd() -> Iterator[Running]:
    """etcd (the one `make tools` builds), single member, default fsync."""
    data = data_dir("etcd-bench-")
    port = free_port_block(2)
    client, peer = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"
    process = subprocess.Popen(
        [
            str(TOOLS / "etcd"),
            *("--data-dir", str(data), "--listen-client-urls", client),
            *("--advertise-client-urls", client, "--listen-peer-urls", peer),
            *("--initial-advertise-peer-urls", peer, "--initial-cluster", f"default={peer}"),
            *("--log-level", "error"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: http_ok(f"{client}/health"), 30, "etcd")
        yield Running(f"127.0.0.1:{port}", pid=process.pid)
    finally:
        stop_process(process)
        shutil.rmtree(data, ignore_errors=True)


@contextlib.contextmanager
def noop() -> Iterator[Running]:
    """A no-op POST on the commit route's HTTP stack (bench/noop_server.py)."""
    port = free_port_block(1)
    server = subprocess.Popen([sys.executable, str(REPO / "bench" / "noop_server.py"), str(port)])
    try:
        wait_for(lambda: _answers(f"http://127.0.0.1:{port}/noop"), 30, "no-op server")
        yield Running(f"127.0.0.1:{port}")
    finally:
        stop_process(server)


def _answers(url: str) -> bool:
    try:
        return httpx.post(url, content=b"{}", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def persister_counters(metrics_url: str) -> dict[str, float]:
    wanted = ("weaseldb_persister_puts_total", "weaseldb_committed_version")
    text = httpx.get(metrics_url).text
    return {
        name: float(value)
        for name, value in (line.split(" ", 1) for line in text.splitlines() if " " in line)
        if name in wanted
    }


LAG = "weaseldb_event_loop_lag_seconds"
GC_PAUSE = "weaseldb_gc_pause_seconds"


def stall_samples(gateway_port: int) -> dict[str, dict[str, float]]:
    """Every process's cumulative event-loop lag histogram and GC pause counts and sums
    (weaseldb/runtime/stalls.py), keyed by its `process` label; a sample is keyed by its name and
    its `le` (lag buckets) or `generation` (GC). One scrape of the gateway's port answers
    for all its workers (weaseldb/runtime/workermetrics.py)."""
    found: dict[str, dict[str, float]] = {}
    for offset in range(len(Stage)):  # `weaseldb up --port` gives them in Stage order
        text = httpx.get(f"http://127.0.0.1:{gateway_port + offset}/metrics").text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if family.name == LAG:
                    key = f"{sample.name}:{sample.labels.get('le', '')}"
                elif family.name == GC_PAUSE and "le" not in sample.labels:
                    key = f"{sample.name}:{sample.labels['generation']}"
                else:
                    continue
                found.setdefault(sample.labels["process"], {})[key] = sample.value
    return found


def stall_summary(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]
) -> dict[str, dict[str, float]]:
    """Per process, what happened between two `stall_samples`: how many lag samples, the
    bound under which 99 % of them fell and how many exceeded 10 ms; GC pauses by
    generation (count and total ms)."""
    summary: dict[str, dict[str, float]] = {}
    for process, now in sorted(after.items()):
        then = before.get(process, {})
        delta = {key: value - then.get(key, 0.0) for key, value in now.items()}
        samples = delta.get(f"{LAG}_count:", 0.0)
        buckets = sorted(
            (float(key.split(":")[1]), count)
            for key, count in delta.items()
            if key.startswith(f"{LAG}_bucket:")
        )
        p99 = next(le for le, count in buckets if count >= 0.99 * samples)
        row = {
            "lag_samples": samples,
            "lag_p99_at_most_ms": p99 * 1000,
            "lag_over_10ms": samples - delta.get(f"{LAG}_bucket:0.01", 0.0),
        }
        for generation in ("0", "1", "2"):
            row[f"gc{generation}_pauses"] = delta.get(f"{GC_PAUSE}_count:{generation}", 0.0)
            row[f"gc{generation}_ms"] = round(delta.get(f"{GC_PAUSE}_sum:{generation}", 0) * 1e3, 2)
        summary[process] = row
    return summary
