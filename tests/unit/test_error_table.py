"""The one table that turns errors into HTTP answers (services/gateway/errors.py)."""

from __future__ import annotations

import inspect

import orjson
import pytest

from services.gateway.errors import INTERNAL, render
from weaseldb.core import errors
from weaseldb.core.errors import AlreadyExists, WeaselError

#: Signals between the store and its callers, never an answer to a client: reaching the
#: HTTP layer is a bug, and a bug is a logged 500.
INTERNAL_SIGNALS = {WeaselError, AlreadyExists}


def error_classes() -> list[type[WeaselError]]:
    return [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, WeaselError) and cls not in INTERNAL_SIGNALS
    ]


def instance(cls: type[WeaselError]) -> WeaselError:
    if issubclass(cls, errors.MethodNotAllowed):
        return cls("no", allow=["GET", "PUT"])
    return cls("what went wrong", request_id="r-000000000001")


@pytest.mark.parametrize("cls", error_classes(), ids=lambda c: c.__name__)
def test_every_error_of_the_tree_has_a_json_answer_that_is_not_a_500(
    cls: type[WeaselError],
) -> None:
    status, body, headers = render(instance(cls))
    assert status != INTERNAL.status and 400 <= status < 600
    parsed = orjson.loads(body)
    assert parsed["message"] == (
        "no" if issubclass(cls, errors.MethodNotAllowed) else "what went wrong"
    )
    names = dict(headers)
    assert names[b"content-type"] == b"application/json"
    # Every 503 tells the client when to try again; nothing else does.
    assert (b"retry-after" in names) == (status == 503)


def test_an_error_outside_the_tree_is_a_500_that_names_nothing_of_its_text() -> None:
    status, body, _ = render(KeyError("secret internals"))
    assert status == 500
    assert b"secret internals" not in body


def test_the_two_503s_stay_apart() -> None:
    """not_leader: nothing applied, retry anywhere; commit_unknown: maybe applied."""
    assert orjson.loads(render(errors.Deposed("x"))[1])["error"] == "not_leader"
    assert orjson.loads(render(errors.CommitUnknown("x"))[1])["error"] == "commit_unknown"
    assert orjson.loads(render(errors.CorruptObject("x"))[1])["error"] == "store_unavailable"


def test_a_full_store_names_itself_in_the_reason() -> None:
    """store_full is what a client can act on (wait for space), whatever the error."""
    body = orjson.loads(render(errors.StoreFull("batches/1: No space left on device"))[1])
    assert (body["error"], body["reason"]) == ("store_unavailable", "store_full")
    refused = errors.NotLeader("nothing was applied", reason="store_full")
    assert orjson.loads(render(refused)[1])["reason"] == "store_full"
