"""The `weaseldb` command: the composition root, which maps each verb to what builds it.

It sits above every other package (the services, the operator, the Spark job and the shared
floor below them), so it is the one place that may import them all; the heavy or optional
wings (the operator's kopf, the job's pyspark) are imported only by the verb that runs them.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

from weaseldb.core import channels, durations
from weaseldb.core import config as config_module
from weaseldb.core.config import Config, ConfigError, GatewayConfig
from weaseldb.core.gc import KeepHistory
from weaseldb.core.types import Stage
from weaseldb_cli import backup as backup_cli
from weaseldb_cli import kv

DESCRIPTION = """WeaselDB: the write side of a key-value database, durable in an object store.

weaseldb up [--data-dir DIR | --store URL] [--port N] [--run-dir DIR] [--config FILE]
weaseldb service {gateway,sequencer,resolver,persister} --config FILE [--worker I]
weaseldb compact [--data-dir DIR | --store URL] [--gc [--keep-history DURATION]] [--master local[*]]
weaseldb restore --from URL --into URL [--to-version V | --to-time T] [--master local[*]]
weaseldb operator [--namespace NS]
weaseldb switchover NAME [--to POD] [--namespace NS] [--timeout S]
weaseldb reader --upstream URL [--store URL | --data-dir DIR] --state-dir DIR [--port 8090]
weaseldb kv {put,get,del,range,watch,status,txn} ... [--url URL] [--reader URL] [-o json]
weaseldb backup --from URL --to URL [--parallelism N]
weaseldb backup verify --store URL
"""

#: How `weaseldb up` starts one service: this package, run by the same interpreter.
SERVICE_COMMAND = (sys.executable, "-m", "weaseldb_cli", "service")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="weaseldb",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="run the four services in the foreground")
    up.add_argument("--config", help="TOML or JSON configuration file")
    up.add_argument("--data-dir", help="directory store (same as --store dir:DIR)")
    up.add_argument("--store", help="dir:PATH or s3://BUCKET/PREFIX?endpoint=URL&region=R")
    up.add_argument("--port", type=int, help="client port; the other services use the next three")
    up.add_argument("--host", help="address to listen on")
    up.add_argument("--run-dir", help="directory for the ring's sockets (keep it short)")
    up.add_argument("--workers", type=int, help="gateway worker processes")
    up.add_argument("--ring", help="how the stages pass frames: unix (default), shm or tcp")

    compact = commands.add_parser(
        "compact", help="fold the log into a Parquet snapshot with Spark (local[*])"
    )
    compact.add_argument("--data-dir", help="directory store (same as --store dir:DIR)")
    compact.add_argument("--store", help="dir:PATH or s3://BUCKET/PREFIX?endpoint=URL&region=R")
    compact.add_argument("--gc", action="store_true", help="garbage-collect after publishing")
    compact.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    compact.add_argument("--upto-batch", type=int, help="fold no batch newer than this number")
    compact.add_argument(
        "--gc-grace-seconds",
        type=float,
        default=3600.0,
        help="readers' grace: GC deletes an old snapshot this long after a newer one was "
        "published, and the files of an unpublished run once its heartbeat is this old",
    )
    compact.add_argument("--driver-memory", default="2g", help="Spark driver memory")
    compact.add_argument(
        "--keep-history",
        type=durations.duration_argument,
        default=0,
        metavar="DURATION",
        help="GC keeps every version committed this long ago or later restorable (90s, 30m, "
        "12h, 7d): its cut stays behind the window (docs/backup.md)",
    )
    compact.add_argument(
        "--keep-history-versions",
        type=durations.count_argument,
        default=0,
        metavar="N",
        help="GC keeps the last N versions restorable",
    )

    _restore_parser(commands)

    operator = commands.add_parser("operator", help="run the Kubernetes operator (kopf)")
    operator.add_argument("--namespace", help="watch only this namespace (default: all)")

    switch = commands.add_parser(
        "switchover", help="move a Kubernetes database's leader to a standby (kubeconfig)"
    )
    switch.add_argument("name", help="the WeaselDB resource")
    switch.add_argument("--to", help="the pod to lead (default: the first live standby)")
    switch.add_argument("--namespace", "-n", default="default")
    switch.add_argument(
        "--timeout", type=float, default=60, help="seconds to wait for it (0: do not wait)"
    )

    reader = commands.add_parser(
        "reader", help="run a read replica that follows the change stream (docs/reader.md)"
    )
    reader.add_argument("--upstream", help="the database's client URL (default from config)")
    reader.add_argument("--store", help="the object store, for snapshots (dir:PATH or s3://...)")
    reader.add_argument("--data-dir", help="directory store (same as --store dir:DIR)")
    reader.add_argument("--state-dir", help="where the reader keeps its SQLite state")
    reader.add_argument("--port", type=int, help="HTTP port (default 8090; 0: any)")
    reader.add_argument("--host", help="address to listen on")
    reader.add_argument("--horizon-seconds", type=float, help="how long versions stay readable")
    reader.add_argument("--policy-id", help="retention policy id (default reader-<hostname>)")
    reader.add_argument("--config", help="TOML or JSON configuration file (its [reader] section)")

    kv.add_parser(commands)
    backup_cli.add_parser(commands)

    service = commands.add_parser("service", help="run one service (used by `up` and pods)")
    service.add_argument("name", choices=[stage.value for stage in Stage])
    service.add_argument("--config", required=True)
    service.add_argument("--worker", type=int, default=0)
    return parser


def _store_url(data_dir: str | None, store: str | None) -> str | None:
    """The store named by `--data-dir DIR` or `--store URL` (not both), if either."""
    if data_dir and store:
        raise ConfigError("use either --data-dir or --store, not both")
    return f"dir:{Path(data_dir).resolve()}" if data_dir else store


def _up_overrides(args: argparse.Namespace) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    store = _store_url(args.data_dir, args.store)
    if store:
        overrides["store"] = store
    if args.port is not None:
        for offset, name in enumerate(Stage):
            overrides[f"ports.{name}"] = args.port + offset if args.port else 0
    for flag, key in (
        ("host", "host"),
        ("run_dir", "run_dir"),
        ("workers", "gateway.workers"),
        ("ring", "ring"),
    ):
        if getattr(args, flag) is not None:
            overrides[key] = getattr(args, flag)
    return overrides


#: Most gateway workers `weaseldb up` starts by itself.
MAX_AUTO_WORKERS = 4


def gateway_for_host(cfg: Config) -> GatewayConfig:
    """Unless the configuration says how many, one gateway worker per CPU core (at most
    MAX_AUTO_WORKERS): HTTP is where a commit spends most of its CPU, and one worker per
    core measured best (bench: 2 workers on 2 cores took 4,520 commits/s at 64 connections
    against 3,545 for 1, and 3 workers 3,964)."""
    if "workers" in cfg.gateway.model_fields_set:
        return cfg.gateway
    workers = max(1, min(MAX_AUTO_WORKERS, os.cpu_count() or 1))
    return cfg.gateway.model_copy(update={"workers": workers})


def cmd_up(args: argparse.Namespace) -> int:
    from weaseldb.runtime.supervisor import ProcessSet

    cfg = config_module.load(args.config, _up_overrides(args))
    run_dir = Path(cfg.run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = cfg.model_copy(update={"run_dir": str(run_dir), "gateway": gateway_for_host(cfg)})
    if cfg.store.startswith("dir:"):
        Path(cfg.store.removeprefix("dir:")).mkdir(parents=True, exist_ok=True)
    config_path = channels.config_path(run_dir)
    config_path.write_text(cfg.model_dump_json(indent=2))
    processes = ProcessSet(cfg, config_path, SERVICE_COMMAND)
    processes.start()
    scheme = "https" if cfg.gateway.tls.enabled else "http"
    print(
        f"WeaselDB serving on {scheme}://{cfg.host}:{cfg.ports.gateway} (store {cfg.store})",
        flush=True,
    )
    return processes.run()


def cmd_compact(args: argparse.Namespace) -> int:
    try:
        from weaseldb_compaction import cli as compaction_cli
    except ImportError as e:
        raise ConfigError(f"pyspark is not installed ({e}): pip install 'weaseldb[spark]'") from e

    store = _store_url(args.data_dir, args.store)
    if store is None:
        raise ConfigError("compact needs --data-dir DIR or --store URL")
    if (args.keep_history or args.keep_history_versions) and not args.gc:
        raise ConfigError("--keep-history and --keep-history-versions bound --gc: add --gc")
    return compaction_cli.compact(
        store,
        master=args.master,
        collect_garbage=args.gc,
        upto_batch=args.upto_batch,
        gc_grace_s=args.gc_grace_seconds,
        driver_memory=args.driver_memory,
        keep=KeepHistory(args.keep_history, args.keep_history_versions),
    )


def _restore_parser(commands: Any) -> None:
    restore = commands.add_parser(
        "restore", help="rebuild a database at a past version into an empty prefix (Spark)"
    )
    restore.add_argument("--from", dest="source", required=True, help="the source store URL")
    restore.add_argument("--into", required=True, help="the destination store URL (empty)")
    target = restore.add_mutually_exclusive_group()
    target.add_argument("--to-version", type=int, help="the version to restore")
    target.add_argument(
        "--to-time", help="RFC 3339 time: the last version committed at or before it"
    )
    restore.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    restore.add_argument("--driver-memory", default="2g", help="Spark driver memory")


def cmd_restore(args: argparse.Namespace) -> int:
    """Exit 2 with `weaseldb restore: error: ...` and nothing written on any refusal."""
    try:
        from weaseldb.core.restore import RestoreRefused, parse_time

        try:
            from weaseldb_compaction import restore_cli
            from weaseldb_compaction.restore import RestoreOptions
        except ImportError as e:
            raise ConfigError(
                f"pyspark is not installed ({e}): pip install 'weaseldb[spark]'"
            ) from e
        try:
            at = None if args.to_time is None else parse_time(args.to_time)
        except RestoreRefused as e:
            raise ConfigError(str(e)) from e
        options = RestoreOptions(args.source, args.into, args.to_version, at)
        return restore_cli.restore(options, master=args.master, driver_memory=args.driver_memory)
    except ConfigError as e:
        print(f"weaseldb restore: error: {e}", file=sys.stderr)
        return 2


def cmd_switchover(args: argparse.Namespace) -> int:
    from weaseldb_operator.kube import KubeError
    from weaseldb_operator.switchover import SwitchoverError, run

    try:
        pod = asyncio.run(run(args.namespace, args.name, args.to, args.timeout))
    except (SwitchoverError, KubeError) as e:
        print(f"weaseldb switchover: {e}", file=sys.stderr)
        return 1
    print(f"{args.namespace}/{args.name}: {pod} {'leads' if args.timeout else 'asked to lead'}")
    return 0


def cmd_reader(args: argparse.Namespace) -> int:
    import uvloop

    from weaseldb.reader.service import serve
    from weaseldb.runtime.service import configure_logging
    from weaseldb.runtime.stores import open_store

    section = {
        "upstream": args.upstream,
        "state_dir": args.state_dir,
        "port": args.port,
        "horizon_seconds": args.horizon_seconds,
        "policy_id": args.policy_id,
    }
    flags = {
        **{f"reader.{name}": value for name, value in section.items()},
        "host": args.host,
        "store": f"dir:{args.data_dir}" if args.data_dir else args.store,
    }
    cfg = config_module.load(args.config, {k: v for k, v in flags.items() if v is not None})
    # Snapshots need the store: from a flag, or from a configuration file that names one
    # (not the default `dir:./data`, which would be a guess).
    store_url = cfg.store if "store" in cfg.model_fields_set else None
    configure_logging("reader")
    uvloop.install()

    async def run() -> int:
        store = open_store(store_url) if store_url else None
        return await serve(cfg.reader, cfg.host, store)

    return asyncio.run(run())


def cmd_service(args: argparse.Namespace) -> int:
    import uvloop

    from weaseldb.runtime.service import configure_logging

    cfg = config_module.load(args.config)
    stage = Stage(args.name)
    if stage == Stage.GATEWAY:
        _share_gateway_metrics(cfg, args.worker)
    configure_logging(stage.process(args.worker))
    uvloop.install()
    return asyncio.run(_serve(stage, cfg, args.worker))


def _share_gateway_metrics(cfg: Config, worker: int) -> None:
    """The workers share the client port, so one scrape answers for all of them; before
    the services' modules are imported (weaseldb.runtime.workermetrics)."""
    from weaseldb.runtime import workermetrics

    workers = [Stage.GATEWAY.process(w) for w in range(cfg.gateway.workers)]
    workermetrics.share(cfg.run_dir, Stage.GATEWAY.process(worker), workers)


