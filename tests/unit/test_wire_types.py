"""The ring's typed fields (Stage, Outcome, the NewTypes) encode as the plain values they
wrap: the bytes on the wire are those of untyped ints and strings."""

import msgspec

from weaseldb.core.protocol import CommitReply, Hello, StatusReply, decode_replies, encode_batch
from weaseldb.core.types import Outcome, RequestId, Stage, Version


def test_typed_messages_encode_as_plain_values() -> None:
    plain = msgspec.msgpack.encode(
        [
            ["h", "gateway", 2],
            ["C", 7, "committed", 5, "r-1", [], ""],
            ["S", 8, "r-2", 4, 3, "", 0, 0, False],
        ]
    )
    typed = encode_batch(
        [
            Hello(Stage.GATEWAY, 2),
            CommitReply(7, Outcome.COMMITTED, Version(5), RequestId("r-1")),
            StatusReply(8, RequestId("r-2"), Version(4), Version(3)),
        ]
    )
    assert typed == plain


def test_decoded_fields_are_the_enums() -> None:
    reply, status = decode_replies(
        encode_batch(
            [
                CommitReply(1, Outcome.NOT_LEADER, Version(0), RequestId("r")),
                StatusReply(2, RequestId("r"), Version(0), Version(0)),
            ]
        )
    )
    assert isinstance(reply, CommitReply) and reply.status is Outcome.NOT_LEADER
    assert isinstance(status, StatusReply) and status.outcome is Outcome.NOT_REMEMBERED
