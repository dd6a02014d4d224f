"""Who leads, decided from the newest term claim and the pods (pure).

The operator never writes a claim. It reads the newest one (storage.md, "Terms and
fencing"), labels that pod leader and the others standby, and asks one standby to claim
the next term (POST /promote on its persister) when the leader's persister has not held
its term for `leaderFailoverSeconds` (failover), when its pod has not been Ready for
`leaderNotReadySeconds`, or when a serving leader must move (switchover: scale-down, a
cordoned node, `spec.targetLeader`). The standby's own claim then decides: if two
candidates race, S3's create-only PUT picks one, as it does for pods that start together.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from weaseldb.core.channels import Role
from weaseldb.core.claims import TermClaim
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
    def of(cls, key: str, claim: TermClaim) -> Claim:
        """The operator's view of a claim object, decoded by the core (weaseldb.core.claims,
        the one reader and writer of the format)."""
        return cls(key, claim.term, claim.leader_id, claim.pod, claim.started_at_ms)


#: The persister answers that mean "this process set holds (or is opening) its term": a
#: term's leader answers `starting` while it recovers, so a promoted standby gets the time
#: its recovery needs without being failed over in turn.
HOLDING = frozenset({Role.LEADER, Role.STARTING})
#: A probe that timed out counts against the leader only once its lease has also been
#: unchanged this long (or leaderFailoverSeconds, if longer). The lease is renewed every
#: second, and a busy leader renews late: a second or two of quiet is no evidence.
LEASE_QUIET_S = 3.0


@dataclass(frozen=True)
class PodView:
    """What the decision needs to know about one pod of the database."""

    name: str
    ready: bool
    not_ready_since: float | None = None  # epoch seconds of the Ready condition's transition
    deleting: bool = False
    answer: Role | None = None  # the role in its persister's /readyz answer; None: no answer
    slow: bool = False  # no answer because the probe timed out (not refused)
    role: str | None = None  # current value of the role label
    revision: str | None = None  # the StatefulSet revision it was created from
    node: str | None = None  # the node it runs on
    schedulable: bool = True  # False: its node is cordoned (a drain has started)

    @property
    def standby(self) -> bool:
        """A live standby: its persister answers `standby` (and it is not going away)."""
        return self.answer is Role.STANDBY and not self.deleting

    @property
    def ordinal(self) -> int:
        """The StatefulSet ordinal in the pod's name (NAME-N); -1 if it has none."""
        _, _, number = self.name.rpartition("-")
        return int(number) if number.isdigit() else -1


@dataclass(frozen=True)
class Decision:
    leader: Claim | None
    leader_ready: bool
    labels: dict[str, str]  # pod name -> role, only pods whose label must change
    promote: str | None
    conditions: list[Condition] = field(default_factory=list)
    switchover: str | None = None  # why `promote` moves a serving leader, when it does


def _labels(pods: list[PodView], leader_pod: str | None) -> dict[str, str]:
    # A pod being deleted never leads again; it loses the label at once, as the client
    # Service routes by the label alone (resources.gateway_service_for).
    wanted = {p.name: LEADER if p.name == leader_pod and not p.deleting else STANDBY for p in pods}
    changes = [(name, role) for name, role in wanted.items() if role != _role_of(pods, name)]
    # Demotions first: the Service never selects two leaders between two label patches.
    return dict(sorted(changes, key=lambda change: change[1] == LEADER))


def _role_of(pods: list[PodView], name: str) -> str | None:
    return next(p.role for p in pods if p.name == name)


def _pick_standby(pods: list[PodView], leader_pod: str) -> str | None:
    candidates = sorted(
        (p for p in pods if p.standby and p.name != leader_pod),
        key=lambda p: (not p.schedulable, p.name),  # a cordoned node is about to drain
    )
    return candidates[0].name if candidates else None