async def _serve(name: Stage, cfg: Config, worker: int) -> int:
    from starlette.types import ASGIApp

    from weaseldb.core.store import BlobStore
    from weaseldb.runtime import stalls, tracing
    from weaseldb.runtime.ring import Ring, Transport
    from weaseldb.runtime.service import StageLoop, listening_socket, run_stage
    from weaseldb.runtime.shmring import ShmRing
    from weaseldb.runtime.stores import open_store

    ring: Transport = ShmRing() if cfg.ring == "shm" else Ring()
    store: BlobStore | None = None
    stage: StageLoop
    app: ASGIApp
    port = cfg.ports.of(name)
    if name == Stage.GATEWAY:
        from services.gateway.app import build as build_gateway

        stage, app = build_gateway(cfg, ring, worker)
    elif name == Stage.SEQUENCER:
        from services.sequencer.app import build as build_sequencer

        stage, app = build_sequencer(cfg, ring)
    elif name == Stage.RESOLVER:
        from services.resolver.app import build as build_resolver

        stage, app = build_resolver(cfg, ring)
    else:
        from services.persister.app import build as build_persister

        store = open_store(cfg.store, pool_size=cfg.persister.target_pool_size)
        stage, app = build_persister(cfg, ring, store)
    sock = listening_socket(
        cfg.host, port, reuse_port=name == Stage.GATEWAY and cfg.gateway.workers > 1
    )
    label = name.process(worker)
    tracing.setup(label)
    stalls.quiet_garbage_collector()
    try:
        # TLS on the client port only: the stages' own ports serve probes and scrapes.
        tls = cfg.gateway.tls if name == Stage.GATEWAY else None
        return await run_stage(
            label, stage, app, sock, cfg.run_dir, cfg.gateway.request_timeout_s, tls
        )
    finally:
        tracing.shutdown()
        if store is not None:
            await store.close()
        await ring.flush()
        ring.close()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "kv":
        return kv.run(args)
    if args.command == "backup":
        return backup_cli.run(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s weaseldb %(levelname)s %(message)s")
    try:
        if args.command == "up":
            return cmd_up(args)
        if args.command == "operator":
            from weaseldb_operator.main import run_operator

            return run_operator(namespace=args.namespace)
        if args.command == "compact":
            return cmd_compact(args)
        if args.command == "restore":
            return cmd_restore(args)
        if args.command == "switchover":
            return cmd_switchover(args)
        if args.command == "reader":
            return cmd_reader(args)
        return cmd_service(args)
    except ConfigError as e:
        print(f"weaseldb: {e}", file=sys.stderr)
        return 2
