"""`weaseldb kv ...` run as a user would (`python -m weaseldb_cli kv ...`) against a real
set: writes through the client, reads through a one-off reader caught up in-process (no
--reader), the change stream, status, JSON transactions, exit codes and messages."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cluster import ProcessSet
from tests.support.reader import ReaderProcess
from tests.support.tcpproxy import DelayProxy
from weaseldb.client import Client, Write

pytestmark = pytest.mark.slow


def kv(url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "weaseldb_cli", "kv", *args, "--url", url],
        input=stdin, capture_output=True, text=True, timeout=90, env=os.environ,
    )  # fmt: skip


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_put_get_delete_and_status(weasel: ProcessSet) -> None:
    url = weasel.url
    put = json.loads(ok(kv(url, "put", "cli/greeting", "hello", "-o", "json")))
    assert put["status"] == "committed"
    assert ok(kv(url, "get", "cli/greeting")) == "hello\n"
    got = json.loads(ok(kv(url, "get", "cli/greeting", "-o", "json")))
    assert (got["key"], got["value"], got["modified_version"]) == (
        "cli/greeting", "hello", put["version"],
    )  # fmt: skip
    assert got["version"] >= put["version"]
    assert ok(kv(url, "status", put["request_id"])) == f"committed {put['version']}\n"
    assert ok(kv(url, "del", "cli/greeting")).startswith("OK ")
    missing = kv(url, "get", "cli/greeting")
    assert missing.returncode == 1 and "not found" in missing.stderr
    # The old value is still there at the version it was written.
    at = kv(url, "get", "cli/greeting", "--version", str(put["version"]))
    assert ok(at) == "hello\n"
    unknown = kv(url, "status", "never-sent-request-id-0001")
    assert (unknown.returncode, unknown.stdout) == (1, "not_committed\n")


def test_bytes_with_base64(weasel: ProcessSet) -> None:
    key, value = base64.b64encode(b"cli/\x00\xff").decode(), base64.b64encode(b"\x01\xfe").decode()
    ok(kv(weasel.url, "put", "--base64", key, value))
    assert ok(kv(weasel.url, "get", "--base64", key)) == value + "\n"


def test_range_and_prefix(weasel: ProcessSet) -> None:
    for i in range(3):
        ok(kv(weasel.url, "put", f"cli/r/{i}", f"v{i}"))
    ok(kv(weasel.url, "put", "cli/s", "outside"))
    lines = ok(kv(weasel.url, "range", "cli/r/", "cli/r0")).splitlines()
    assert lines == ["cli/r/0", "v0", "cli/r/1", "v1", "cli/r/2", "v2"]
    listed = json.loads(ok(kv(weasel.url, "range", "--prefix", "cli/r/", "--limit", "2",
                              "-o", "json")))  # fmt: skip
    assert [(i["key"], i["value"]) for i in listed["items"]] == [("cli/r/0", "v0"),
                                                                ("cli/r/1", "v1")]  # fmt: skip


def test_transactions_from_stdin_and_a_file(weasel: ProcessSet, tmp_path: Path) -> None:
    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    first = json.loads(ok(kv(weasel.url, "put", "cli/t", "1", "-o", "json")))
    body = {
        "read_version": first["version"],
        "preconditions": [{"type": "point_read", "key": b64("cli/t")}],
        "operations": [{"type": "write", "key": b64("cli/t"), "value": b64("2")}],
    }
    done = json.loads(ok(kv(weasel.url, "txn", "-o", "json", stdin=json.dumps(body))))
    assert done["status"] == "committed"
    path = tmp_path / "txn.json"
    path.write_text(json.dumps(body))  # the same read version again: now a conflict
    refused = kv(weasel.url, "txn", str(path))
    assert refused.returncode == 1 and refused.stdout.startswith("NOT COMMITTED")
    assert "conflict" in refused.stdout
    assert ok(kv(weasel.url, "get", "cli/t")) == "2\n"


def test_watch_prints_what_commits(weasel: ProcessSet) -> None:
    first = json.loads(ok(kv(weasel.url, "put", "cli/w/1", "a", "-o", "json")))
    ok(kv(weasel.url, "put", "cli/elsewhere", "b"))
    ok(kv(weasel.url, "put", "cli/w/2", "c"))
    after = str(first["version"] - 1)
    text = ok(kv(weasel.url, "watch", "--prefix", "cli/w/", "--after", after, "--count", "2"))
    assert text.splitlines() == ["PUT", "cli/w/1", "a", "PUT", "cli/w/2", "c"]
    lines = ok(kv(weasel.url, "watch", "--after", after, "--count", "2", "-o", "json"))
    events = [json.loads(line) for line in lines.splitlines()]
    assert [e["operations"][0]["key"] for e in events] == ["cli/w/1", "cli/elsewhere"]
    assert events[0]["version"] == first["version"]


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["put", "--base64", "AA!", "x"], None, "key 'AA!' is not base64"),
        (["txn"], "{not json", "not JSON"),
        (["txn"], '{"operations": [{"type": "put"}]}', "operations[0].type"),
        (["txn"], '{"operations": []}', "operations: at least one"),
        (["txn"], '{"operations": [{"type": "delete", "key": "a"}], "x": 1}', "unknown fields"),
        (["range", "a"], None, "needs BEGIN and END"),
        (["range", "b", "a"], None, "begin must sort before its end"),
        (["del", "b", "a"], None, "begin must sort before its end"),
        (["put", "k", "v" * 110_000], None, "limit_exceeded"),
    ],
)
def test_bad_input_exits_2_naming_what_is_wrong(
    weasel: ProcessSet, args: list[str], stdin: str | None, message: str
) -> None:
    result = kv(weasel.url, *args, stdin=stdin)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr


def test_no_database_exits_1_after_the_timeout() -> None:
    result = kv("http://127.0.0.1:9", "put", "k", "v", "--timeout", "1")
    assert result.returncode == 1
    assert "Unavailable" in result.stderr and "nothing was applied" in result.stderr


def test_reads_through_a_running_reader(weasel: ProcessSet, tmp_path: Path) -> None:
    reader = ReaderProcess(weasel.url, tmp_path / "reader").start()
    try:
        put = json.loads(ok(kv(weasel.url, "put", "cli/rd", "via-reader", "-o", "json")))
        # Read at the commit's version: the reader waits for it (read-your-writes).
        args = ["--reader", reader.url, "--version", str(put["version"])]
        assert ok(kv(weasel.url, "get", "cli/rd", *args)) == "via-reader\n"
        lines = ok(kv(weasel.url, "range", "--prefix", "cli/rd", *args)).splitlines()
        assert lines == ["cli/rd", "via-reader"]
        missing = kv(weasel.url, "get", "cli/none", *args)
        assert missing.returncode == 1 and "not found" in missing.stderr
    finally:
        assert reader.stop() == 0, reader.log()


def test_reads_through_a_reader_see_every_acknowledged_commit_unless_asked_not_to(
    weasel: ProcessSet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kv get --reader` reads at the leader's version by default (etcdctl's linearizable
    read), so a put acknowledged just before is seen even from a reader that lags;
    `--consistency s` reads at the reader's own position and does not wait for it."""
    from weaseldb_cli.main import main

    lagging = DelayProxy(weasel.port, delay_s=0.7).start()  # every chunk of its stream late
    reader = ReaderProcess(f"http://127.0.0.1:{lagging.port}", tmp_path / "reader").start()
    try:
        for round_ in range(3):
            value = f"v{round_}"
            assert main(["kv", "put", "cli/lag", value, "--url", weasel.url]) == 0
            args = ["--url", weasel.url, "--reader", reader.url]
            capsys.readouterr()
            assert main(["kv", "get", "cli/lag", *args, "--consistency", "s"]) in (0, 1)
            assert capsys.readouterr().out != f"{value}\n"  # the reader is 0.7 s behind
            assert main(["kv", "get", "cli/lag", *args]) == 0
            assert capsys.readouterr().out == f"{value}\n"
        # The library reads at the newest version its client has seen: its own writes.
        with Client(weasel.url, reader.url) as client:
            for round_ in range(3):
                client.commit([Write("lib/lag", f"w{round_}")])
                assert client.get("lib/lag") == f"w{round_}".encode()
                assert client.range(prefix="lib/")[0].value == f"w{round_}".encode()
    finally:
        assert reader.stop() == 0, reader.log()
        lagging.stop()
