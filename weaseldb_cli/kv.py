"""`weaseldb kv ...`: data verbs like etcdctl's, over weaseldb.client (docs/client.md, "The
command line").

Writes (`put`, `del`, `txn`) go through the client, so they retry and never apply twice;
reads (`get`, `range`) through a reader; `watch` follows the change stream; `status` asks
what became of a request id. Keys and values are UTF-8 text unless `--base64`; `-o json`
prints one JSON document (one per line for `watch`). Exit codes: 0 done, 1 a missing key,
a commit not committed or the database not answering, 2 bad input (the message says what).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any, cast

import orjson

from weaseldb.client import (
    BadRequest,
    ChangeEvent,
    Client,
    CommitResult,
    Committed,
    Credentials,
    KeyValue,
    NotCommitted,
    PointRead,
    RangeRead,
    TooLarge,
    TooOld,
    WeaselDBError,
)
from weaseldb.client.model import Operation, Precondition
from weaseldb.client.protocol import PAGE
from weaseldb.client.transport import DEFAULT_URL
from weaseldb.core.changes import KeyFilter
from weaseldb.core.protocol import Delete, RangeDelete, Write
from weaseldb.core.types import Version

#: Exit codes.
OK, MISSING, BAD_INPUT = 0, 1, 2


class InputError(ValueError):
    """Bad input from the command line or a transaction file: exit 2 with this message."""


def add_parser(commands: Any) -> None:
    """The `kv` verb and its sub-verbs, on the `weaseldb` parser's subcommands."""
    kv = commands.add_parser("kv", help="put, get, delete, range, watch, txn, status (data)")
    verbs = kv.add_subparsers(dest="verb", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=DEFAULT_URL, help=f"the gateway (default {DEFAULT_URL})")
    common.add_argument(
        "--reader", help="a reader's URL, for get and range (default: catch up in-process)"
    )
    common.add_argument(
        "--store", help="without --reader: the object store to bootstrap from (dir:PATH, s3://)"
    )
    common.add_argument(
        "--token-file", help="a file holding the bearer token (or $WEASELDB_TOKEN: the token)"
    )
    common.add_argument("--cacert", help="CA bundle that signs the server's certificate (https)")
    common.add_argument("--cert", dest="client_cert", help="client certificate (mTLS), PEM")
    common.add_argument("--key", dest="client_key", help="the client certificate's key, PEM")
    common.add_argument("--base64", action="store_true", help="keys and values are base64")
    common.add_argument("-o", "--output", choices=["text", "json"], default="text")
    common.add_argument("--timeout", type=float, default=30.0, help="seconds to keep retrying")

    put = verbs.add_parser("put", parents=[common], help="write KEY = VALUE")
    put.add_argument("key")
    put.add_argument("value")
    put.add_argument("--request-id", help="the commit's request id (default: a new one)")
    delete = verbs.add_parser("del", parents=[common], help="delete KEY (or [KEY, END))")
    delete.add_argument("key")
    delete.add_argument("end", nargs="?", help="delete the range [KEY, END) instead")
    delete.add_argument("--prefix", action="store_true", help="delete every key under KEY")
    delete.add_argument("--request-id", help="the commit's request id (default: a new one)")
    get = verbs.add_parser("get", parents=[common], help="print KEY's value (exit 1: missing)")
    get.add_argument("key")
    get.add_argument("--version", type=int, help="read at this version (default: the newest)")
    _consistency(get)
    scan = verbs.add_parser("range", parents=[common], help="print the keys in [BEGIN, END)")
    scan.add_argument("begin", nargs="?")
    scan.add_argument("end", nargs="?")
    scan.add_argument("--prefix", help="every key starting with PREFIX instead")
    scan.add_argument("--limit", type=int, help="at most this many keys")
    scan.add_argument("--version", type=int, help="read at this version (default: the newest)")
    _consistency(scan)
    watch = verbs.add_parser("watch", parents=[common], help="print transactions as they commit")
    watch.add_argument("--prefix", help="only those touching keys starting with PREFIX")
    watch.add_argument("--after", type=int, help="from the version after this (default: now)")
    watch.add_argument("--count", type=int, help="stop after this many transactions")
    status = verbs.add_parser("status", parents=[common], help="what became of a request id")
    status.add_argument("request_id")
    status.add_argument("--min-version", type=int, help="search the log from this version")
    txn = verbs.add_parser("txn", parents=[common], help="commit a JSON transaction")
    txn.add_argument("file", nargs="?", default="-", help="the /v1/commit body (default stdin)")


