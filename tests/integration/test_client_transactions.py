"""`transactional` against a real set and two real readers (slow tier): a bank — concurrent
transfers between a few accounts, each a read-modify-write through a reader at a
linearizable read version, from blocking and asyncio clients. The total never changes at
any version of the log, every transfer that returned is in the log exactly once, and every
one that raised `Conflict` is not in it at all."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import ProcessSet, free_port_block, short_run_dir
from tests.support.reader import ReaderProcess
from weaseldb.client import (
    AsyncClient,
    AsyncTransaction,
    ChangeEvent,
    Client,
    Committed,
    Conflict,
    Transaction,
    Write,
)

pytestmark = pytest.mark.slow

ACCOUNTS = [f"acct/{i}" for i in range(6)]
START = 100


@pytest.fixture
def bank(tmp_path: Path) -> Iterator[tuple[ProcessSet, list[ReaderProcess]]]:
    cluster = ProcessSet(f"dir:{tmp_path / 'data'}", free_port_block(), short_run_dir()).start()
    readers = [ReaderProcess(cluster.url, tmp_path / f"reader{i}").start() for i in range(2)]
    yield cluster, readers
    for reader in readers:
        assert reader.stop() == 0, reader.log()
    assert cluster.stop() == 0, cluster.log()


def pick(rng: random.Random) -> tuple[str, str, int]:
    source, target = rng.sample(ACCOUNTS, 2)
    return source, target, rng.randint(1, 30)


def transfer(tr: Transaction, transfer_id: str, source: str, target: str, amount: int) -> None:
    balances = dict((k.decode(), int(v)) for k, v in tr.range(prefix="acct/"))
    tr.set(source, str(balances[source] - amount))
    tr.set(target, str(int(tr.get(target) or 0) + amount))  # read-your-writes: unchanged
    tr.set(f"xfer/{transfer_id}", f"{source}>{target}:{amount}")


async def transfer_async(
    tr: AsyncTransaction, transfer_id: str, source: str, target: str, amount: int
) -> None:
    balance = int(await tr.get(source) or 0)
    tr.set(source, str(balance - amount))
    tr.set(target, str(int(await tr.get(target) or 0) + amount))
    tr.set(f"xfer/{transfer_id}", f"{source}>{target}:{amount}")


def test_transfers_keep_the_total_and_apply_exactly_once(
    bank: tuple[ProcessSet, list[ReaderProcess]],
) -> None:
    cluster, readers = bank
    with Client(cluster.url) as setup:
        opened = setup.commit([Write(a, str(START)) for a in ACCOUNTS])
        assert isinstance(opened, Committed)
    done: dict[str, bool] = {}  # transfer id -> returned (True) or gave up (False)
    lock = threading.Lock()

    def blocking_clerk(number: int, count: int) -> None:
        rng = random.Random(number)
        with Client(cluster.url, readers[number % 2].url) as client:
            run = client.transactional(transfer, retries=30)
            for i in range(count):
                transfer_id = f"s{number}-{i}"
                try:
                    run(transfer_id, *pick(rng))
                    outcome = True
                except Conflict:
                    outcome = False
                with lock:
                    done[transfer_id] = outcome

    async def async_clerk(number: int, count: int) -> None:
        rng = random.Random(number)
        async with AsyncClient(cluster.url, readers[number % 2].url) as client:
            run = client.transactional(transfer_async, retries=30)
            for i in range(count):
                transfer_id = f"a{number}-{i}"
                try:
                    await run(transfer_id, *pick(rng))
                    outcome = True
                except Conflict:
                    outcome = False
                with lock:
                    done[transfer_id] = outcome

    clerks = [threading.Thread(target=blocking_clerk, args=(n, 25)) for n in range(4)]
    clerks.append(threading.Thread(target=lambda: asyncio.run(async_clerk(9, 25))))
    for clerk in clerks:
        clerk.start()
    for clerk in clerks:
        clerk.join(120)
    assert len(done) == 125, "a clerk did not finish"
    assert sum(done.values()) >= 100, "most transfers must get through"

    with Client(cluster.url, readers[0].url) as client:
        end = client.version()
        # The log, through the client's own stream: each returned transfer exactly once.
        applied: dict[str, int] = {}
        versions = []
        stream = client.subscribe(after=opened.version - 1, checkpoints=True)
        for item in stream:
            if isinstance(item, ChangeEvent):
                versions.append(item.version)
                for op in item.operations:
                    if isinstance(op, Write) and op.key.startswith(b"xfer/"):
                        name = op.key.decode().removeprefix("xfer/")
                        applied[name] = applied.get(name, 0) + 1
            elif item.committed_version >= end:
                break
        stream.close()
        assert all(count == 1 for count in applied.values()), "a transfer was applied twice"
        assert set(applied) == {t for t, returned in done.items() if returned}
        # The reader serves the same stream again (the client follows it with `reader`).
        again = client.subscribe(after=opened.version - 1, reader=True)
        served = [next(again) for _ in versions]
        again.close()
        assert [e.version for e in served if isinstance(e, ChangeEvent)] == versions
        # The total at every version of the log, read through the reader at that version.
        for version in versions:
            balances = client.range(prefix="acct/", version=version)
            assert [kv.key.decode() for kv in balances] == ACCOUNTS
            assert sum(int(kv.value) for kv in balances) == START * len(ACCOUNTS), version
