"""The leadership decision (leadership.py, pure): the failure detector's clock, failover,
switchover (scale-down, a cordoned node, spec.targetLeader) and the labels."""

from __future__ import annotations

import pytest
from weaseldb_operator.conditions import Reason
from weaseldb_operator.leadership import (
    Claim,
    Decision,
    LeaseSeen,
    PodView,
    Timing,
    decide,
    down_since,
)
from weaseldb_operator.resources import statefulset_replicas
from weaseldb_operator.spec import SpecError, database_from

from weaseldb.core.channels import Role
from weaseldb.core.types import NUMBER_TOP

NOW = 1_000.0
TIMING = Timing(failover_seconds=2, not_ready_seconds=30)


def claim(term: int = 1, pod: str = "orders-0") -> Claim:
    return Claim("terms/x", NUMBER_TOP - term + 1, f"{pod}-abc", pod, 0)  # long before NOW


def leader(name: str = "orders-0", **kw: object) -> PodView:
    return PodView(name, True, answer=Role.LEADER, **kw)  # type: ignore[arg-type]


def standby(name: str = "orders-1", **kw: object) -> PodView:
    return PodView(name, False, answer=Role.STANDBY, **kw)  # type: ignore[arg-type]


def decided(
    pods: list[PodView],
    down: float | None = None,
    replicas: int = 2,
    target: str | None = None,
    claimed: Claim | None = None,
) -> Decision:
    return decide(
        claimed or claim(),
        pods,
        now=NOW,
        timing=TIMING,
        replicas=replicas,
        down=down,
        target_leader=target,
    )


@pytest.mark.parametrize(
    ("pods", "down", "reason", "promote"),
    [
        pytest.param([leader(), standby()], None, Reason.LEADER_READY, None, id="serving"),
        pytest.param(
            [PodView("orders-0", False, not_ready_since=NOW - 5, answer=Role.STARTING), standby()],
            None,
            Reason.LEADER_NOT_READY,
            None,
            id="opening-its-term",
        ),
        pytest.param(
            [PodView("orders-0", False, not_ready_since=NOW - 31, answer=Role.LEADER), standby()],
            None,
            Reason.FAILING_OVER,
            "orders-1",
            id="holds-but-not-ready-too-long",
        ),
        pytest.param(
            [PodView("orders-0", True), standby()],
            NOW - 1,
            Reason.LEADER_UNRESPONSIVE,
            None,
            id="silent-within-timeout",
        ),
        pytest.param(
            [PodView("orders-0", True), standby()],
            NOW - 2,
            Reason.FAILING_OVER,
            "orders-1",
            id="silent-too-long-even-while-kubelet-says-ready",
        ),
        pytest.param(
            [PodView("orders-0", True, answer=Role.STOPPING), standby()],
            NOW - 3,
            Reason.FAILING_OVER,
            "orders-1",
            id="stopping",
        ),
        pytest.param(
            [leader(deleting=True), standby()],
            NOW,  # at once: it will not serve again
            Reason.FAILING_OVER,
            "orders-1",
            id="being-deleted",
        ),
        pytest.param([standby()], NOW, Reason.FAILING_OVER, "orders-1", id="gone"),
        pytest.param([PodView("orders-1", False)], NOW - 40, Reason.NO_STANDBY, None, id="none"),
        pytest.param(
            [standby(deleting=True)], NOW - 40, Reason.NO_STANDBY, None, id="standby-leaving"
        ),
    ],
)
def test_failover(
    pods: list[PodView], down: float | None, reason: Reason, promote: str | None
) -> None:
    decision = decided(pods, down)
    elected = decision.conditions[0]
    assert (elected.reason, decision.promote) == (reason, promote), elected.message
    assert (elected.status == "True") is (reason is Reason.LEADER_READY)
    assert decision.switchover is None


def test_the_clock_runs_from_the_first_observation_while_the_term_is_not_held() -> None:
    silent = [PodView("orders-0", True), standby()]
    assert down_since(claim(), [leader(), standby()], None, NOW) is None
    assert down_since(None, silent, None, NOW) is None
    assert down_since(claim(), silent, None, NOW) == NOW
    assert down_since(claim(), silent, NOW - 7, NOW) == NOW - 7
    deleting = [leader(deleting=True)]
    assert down_since(claim(), deleting, None, NOW) == NOW  # not held: a deletion is final
    opening = [PodView("orders-0", False, answer=Role.STARTING)]
    assert down_since(claim(), opening, NOW - 7, NOW) is None  # recovering counts as held


def test_a_standby_on_a_cordoned_node_is_the_last_choice() -> None:
    pods = [standby("orders-1", schedulable=False), standby("orders-2")]
    assert decided(pods, NOW - 5, replicas=3).promote == "orders-2"


@pytest.mark.parametrize(
    ("pods", "replicas", "target", "promote", "why"),
    [
        pytest.param(
            [leader("orders-1"), standby("orders-0")],
            1,
            None,
            "orders-0",
            "scale-down",
            id="scale-down-removes-the-leader",
        ),
        pytest.param(
            [leader("orders-0", node="a", schedulable=False), standby("orders-1", node="b")],
            2,
            None,
            "orders-1",
            "cordoned",
            id="drain",
        ),
        pytest.param(
            [leader("orders-0", node="a", schedulable=False), standby("orders-1", node="a")],
            2,
            None,
            None,
            None,
            id="drain-with-no-standby-elsewhere-waits",
        ),
        pytest.param(
            [leader(), standby("orders-1"), standby("orders-2")],
            3,
            "orders-2",
            "orders-2",
            "targetLeader",
            id="target-leader",
        ),
        pytest.param(
            [leader(), PodView("orders-1", False)], 2, "orders-1", None, None, id="target-not-live"
        ),
        pytest.param([leader(), standby()], 2, "orders-0", None, None, id="target-leads"),
    ],
)
def test_switchover(
    pods: list[PodView], replicas: int, target: str | None, promote: str | None, why: str | None
) -> None:
    leader_pod = pods[0].name
    decision = decided(pods, replicas=replicas, target=target, claimed=claim(pod=leader_pod))
    assert decision.promote == promote
    assert decision.leader_ready  # a switchover moves a serving leader; it still serves
    if why is None:
        assert decision.switchover is None
    else:
        assert decision.switchover is not None and why in decision.switchover