def _elected(reason: Reason, message: str) -> Condition:
    status = "True" if reason is Reason.LEADER_READY else "False"
    return Condition(Type.LEADER_ELECTED, status, reason, message)


def _summary(
    elected: Condition, pods: list[PodView], leader_pod: str | None, replicas: int
) -> list[Condition]:
    serving = elected.reason is Reason.LEADER_READY
    standbys = sum(1 for p in pods if p.standby and p.name != leader_pod)
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


@dataclass(frozen=True)
class LeaseSeen:
    """What the operator saw of the claim's lease (weaseldb.core.lease)."""

    expired: bool = False  # renewed before, unchanged for persister.lease_timeout_s
    quiet: bool = False  # renewed before, unchanged for leaderFailoverSeconds or LEASE_QUIET_S


def holds(claim: Claim, pods: list[PodView], lease: LeaseSeen = LeaseSeen()) -> bool:
    """The claiming pod exists, is not being deleted, its lease in the store is renewed,
    and its persister answers as the term's leader (serving or still opening it) - or is
    too busy to answer in time while it still renews its lease: a loaded node is not a
    dead one (one that is gone refuses the probe; one cut off stops renewing too)."""
    if lease.expired:
        return False
    pod = next((p for p in pods if p.name == claim.pod and not p.deleting), None)
    if pod is None:
        return False
    return pod.answer in HOLDING or (pod.slow and not lease.quiet)


def down_since(
    claim: Claim | None,
    pods: list[PodView],
    previous: float | None,
    now: float,
    lease: LeaseSeen = LeaseSeen(),
) -> float | None:
    """When the claiming pod was first seen not holding its term, carried from one
    observation to the next (`previous`); None while it holds or nothing is claimed.

    This is the failure detector: the operator asks the leader's persister itself every
    pass, so a dead process, a pod that is gone or being deleted (it will not serve again:
    a pod stuck terminating on a dead node must not hold the clock at zero) and a node
    that stopped answering all count, within a pass, whatever kubelet reports."""
    if claim is None or holds(claim, pods, lease):
        return None
    return previous if previous is not None else now


@dataclass(frozen=True)
class Timing:
    """How long the operator waits before it acts on a leader that does not serve."""

    failover_seconds: float  # not holding its term (no answer, gone, being deleted)
    not_ready_seconds: float  # holding it, but its pod not Ready (a sick gateway)


def decide(
    claim: Claim | None,
    pods: list[PodView],
    *,
    now: float,
    timing: Timing,
    replicas: int,
    down: float | None,
    target_leader: str | None = None,
    paused: bool = False,
    lease: LeaseSeen = LeaseSeen(),
) -> Decision:
    """Labels, an optional promotion and the conditions, from one observation.

    `down` is `down_since()`: when the operator first saw the claiming pod not holding its
    term (it keeps that between observations; a pod that does not exist has no timestamp
    of its own). `paused`: report, but neither fail over nor switch over."""
    if claim is None:
        elected = _elected(
            Reason.NO_CLAIM,
            "no term claimed under PREFIX/terms/ yet: pods claim one when they start",
        )
        return _decision(None, pods, elected, replicas)
    pod = next((p for p in pods if p.name == claim.pod and not p.deleting), None)
    held = holds(claim, pods, lease)
    if pod is not None and held and pod.ready:
        return _serving(claim, pods, pod, replicas, target_leader, paused=paused)
    if pod is not None and held:
        # From the later of the pod's last Ready change and the claim: a pod that was a
        # not-Ready standby for minutes gets the whole leaderNotReadySeconds to open its
        # term (its recovery), instead of being failed over the moment it claims.
        claimed_at = claim.started_at_ms / 1000
        waited = now - max(pod.not_ready_since or now, claimed_at)
        what, reason, limit = "is not Ready", Reason.LEADER_NOT_READY, timing.not_ready_seconds
    else:
        waited = now - (down or now)
        what, reason = _down(claim, pods, lease.expired)
        # A pod that is gone or being deleted will not serve this term again: no wait.
        limit = timing.failover_seconds if pod is not None else 0.0
    what = f"leader pod {claim.pod} (term {claim.term}) {what} for {waited:.0f}s"
    promote = None
    if waited >= limit and paused:
        what += "; spec.paused: no failover until it is resumed"
    elif waited >= limit:
        promote = _pick_standby(pods, claim.pod)
        reason = Reason.FAILING_OVER if promote else Reason.NO_STANDBY
        what += (
            f"; asked standby {promote} to claim the next term"
            if promote
            else "; no pod answers as a standby: check the pods or raise spec.replicas"
        )
    else:
        what += f"; failover after {limit:.0f}s"
    return _decision(claim, pods, _elected(reason, what), replicas, promote=promote)