def run(args: argparse.Namespace) -> int:
    verbs: dict[str, Callable[[argparse.Namespace, Client], int]] = {
        "put": _put, "del": _delete, "get": _get, "range": _range, "watch": _watch,
        "status": _status, "txn": _txn,
    }  # fmt: skip
    try:
        with _client(args) as client:
            return verbs[args.verb](args, client)
    except (InputError, BadRequest, TooLarge) as e:
        print(f"weaseldb kv {args.verb}: {e}", file=sys.stderr)
        return BAD_INPUT
    except WeaselDBError as e:
        print(f"weaseldb kv {args.verb}: {type(e).__name__}: {e}", file=sys.stderr)
        return MISSING
    except KeyboardInterrupt:
        return OK


@contextmanager
def _client(args: argparse.Namespace) -> Iterator[Client]:
    from weaseldb.client import RetryPolicy

    policy = RetryPolicy(deadline_s=args.timeout, settle_s=args.timeout / 2)
    with Client(args.url, args.reader, policy=policy, credentials=credentials(args)) as client:
        yield client


def credentials(args: argparse.Namespace) -> Credentials:
    """--token-file (or the WEASELDB_TOKEN environment variable), --cacert, --cert, --key."""
    return Credentials(
        token=None if args.token_file else os.environ.get("WEASELDB_TOKEN") or None,
        token_file=args.token_file,
        ca_file=args.cacert,
        cert_file=args.client_cert,
        key_file=args.client_key,
    )


# Bytes in and out


def _key(args: argparse.Namespace, text: str, what: str = "key") -> bytes:
    if not args.base64:
        return text.encode()
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as e:
        raise InputError(f"{what} {text!r} is not base64 ({e})") from e


def _show(args: argparse.Namespace, data: bytes, what: str = "value") -> str:
    if args.base64:
        return base64.b64encode(data).decode()
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise InputError(f"a {what} is not UTF-8 text: use --base64") from None


def _print_json(document: Any, out: IO[str] | None = None) -> None:
    print(orjson.dumps(document).decode(), file=out or sys.stdout, flush=True)


# Writes


def _report(args: argparse.Namespace, result: CommitResult) -> int:
    if args.output == "json":
        document: dict[str, Any] = {
            "status": "committed" if isinstance(result, Committed) else "not_committed",
            "version": result.version,
            "request_id": result.request_id,
        }
        if isinstance(result, NotCommitted):
            document["conflicts"] = [{"index": i, "reason": r} for i, r in result.conflicts]
            if result.reason:
                document["reason"] = result.reason
        _print_json(document)
    elif isinstance(result, Committed):
        print(f"OK {result.version}")
    else:
        print(f"NOT COMMITTED {result.version} {result.reason or list(result.conflicts)}")
    return OK if isinstance(result, Committed) else MISSING


def _put(args: argparse.Namespace, client: Client) -> int:
    operation = Write(_key(args, args.key), _key(args, args.value, "value"))
    return _report(args, client.commit([operation], request_id=args.request_id))


def _delete(args: argparse.Namespace, client: Client) -> int:
    key = _key(args, args.key)
    operation: Operation
    if args.prefix:
        if args.end is not None:
            raise InputError("--prefix takes no END")
        end = KeyFilter.of_prefix(key).end
        operation = RangeDelete(key, end) if end is not None else _no_prefix_end(key)
    elif args.end is not None:
        end = _key(args, args.end, "end")
        if not key < end:
            raise InputError("the range's begin must sort before its end")
        operation = RangeDelete(key, end)
    else:
        operation = Delete(key)
    return _report(args, client.commit([operation], request_id=args.request_id))


def _no_prefix_end(prefix: bytes) -> Operation:
    raise InputError(f"no key follows every key starting with {prefix!r}: give an END")


# Reads


def _item(args: argparse.Namespace, kv: KeyValue) -> dict[str, Any]:
    return {
        "key": _show(args, kv.key, "key"),
        "value": _show(args, kv.value),
        "modified_version": kv.modified_version,
    }


class OneOffReads:
    """`get` / `range` without a running reader: a reader bootstrapped in this process
    (weaseldb.reader.one_off: the newest snapshot when --store is given, then the change
    stream up to the leader's version), read at that version, then thrown away."""

    def __init__(self, args: argparse.Namespace) -> None:
        from weaseldb.reader import one_off

        self._caught_up = one_off(
            args.url, store_url=args.store, timeout_s=args.timeout, credentials=credentials(args)
        )

    def close(self) -> None:
        import shutil

        self._caught_up.state.close()
        shutil.rmtree(self._caught_up.state_dir, ignore_errors=True)

    def _at(self, version: int | None) -> int:
        return self._caught_up.version if version is None else version

    def get_key_value(self, key: bytes, version: int | None) -> KeyValue | None:
        at = self._at(version)
        with _horizon():
            item = self._caught_up.state.get(key, at)
        if item is None:
            return None
        return KeyValue(key, item.value, Version(at), Version(item.modified_version))

    def range(
        self, begin: bytes, end: bytes | None, version: int | None, limit: int | None
    ) -> list[KeyValue]:
        at, found = self._at(version), list[KeyValue]()
        while limit is None or len(found) < limit:
            page = PAGE if limit is None else min(PAGE, limit - len(found))
            with _horizon():
                items, more = self._caught_up.state.range(begin, end, at, page)
            found += [KeyValue(i.key, i.value, Version(at), Version(i.modified_version))
                      for i in items]  # fmt: skip
            if not more or not items:
                break
            begin = items[-1].key + b"\x00"
        return found


