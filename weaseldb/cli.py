"""The `weaseldb` command.

weaseldb up [--data-dir DIR | --store URL] [--port N] [--run-dir DIR] [--config FILE]
weaseldb service {gateway,sequencer,resolver,persister} --config FILE [--worker I]
weaseldb compact [--data-dir DIR | --store URL] [--gc] [--master local[*]]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import sys
from pathlib import Path
from typing import Any

from weaseldb import config as config_module
from weaseldb.config import Config, ConfigError, GatewayConfig

STAGES = ("gateway", "sequencer", "resolver", "persister")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="weaseldb", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="run the four services in the foreground")
    up.add_argument("--config", help="TOML or JSON configuration file")
    up.add_argument("--data-dir", help="directory store (same as --store dir:DIR)")
    up.add_argument("--store", help="dir:PATH or s3://BUCKET/PREFIX?endpoint=URL&region=R")
    up.add_argument("--port", type=int, help="client port; the other services use the next three")
    up.add_argument("--host", help="address to listen on")
    up.add_argument("--run-dir", help="directory for the ring's sockets (keep it short)")
    up.add_argument("--workers", type=int, help="gateway worker processes")

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

    operator = commands.add_parser("operator", help="run the Kubernetes operator (kopf)")
    operator.add_argument("--namespace", help="watch only this namespace (default: all)")

    service = commands.add_parser("service", help="run one service (used by `up` and pods)")
    service.add_argument("name", choices=STAGES)
    service.add_argument("--config", required=True)
    service.add_argument("--worker", type=int, default=0)
    return parser


def _up_overrides(args: argparse.Namespace) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    if args.data_dir and args.store:
        raise ConfigError("use either --data-dir or --store, not both")
    if args.data_dir:
        overrides["store"] = f"dir:{Path(args.data_dir).resolve()}"
    if args.store:
        overrides["store"] = args.store
    if args.port is not None:
        for offset, name in enumerate(STAGES):
            overrides[f"ports.{name}"] = args.port + offset if args.port else 0
    for flag, key in (("host", "host"), ("run_dir", "run_dir"), ("workers", "gateway.workers")):
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
    from weaseldb.supervisor import ProcessSet

    cfg = config_module.load(args.config, _up_overrides(args))
    run_dir = Path(cfg.run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = cfg.model_copy(update={"run_dir": str(run_dir), "gateway": gateway_for_host(cfg)})
    if cfg.store.startswith("dir:"):
        Path(cfg.store.removeprefix("dir:")).mkdir(parents=True, exist_ok=True)
    config_path = run_dir / "config.json"
    config_path.write_text(cfg.model_dump_json(indent=2))
    processes = ProcessSet(cfg, config_path)
    processes.start()
    print(
        f"WeaselDB serving on http://{cfg.host}:{cfg.ports.gateway} (store {cfg.store})", flush=True
    )
    return processes.run()


def cmd_compact(args: argparse.Namespace) -> int:
    try:
        from weaseldb_compaction import cli as compaction_cli
    except ImportError as e:
        raise ConfigError(f"pyspark is not installed ({e}): pip install 'weaseldb[spark]'") from e

    store = _up_overrides(
        argparse.Namespace(
            data_dir=args.data_dir, store=args.store, port=None, host=None, run_dir=None,
            workers=None,
        )
    ).get("store")  # fmt: skip
    if store is None:
        raise ConfigError("compact needs --data-dir DIR or --store URL")
    return compaction_cli.compact(
        store,
        master=args.master,
        collect_garbage=args.gc,
        upto_batch=args.upto_batch,
        gc_grace_s=args.gc_grace_seconds,
        driver_memory=args.driver_memory,
    )


def cmd_service(args: argparse.Namespace) -> int:
    import uvloop

    from weaseldb.service import configure_logging

    cfg = config_module.load(args.config)
    label = f"{args.name}-{args.worker}" if args.name == "gateway" else args.name
    configure_logging(label)
    uvloop.install()
    return asyncio.run(_serve(args.name, cfg, args.worker))


async def _serve(name: str, cfg: Config, worker: int) -> int:
    from starlette.types import ASGIApp

    from weaseldb import tracing
    from weaseldb.blobstore import BlobStore, open_store
    from weaseldb.ring import Ring
    from weaseldb.service import Stage, listening_socket, run_stage

    ring = Ring()
    store: BlobStore | None = None
    stage: Stage
    app: ASGIApp
    port = getattr(cfg.ports, name)
    if name == "gateway":
        from services.gateway.app import build as build_gateway

        stage, app = build_gateway(cfg, ring, worker)
    elif name == "sequencer":
        from services.sequencer.app import build as build_sequencer

        stage, app = build_sequencer(cfg, ring)
    elif name == "resolver":
        from services.resolver.app import build as build_resolver

        stage, app = build_resolver(cfg, ring)
    else:
        from services.persister.app import build as build_persister

        store = open_store(cfg.store, pool_size=cfg.persister.target_pool_size)
        stage, app = build_persister(cfg, ring, store)
    sock = listening_socket(
        cfg.host, port, reuse_port=name == "gateway" and cfg.gateway.workers > 1
    )
    label = f"{name}-{worker}" if name == "gateway" else name
    tracing.setup(label)
    quiet_garbage_collector()
    try:
        return await run_stage(label, stage, app, sock, cfg.run_dir, cfg.gateway.request_timeout_s)
    finally:
        tracing.shutdown()
        if store is not None:
            await store.close()
        await ring.flush()
        ring.close()


#: Allocations between two young-generation collections (CPython's default is 700). A
#: young collection's pause grows with it, ~150 ns per object here: 50,000 made pauses of
#: 8 ms (median) to 20 ms in a gateway worker, which every request queued there waited
#: out; 5,000 makes them 0.7 ms (p90 1.7 ms) for 1.5x the collector's CPU (still ~0.1 %
#: of a core). docs/architecture.md, "Event-loop lag and collector pauses".
GC_YOUNG_THRESHOLD = 5_000


def quiet_garbage_collector() -> None:
    """Everything built at start (modules, apps, tables) lives as long as the process:
    freezing it keeps every later collection from walking it again. Per commit the hot
    path makes short-lived objects, which reference counting frees; a young generation of
    GC_YOUNG_THRESHOLD keeps the collections that remain both rare and short."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s weaseldb %(levelname)s %(message)s")
    try:
        if args.command == "up":
            return cmd_up(args)
        if args.command == "operator":
            from weaseldb_operator.main import run_operator

            return run_operator(namespace=args.namespace)
        if args.command == "compact":
            return cmd_compact(args)
        return cmd_service(args)
    except ConfigError as e:
        print(f"weaseldb: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