def _decision(
    claim: Claim | None,
    pods: list[PodView],
    elected: Condition,
    replicas: int,
    *,
    promote: str | None = None,
    switchover: str | None = None,
) -> Decision:
    """The labels and conditions that follow from the claim and the LeaderElected verdict;
    the leader serves exactly when that verdict is LeaderReady."""
    leader_pod = claim.pod if claim else None
    return Decision(
        claim,
        elected.reason is Reason.LEADER_READY,
        _labels(pods, leader_pod),
        promote,
        _summary(elected, pods, leader_pod, replicas),
        switchover=switchover,
    )


def _down(claim: Claim, pods: list[PodView], lease_expired: bool) -> tuple[str, Reason]:
    pod = next((p for p in pods if p.name == claim.pod), None)
    if pod is None:
        return "does not exist", Reason.LEADER_POD_MISSING
    if pod.deleting:
        return "is being deleted", Reason.LEADER_POD_MISSING
    if lease_expired:
        return "has not renewed its lease in the store", Reason.LEADER_UNRESPONSIVE
    answer = f"answers {pod.answer}" if pod.answer else "does not answer"
    if pod.slow:
        answer = "does not answer in time, nor renew its lease"
    return f"{answer} (its persister's /readyz)", Reason.LEADER_UNRESPONSIVE


def _serving(
    claim: Claim,
    pods: list[PodView],
    leader: PodView,
    replicas: int,
    target_leader: str | None,
    *,
    paused: bool,
) -> Decision:
    held = f"term {claim.term} held by {claim.leader_id} in pod {claim.pod}"
    move = switchover(leader, pods, replicas=replicas, target_leader=target_leader)
    if paused:
        move = None
    promote, why = move if move else (None, None)
    if promote:
        held += f"; switching over to {promote}: {why}"
    elected = _elected(Reason.LEADER_READY, held)
    return _decision(claim, pods, elected, replicas, promote=promote, switchover=why)


def switchover(
    leader: PodView, pods: list[PodView], *, replicas: int, target_leader: str | None
) -> tuple[str, str] | None:
    """A standby to move a serving leader to, and why; None to stay. In order: the
    leader's ordinal is going away (scale-down), its node is cordoned (a drain waits on
    the PodDisruptionBudget for this), `spec.targetLeader` names another pod."""
    standbys = sorted((p for p in pods if p.standby), key=lambda p: p.name)
    if leader.ordinal >= replicas:
        kept = [p for p in standbys if 0 <= p.ordinal < replicas]
        return _first(kept, f"scale-down: replicas {replicas} removes {leader.name}")
    if not leader.schedulable:
        elsewhere = [p for p in standbys if p.schedulable and p.node != leader.node]
        return _first(elsewhere, f"node {leader.node} is cordoned (drain)")
    if target_leader and target_leader != leader.name:
        named = [p for p in standbys if p.name == target_leader and p.schedulable]
        return _first(named, f"spec.targetLeader is {target_leader}")
    return None


def _first(candidates: list[PodView], why: str) -> tuple[str, str] | None:
    return (candidates[0].name, why) if candidates else None
