"""`weaseldb backup --from URL --to URL` and `weaseldb backup verify --store URL`
(docs/backup.md, "A second copy").

The last stdout line is one JSON object; exit 0 on success (verify: only when the backup
checked out), 1 when verify found problems, 2 on an error (stderr
`weaseldb backup: error: ...`, and a copy that refuses before it starts writes nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from typing import Any

from weaseldb.core.backup import BackupError
from weaseldb.core.errors import WeaselError

#: Exit codes.
OK, PROBLEMS, ERROR = 0, 1, 2


def add_parser(commands: Any) -> None:
    """The `backup` verb (and its `verify`), on the `weaseldb` parser's subcommands."""
    parser = commands.add_parser(
        "backup", help="copy a database's snapshots and log into a second store (a backup)"
    )
    parser.add_argument("--from", dest="source", help="the database's store URL")
    parser.add_argument("--to", dest="dest", help="the backup's store URL")
    parser.add_argument(
        "--parallelism", type=int, default=16, help="objects copied at once (default 16)"
    )
    actions = parser.add_subparsers(dest="action")
    verify = actions.add_parser("verify", help="read a backup end to end; its restorable range")
    verify.add_argument("--store", required=True, help="the backup's store URL")
    verify.add_argument("--parallelism", type=int, default=16, help="objects read at once")


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="weaseldb backup: %(message)s")
    try:
        if args.parallelism < 1:
            raise ValueError("--parallelism must be at least 1")
        if args.action == "verify":
            report = asyncio.run(_verify(args.store, args.parallelism))
            print(json.dumps(report.line()), flush=True)
            return OK if report.ok else PROBLEMS
        if not args.source or not args.dest:
            raise ValueError("backup needs --from URL and --to URL (or: backup verify --store)")
        line = asyncio.run(_copy(args.source, args.dest, args.parallelism))
    except (BackupError, WeaselError, ValueError) as e:
        print(f"weaseldb backup: error: {_message(e)}", file=sys.stderr)
        return ERROR
    print(json.dumps(line), flush=True)
    return OK


def _message(error: Exception) -> str:
    text = str(error) or type(error).__name__
    return (
        text if isinstance(error, (BackupError, ValueError)) else f"{type(error).__name__}: {text}"
    )


def _shown(url: str) -> str:
    """A store URL without its query (endpoint, credentials' name) for messages."""
    return url.split("?", 1)[0]


async def _copy(source_url: str, dest_url: str, parallelism: int) -> dict[str, Any]:
    from weaseldb.core.holdings import holdings
    from weaseldb.runtime import backup
    from weaseldb.runtime.stores import open_store

    if _shown(source_url) == _shown(dest_url):
        raise ValueError("--from and --to are the same store")
    source, dest = open_store(source_url), open_store(dest_url)
    try:
        if await holdings(source) is None:
            raise BackupError(f"the source {_shown(source_url)} holds no database")
        return await backup.copy(source, dest, parallelism)
    finally:
        await source.close()
        await dest.close()


async def _verify(url: str, parallelism: int) -> Any:
    from weaseldb.runtime import backup
    from weaseldb.runtime.stores import open_store

    store = open_store(url)
    try:
        return await backup.verify(store, parallelism)
    finally:
        await store.close()
