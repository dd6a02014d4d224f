"""The standby's lease watch (weaseldb.core.lease), on its own clock."""

from __future__ import annotations

from weaseldb.core import layout
from weaseldb.core.lease import Lease, LeaseWatch, encode
from weaseldb.core.types import Term

T1, T2 = Term(2**64 - 1), Term(2**64 - 2)


def renewal(n: int, term: Term = T1) -> bytes:
    return encode(Lease(term=term, leader_id="db-0-abc", pod="db-0", renewal=n))


def test_a_renewed_lease_never_times_out() -> None:
    watch = LeaseWatch(timeout_s=3)
    assert not any(watch.observe(T1, renewal(i), now=float(i)) for i in range(10))


def test_an_unchanged_lease_times_out_after_the_timeout_on_the_watchers_clock() -> None:
    watch = LeaseWatch(timeout_s=3)
    assert not watch.observe(T1, renewal(7), now=100.0)
    assert not watch.observe(T1, renewal(7), now=102.9)
    assert watch.observe(T1, renewal(7), now=103.0)
    assert watch.silent_for(104.0) == 4.0


def test_a_lease_never_written_counts_from_the_first_sight_of_its_term() -> None:
    watch = LeaseWatch(timeout_s=3)
    assert not watch.observe(T1, None, now=50.0)
    assert watch.observe(T1, None, now=53.5)


def test_a_new_term_restarts_the_count() -> None:
    watch = LeaseWatch(timeout_s=3)
    watch.observe(T1, renewal(7), now=0.0)
    assert not watch.observe(T2, None, now=5.0)  # a newer claim: its leader gets the time
    assert not watch.observe(T2, renewal(1, T2), now=7.0)
    assert watch.observe(T2, renewal(1, T2), now=10.0)


def test_each_term_has_its_own_lease_object() -> None:
    assert layout.lease_key(T1) != layout.lease_key(T2)
    assert layout.lease_key(T1).startswith(layout.LEASES)