@contextmanager
def _horizon() -> Iterator[None]:
    """The one-off state's TooOld as the client's."""
    from weaseldb.reader import TooOld as BelowHorizon

    try:
        yield
    except BelowHorizon as e:
        raise TooOld(str(e), oldest_version=e.oldest) from e


def _consistency(verb: argparse.ArgumentParser) -> None:
    verb.add_argument(
        "--consistency",
        choices=["l", "s"],
        default="l",
        help="with --reader and no --version: l (default) reads at the leader's version, so "
        "every commit acknowledged before the read is seen; s reads at the reader's own "
        "newest version (no request to the leader, may be behind), as etcdctl's flag",
    )


def _reader_version(args: argparse.Namespace, client: Client) -> int | None:
    """The version a read through a running reader is made at (etcdctl's consistency)."""
    if args.version is not None or args.consistency == "s":
        return cast(int | None, args.version)
    return client.version()


def _get(args: argparse.Namespace, client: Client) -> int:
    key = _key(args, args.key)
    if args.reader is not None:
        found = client.get_key_value(key, _reader_version(args, client))
    else:
        reads = OneOffReads(args)
        try:
            found = reads.get_key_value(key, args.version)
        finally:
            reads.close()
    if found is None:
        print(f"weaseldb kv get: {args.key!r} not found", file=sys.stderr)
        return MISSING
    if args.output == "json":
        _print_json(_item(args, found) | {"version": found.version})
    else:
        _write_value(args, found.value)
    return OK


def _write_lines(args: argparse.Namespace, verb: bytes, *data: bytes) -> None:
    sys.stdout.buffer.write(verb + b"\n")
    for item in data:
        _write_value(args, item)


def _write_value(args: argparse.Namespace, value: bytes) -> None:
    """A key or value on its own line, as etcdctl prints it (raw bytes in text mode)."""
    sys.stdout.buffer.write((base64.b64encode(value) if args.base64 else value) + b"\n")
    sys.stdout.buffer.flush()


def _range(args: argparse.Namespace, client: Client) -> int:
    begin, end = _range_bounds(args)
    if args.reader is not None:
        items = client.range(begin, end or _top(begin), _reader_version(args, client), args.limit)
    else:
        reads = OneOffReads(args)
        try:
            items = reads.range(begin, end, args.version, args.limit)
        finally:
            reads.close()
    if args.output == "json":
        version = items[0].version if items else args.version
        _print_json({"version": version, "items": [_item(args, kv) for kv in items]})
        return OK
    for kv in items:
        _write_value(args, kv.key)
        _write_value(args, kv.value)
    return OK


def _range_bounds(args: argparse.Namespace) -> tuple[bytes, bytes | None]:
    if args.prefix is not None:
        if args.begin is not None or args.end is not None:
            raise InputError("give BEGIN END or --prefix, not both")
        prefix = _key(args, args.prefix, "prefix")
        return prefix, KeyFilter.of_prefix(prefix).end
    if args.begin is None or args.end is None:
        raise InputError("range needs BEGIN and END (or --prefix P)")
    begin, end = _key(args, args.begin, "begin"), _key(args, args.end, "end")
    if not begin < end:
        raise InputError("the range's begin must sort before its end")
    return begin, end


def _top(begin: bytes) -> bytes:
    """An end past every key after `begin` (a prefix of 0xff bytes has no prefix end)."""
    return begin + b"\xff" * 16


def _watch(args: argparse.Namespace, client: Client) -> int:
    prefix = None if args.prefix is None else _key(args, args.prefix, "prefix")
    wanted = None if prefix is None else KeyFilter.of_prefix(prefix)
    seen = 0
    for event in client.subscribe(after=args.after, prefix=prefix):
        assert isinstance(event, ChangeEvent)
        operations = [op for op in event.operations if wanted is None or wanted.touches([op])]
        if not operations:
            continue  # a server without filters sends everything
        _print_event(args, event, operations)
        seen += 1
        if args.count is not None and seen >= args.count:
            break
    return OK


