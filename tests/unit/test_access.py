"""The access rule (weaseldb/core/access.py): grants over key prefixes, as etcd's RBAC over
key ranges: a commit is allowed only when every key it reads or writes lies inside one of
the grant's prefixes, a stream only when its filter does."""

from __future__ import annotations

import pytest

from weaseldb.core.access import (
    AccessDenied,
    Grant,
    bearer_token,
    check_commit,
    check_read,
    check_status,
    check_subscribe,
    parse_grants,
)
from weaseldb.core.changes import KeyFilter
from weaseldb.core.protocol import (
    Delete,
    Operation,
    PointRead,
    Precondition,
    RangeDelete,
    RangeRead,
    Write,
)
from weaseldb.core.types import Version

V1 = Version(1)

APP = Grant("app", frozenset({"commit", "status", "subscribe"}), (b"app/", b"shared/"))
EVERYTHING = Grant("admin", frozenset({"commit", "status", "subscribe"}), (b"",))
READ_ONLY = Grant("watcher", frozenset({"subscribe"}), (b"app/",))


@pytest.mark.parametrize(
    "operations",
    [
        [Write(b"app/x", b"1")],
        [Write(b"app/", b"1"), Delete(b"shared/y")],
        [RangeDelete(b"app/", b"app0")],  # the whole prefix: "0" follows "/"
        [RangeDelete(b"app/a", b"app/b")],
    ],
)
def test_a_commit_inside_the_prefixes_is_allowed(operations: list[Operation]) -> None:
    check_commit(APP, [], operations)


@pytest.mark.parametrize(
    ("preconditions", "operations", "where"),
    [
        ([], [Write(b"other/x", b"1")], "operations[0]"),
        ([], [Write(b"app/x", b"1"), Delete(b"apps")], "operations[1]"),
        ([], [RangeDelete(b"app/", b"b")], "operations[0]"),  # runs past the prefix
        ([], [RangeDelete(b"ap", b"app/z")], "operations[0]"),  # starts before it
        ([], [RangeDelete(b"app/a", b"shared/b")], "operations[0]"),  # spans two prefixes
        ([PointRead(b"secret", V1)], [Write(b"app/x", b"1")], "preconditions[0]"),
        ([RangeRead(b"app/", b"z", V1)], [Write(b"app/x", b"1")], "preconditions[0]"),
    ],
)
def test_a_commit_touching_any_key_outside_is_denied(
    preconditions: list[Precondition], operations: list[Operation], where: str
) -> None:
    with pytest.raises(AccessDenied, match=rf"^{where.replace('[', '.').replace(']', '.')}"):
        check_commit(APP, preconditions, operations)


def test_the_empty_prefix_covers_every_key() -> None:
    check_commit(EVERYTHING, [PointRead(b"\xff\xff", V1)], [RangeDelete(b"", b"\xff\xff\xff")])
    check_subscribe(EVERYTHING, None)


def test_actions_are_checked() -> None:
    with pytest.raises(AccessDenied, match="does not allow commit"):
        check_commit(READ_ONLY, [], [Write(b"app/x", b"1")])
    with pytest.raises(AccessDenied, match="does not allow status"):
        check_status(READ_ONLY)
    check_status(APP)


def test_a_stream_must_be_filtered_inside_one_prefix() -> None:
    check_subscribe(READ_ONLY, KeyFilter.of_prefix(b"app/"))
    check_subscribe(READ_ONLY, KeyFilter.of_prefix(b"app/deeper/"))
    check_subscribe(READ_ONLY, KeyFilter(b"app/a", b"app/b"))
    for keys in (None, KeyFilter.of_prefix(b"ap"), KeyFilter(b"app/", None)):
        with pytest.raises(AccessDenied, match="outside"):
            check_subscribe(READ_ONLY, keys)


def test_a_reader_read_must_lie_inside_one_prefix() -> None:
    reader = Grant("reader", frozenset({"read"}), (b"app/",))
    check_read(reader, b"app/x", b"app/x\x00")
    check_read(reader, b"app/", b"app0")
    for begin, end in ((b"other", b"other\x00"), (b"app/", None), (b"", b"app/z")):
        with pytest.raises(AccessDenied, match="outside"):
            check_read(reader, begin, end)
    with pytest.raises(AccessDenied, match="does not allow read"):
        check_read(READ_ONLY, b"app/x", b"app/x\x00")


def test_grants_file_by_token_and_subject() -> None:
    grants = parse_grants(
        """
        [[grant]]
        name = "app"
        token = "t-old"
        prefixes = ["app/"]

        [[grant]]
        name = "app"          # the same grant under a new token: rotation
        token = "t-new"
        prefixes = ["app/"]

        [[grant]]
        subject = "ops"
        actions = ["status"]
        """
    )
    old, new = grants.for_token("t-old"), grants.for_token("t-new")
    assert old == new and old is not None and old.prefixes == (b"app/",)
    assert grants.for_token("t-other") is None and grants.for_token("t-ol") is None
    ops = grants.for_subject("ops")
    assert ops is not None and ops.actions == {"status"} and ops.prefixes == (b"",)
    assert grants.for_subject("app") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[grant]]\nname = 'x'\n", r"grant\[0\]: needs a token or a subject"),
        ("[[grant]]\ntoken = ''\n", r"grant\[0\].token: must be a non-empty string"),
        ("[[grant]]\ntoken = 'a'\nactions = ['delete']\n", r"grant\[0\].actions"),
        ("[[grant]]\ntoken = 'a'\nprefixes = 'app/'\n", r"grant\[0\].prefixes"),
        ("[[grant]]\ntoken = 'a'\ntokens = 'b'\n", r"grant\[0\]: unknown keys \['tokens'\]"),
        ("[[grant]]\ntoken = 'a'\n[[grant]]\ntoken = 'a'\n", "same token is given twice"),
        ("[grants]\n", "unknown top-level keys"),
        ("[[grant]\n", "not valid TOML"),
    ],
)
def test_a_bad_grants_file_names_the_field(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_grants(text)


def test_bearer_token() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    for header in (None, "", "Bearer", "Bearer ", "Basic abc", "abc"):
        assert bearer_token(header) is None
