"""Who leads, decided from the newest term claim and the pods (pure).

The operator never writes a claim. It reads the newest one (storage.md, "Terms and
fencing"), labels that pod leader and the others standby, and when the leader pod has
been missing or not Ready for `leaderFailoverSeconds` it asks one standby to claim the
next term (POST /promote on its persister). The standby's own claim then decides: if two
candidates race, S3's create-only PUT picks one, as it does for pods that start together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from weaseldb.core.types import NUMBER_TOP
from weaseldb_operator.conditions import Condition, Reason, Type
from weaseldb_operator.resources import LEADER, STANDBY


@dataclass(frozen=True)
class Claim:
    """One term claim object (written by services/persister/leadership.py)."""

    key: str
    term_number: int
    leader_id: str
    pod: str
    started_at_ms: int

    @property
    def term(self) -> int:
        """1 for the first term, counting up (claim numbers count down from 2**64-1)."""
        return NUMBER_TOP - self.term_number + 1

    @classmethod
    def parse(cls, key: str, document: dict[str, Any]) -> Claim:
        return cls(
            key=key,
            term_number=int(document["term"]),
            leader_id=str(document.get("leader_id", "")),
            pod=str(document.get("pod", "")),
            started_at_ms=int(document.get("started_at_ms", 0)),
        )


@dataclass(frozen=True)
class PodView:
    """What the decision needs to know about one pod of the database."""

    name: str
    ready: bool
    not_ready_since: float | None = None  # epoch seconds of the Ready condition's transition
    deleting: bool = False
    standby: bool = False  # its persister's /readyz answer has the role standby
    role: str | None = None  # current value of the role label
    revision: str | None = None  # the StatefulSet revision it was created from


@dataclass(frozen=True)
class Decision:
    leader: Claim | None
    leader_ready: bool
    labels: dict[str, str]  # pod name -> role, only pods whose label must change
    promote: str | None
    conditions: list[Condition] = field(default_factory=list)


def _labels(pods: list[PodView], leader_pod: str | None) -> dict[str, str]:
    wanted = {p.name: LEADER if p.name == leader_pod else STANDBY for p in pods if not p.deleting}
    return {
        name: role
        for name, role in wanted.items()
        if role != next(p.role for p in pods if p.name == name)
    }


def _pick_standby(pods: list[PodView], leader_pod: str) -> str | None:
    candidates = sorted(
        p.name for p in pods if p.standby and not p.deleting and p.name != leader_pod
    )
    return candidates[0] if candidates else None


def _elected(reason: Reason, message: str) -> Condition:
    status = "True" if reason is Reason.LEADER_READY else "False"
    return Condition(Type.LEADER_ELECTED, status, reason, message)


def _summary(
    elected: Condition, pods: list[PodView], leader_pod: str | None, replicas: int
) -> list[Condition]:
    serving = elected.reason is Reason.LEADER_READY
    standbys = sum(1 for p in pods if p.standby and p.name != leader_pod and not p.deleting)
    ready = (
        Condition(Type.READY, "True", Reason.SERVING, f"leader pod {leader_pod} is Ready")
        if serving
        else Condition(
            Type.READY, "False", Reason.NO_LEADER, f"no leader serves: {elected.message}"
        )
    )
    wanted = replicas - 1
    if serving and standbys >= wanted:
        degraded = Condition(
            Type.DEGRADED, "False", Reason.AS_EXPECTED, f"leader and {standbys}/{wanted} standbys"
        )
    else:
        lead = "leader serves" if serving else "no leader serves"
        degraded = Condition(
            Type.DEGRADED,
            "True",
            Reason.STANDBYS_MISSING,
            f"{lead}; {standbys}/{wanted} standbys answer as standby",
        )
    return [elected, ready, degraded]


def absent_since(
    claim: Claim | None, pods: list[PodView], previous: float | None, now: float
) -> float | None:
    """When the claiming pod was first seen absent, carried from one observation to the
    next (`previous`); None while it is there or nothing is claimed. A pod being deleted
    counts as absent: it will not serve again, and a pod stuck terminating on a dead node
    (or deleted by hand to hurry a failover) must not hold the clock at zero."""
    if claim is None or any(p.name == claim.pod and not p.deleting for p in pods):
        return None
    return previous if previous is not None else now


def decide(
    claim: Claim | None,
    pods: list[PodView],
    *,
    now: float,
    failover_seconds: float,
    replicas: int,
    missing_since: float | None,
) -> Decision:
    """Labels, an optional promotion and the conditions, from one observation.

    `missing_since` is when the operator first saw the claiming pod absent (it keeps that
    between observations; a pod that does not exist has no timestamp of its own)."""
    if claim is None:
        elected = _elected(
            Reason.NO_CLAIM,
            "no term claimed under PREFIX/terms/ yet: pods claim one when they start",
        )
        return Decision(
            None, False, _labels(pods, None), None, _summary(elected, pods, None, replicas)
        )
    pod = next((p for p in pods if p.name == claim.pod and not p.deleting), None)
    if pod is not None and pod.ready:
        elected = _elected(
            Reason.LEADER_READY, f"term {claim.term} held by {claim.leader_id} in pod {claim.pod}"
        )
        return Decision(
            claim,
            True,
            _labels(pods, claim.pod),
            None,
            _summary(elected, pods, claim.pod, replicas),
        )
    since = (pod.not_ready_since if pod is not None else missing_since) or now
    waited = now - since
    what = (
        f"leader pod {claim.pod} (term {claim.term}) "
        f"{'is not Ready' if pod is not None else 'does not exist'} for {waited:.0f}s"
    )
    reason = Reason.LEADER_NOT_READY if pod is not None else Reason.LEADER_POD_MISSING
    promote = None
    if waited >= failover_seconds:
        promote = _pick_standby(pods, claim.pod)
        reason = Reason.FAILING_OVER if promote else Reason.NO_STANDBY
        what += (
            f"; asked standby {promote} to claim the next term"
            if promote
            else "; no pod answers as a standby: check the pods or raise spec.replicas"
        )
    else:
        what += f"; failover after {failover_seconds:.0f}s"
    elected = _elected(reason, what)
    return Decision(
        claim,
        False,
        _labels(pods, claim.pod),
        promote,
        _summary(elected, pods, claim.pod, replicas),
    )