def _print_event(args: argparse.Namespace, event: ChangeEvent, operations: list[Operation]) -> None:
    if args.output == "json":
        _print_json({
            "version": event.version,
            "request_id": event.request_id,
            "timestamp": event.timestamp,
            "operations": [_operation_json(args, op) for op in operations],
        })  # fmt: skip
        return
    for op in operations:
        if isinstance(op, Write):
            _write_lines(args, b"PUT", op.key, op.value)
        elif isinstance(op, Delete):
            _write_lines(args, b"DELETE", op.key)
        else:
            _write_lines(args, b"DELETE_RANGE", op.begin, op.end)


def _operation_json(args: argparse.Namespace, op: Operation) -> dict[str, str]:
    if isinstance(op, Write):
        return {"type": "write", "key": _show(args, op.key, "key"), "value": _show(args, op.value)}
    if isinstance(op, Delete):
        return {"type": "delete", "key": _show(args, op.key, "key")}
    begin, end = _show(args, op.begin, "key"), _show(args, op.end, "key")
    return {"type": "range_delete", "begin": begin, "end": end}


def _status(args: argparse.Namespace, client: Client) -> int:
    result = client.status(args.request_id, args.min_version)
    if args.output == "json":
        document: dict[str, Any] = {"request_id": args.request_id}
        if isinstance(result, Committed):
            document |= {"status": "committed", "version": result.version}
        else:
            document["status"] = "not_committed"
        _print_json(document)
    elif isinstance(result, Committed):
        print(f"committed {result.version}")
    else:
        print("not_committed")
    return OK if isinstance(result, Committed) else MISSING


# Transactions from JSON


def _txn(args: argparse.Namespace, client: Client) -> int:
    text = sys.stdin.buffer.read() if args.file == "-" else _read_file(args.file)
    operations, preconditions, read_version, request_id = parse_transaction(text)
    result = client.commit(operations, preconditions, read_version, request_id)
    return _report(args, result)


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from e


def parse_transaction(
    text: bytes,
) -> tuple[list[Operation], list[Precondition], int | None, str | None]:
    """A `/v1/commit` body (keys and values in base64, as the API takes them) as client
    objects; InputError naming the field that is wrong."""
    try:
        body = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise InputError(f"the transaction is not JSON: {e}") from e
    if not isinstance(body, dict):
        raise InputError("the transaction must be a JSON object")
    unknown = set(body) - {"operations", "preconditions", "read_version", "request_id",
                           "leader_id"}  # fmt: skip
    if unknown:
        raise InputError(f"unknown fields: {', '.join(sorted(unknown))}")
    operations = [_parse_operation(op, i) for i, op in enumerate(_list(body, "operations"))]
    if not operations:
        raise InputError("operations: at least one is needed")
    preconditions = [_parse_precondition(p, i) for i, p in enumerate(_list(body, "preconditions"))]
    read_version = body.get("read_version")
    if read_version is not None and (type(read_version) is not int or read_version < 0):
        raise InputError("read_version: must be an unsigned integer")
    request_id = body.get("request_id")
    if request_id is not None and not isinstance(request_id, str):
        raise InputError("request_id: must be a string")
    return operations, preconditions, read_version, request_id


def _list(body: dict[str, Any], name: str) -> list[Any]:
    value = body.get(name, [])
    if not isinstance(value, list):
        raise InputError(f"{name}: must be a list")
    return value


def _field(item: Any, where: str, name: str) -> bytes:
    if not isinstance(item, dict) or not isinstance(item.get(name), str):
        raise InputError(f"{where}.{name}: missing (a base64 string)")
    try:
        return base64.b64decode(item[name], validate=True)
    except binascii.Error as e:
        raise InputError(f"{where}.{name}: not base64 ({e})") from e


def _parse_operation(op: Any, index: int) -> Operation:
    where = f"operations[{index}]"
    kind = op.get("type") if isinstance(op, dict) else None
    if kind == "write":
        return Write(_field(op, where, "key"), _field(op, where, "value"))
    if kind == "delete":
        return Delete(_field(op, where, "key"))
    if kind == "range_delete":
        begin, end = _field(op, where, "begin"), _field(op, where, "end")
        if not begin < end:
            raise InputError(f"{where}: begin must sort before end")
        return RangeDelete(begin, end)
    raise InputError(f"{where}.type: one of write, delete, range_delete")


def _parse_precondition(pre: Any, index: int) -> Precondition:
    where = f"preconditions[{index}]"
    kind = pre.get("type") if isinstance(pre, dict) else None
    version = pre.get("version") if isinstance(pre, dict) else None
    if version is not None and (type(version) is not int or version < 0):
        raise InputError(f"{where}.version: must be an unsigned integer")
    if kind == "point_read":
        return PointRead(_field(pre, where, "key"), version)
    if kind == "range_read":
        return RangeRead(_field(pre, where, "begin"), _field(pre, where, "end"), version)
    raise InputError(f"{where}.type: one of point_read, range_read")