def test_labels_follow_the_claim_and_change_only_when_needed() -> None:
    pods = [leader(role="standby"), standby(role="standby")]
    decision = decided(pods, claimed=claim(2, "orders-0"))
    assert decision.labels == {"orders-0": "leader"}
    assert decision.leader is not None and decision.leader.term == 2


def test_the_old_leader_loses_its_label_before_the_new_one_gets_it() -> None:
    """The Service never selects two leaders, not even between two label patches."""
    pods = [leader(role="standby"), standby(role="leader")]  # orders-0 claimed after -1
    decision = decided(pods, claimed=claim(2, "orders-0"))
    assert list(decision.labels.items()) == [("orders-1", "standby"), ("orders-0", "leader")]


def test_a_leader_pod_being_deleted_loses_its_label_at_once() -> None:
    """The client Service routes by the label alone, Ready or not: a pod that is going
    must not keep taking clients while a standby is promoted."""
    pods = [leader(role="leader", deleting=True), standby(role="standby")]
    decision = decided(pods)
    assert decision.labels == {"orders-0": "standby"}
    assert decision.promote == "orders-1"


def test_scale_down_keeps_the_leaders_ordinal_until_it_moved() -> None:
    db = database_from(
        {
            "metadata": {"name": "orders", "namespace": "n", "uid": "u"},
            "spec": {"replicas": 1, "storage": {"bucket": "b1", "prefix": "p"}},
        }
    )
    assert statefulset_replicas(db, "orders-2") == 3
    assert statefulset_replicas(db, "orders-0") == 1
    assert statefulset_replicas(db, None) == 1


def test_target_leader_must_be_a_pod_of_the_database() -> None:
    body = {
        "metadata": {"name": "orders", "namespace": "n", "uid": "u"},
        "spec": {
            "replicas": 2,
            "targetLeader": "orders-2",
            "storage": {"bucket": "b1", "prefix": "p"},
        },
    }
    with pytest.raises(SpecError, match=r"spec\.targetLeader"):
        database_from(body)


def test_paused_reports_but_neither_fails_over_nor_switches_over() -> None:
    silent = [PodView("orders-0", True), standby()]
    stalled = decide(
        claim(), silent, now=NOW, timing=TIMING, replicas=2, down=NOW - 60, paused=True
    )
    assert stalled.promote is None and "spec.paused" in stalled.conditions[0].message
    cordoned = [leader(node="a", schedulable=False), standby(node="b")]
    staying = decide(claim(), cordoned, now=NOW, timing=TIMING, replicas=2, down=None, paused=True)
    assert staying.promote is None and staying.leader_ready


def test_a_leader_that_stopped_renewing_its_lease_fails_over_though_it_answers() -> None:
    """Its persister answers (it lost the store, say): the lease it stopped renewing is
    the second signal, after leaderFailoverSeconds like a silent one."""
    pods = [leader(), standby()]
    expired = LeaseSeen(expired=True, quiet=True)
    assert down_since(claim(), pods, None, NOW, expired) == NOW
    waiting = decide(claim(), pods, now=NOW, timing=TIMING, replicas=2, down=NOW - 1, lease=expired)
    assert waiting.promote is None and not waiting.leader_ready
    assert "has not renewed its lease" in waiting.conditions[0].message
    due = decide(claim(), pods, now=NOW, timing=TIMING, replicas=2, down=NOW - 2, lease=expired)
    assert due.promote == "orders-1"


def test_a_new_leader_gets_its_whole_not_ready_time_from_its_claim() -> None:
    """A standby is not Ready from its start; promoted after minutes, it must not be
    failed over at once for a not-Ready clock that started long before its claim."""
    claimed = Claim("terms/y", NUMBER_TOP - 1, "orders-1-abc", "orders-1", int((NOW - 10) * 1000))
    opening = PodView("orders-1", False, not_ready_since=NOW - 300, answer=Role.STARTING)
    decision = decide(
        claimed, [opening, standby("orders-0")], now=NOW, timing=TIMING, replicas=2, down=None
    )
    assert decision.promote is None
    assert "is not Ready for 10s" in decision.conditions[0].message


def test_a_leader_too_busy_to_answer_holds_while_it_renews_its_lease() -> None:
    """Seen on a loaded kind node: a probe that times out is not a dead process. It
    holds while its lease moves; it is down once the lease is quiet too (a frozen or
    cut-off node), and at once when the probe is refused (the process is gone)."""
    busy = [PodView("orders-0", True, slow=True), standby()]
    assert down_since(claim(), busy, None, NOW, LeaseSeen()) is None
    assert down_since(claim(), busy, None, NOW, LeaseSeen(quiet=True)) == NOW
    gone = [PodView("orders-0", True), standby()]
    assert down_since(claim(), gone, None, NOW, LeaseSeen()) == NOW
    frozen = decide(
        claim(), busy, now=NOW, timing=TIMING, replicas=2, down=NOW - 2, lease=LeaseSeen(quiet=True)
    )
    assert frozen.promote == "orders-1"
    assert "nor renew its lease" in frozen.conditions[0].message
