"""A gateway worker's subscription hub across a change of term (services/gateway/
subscriptions.py): a durable stream must never get a checkpoint past versions it was not
sent. Found by the client-driven history test (tests/integration/test_client_histories.py:
after a persister restart the new term's Progress reached the gateway before its
TermStart, and streams were checkpointed past the versions the new term recovered)."""

from __future__ import annotations

from services.gateway.subscriptions import CloseReason, Hub


def test_a_new_term_heard_first_in_progress_ends_durable_streams() -> None:
    hub = Hub(buffer_limit=1 << 20)
    hub.on_term_start(9, "L", 279)
    stream = hub.register(durable=True)
    stream.go_live(279)
    hub.on_progress(333, "L", 8)  # the new term recovered up to 333: no events for them
    assert stream.closed == CloseReason.LEADER_CHANGED
    hub.on_term_start(8, "L", 333)  # its TermStart, later
    assert (hub.term, hub.committed) == (8, 333)


def test_progress_within_a_term_only_moves_the_checkpoint() -> None:
    hub = Hub(buffer_limit=1 << 20)
    hub.on_term_start(9, "L", 0)
    stream = hub.register(durable=True)
    hub.on_progress(5, "L", 9)
    assert stream.closed is None and hub.checkpoint(True) == 5
