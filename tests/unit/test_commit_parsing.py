"""Request ids the gateway makes for commits that bring none (services/gateway/requests.py)."""

from __future__ import annotations

import os

import orjson

from services.gateway import requests
from services.gateway.requests import Limits, parse_commit

BODY = orjson.dumps({"operations": [{"type": "write", "key": "a2V5", "value": "dmFs"}]})


def test_made_ids_are_128_random_bits_and_never_repeat_across_refills() -> None:
    count = requests._RandomIds.IDS_PER_REFILL * 3 + 7
    ids = [parse_commit(BODY, Limits()).request_id for _ in range(count)]
    assert len(set(ids)) == count
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_a_forked_child_does_not_reuse_its_parents_buffered_ids() -> None:
    parent_first = parse_commit(BODY, Limits()).request_id  # fills the buffer
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        ids = [parse_commit(BODY, Limits()).request_id for _ in range(8)]
        os.write(write, ",".join(ids).encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(child, 0)
    child_ids = os.read(read, 4096).decode().split(",")
    os.close(read)
    parent_ids = [parse_commit(BODY, Limits()).request_id for _ in range(8)]
    assert status == 0
    assert len(child_ids) == 8
    assert not set(child_ids) & {parent_first, *parent_ids}
