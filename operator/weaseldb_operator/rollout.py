"""How a configuration change reaches the pods (pure): standbys first, the leader last
through a switchover, one pod at a time.

The StatefulSet uses `updateStrategy: OnDelete`: its own rolling update waits for each
replaced pod to become Ready, and a standby is never Ready (only the leader serves), so
the roll would stop at the first standby. Instead the operator deletes outdated pods
itself and the StatefulSet recreates them at the new revision:

1. an outdated standby goes first, while the leader serves and every already updated
   standby answers as a standby (a new configuration that does not come up stops the roll
   there, with the leader untouched);
2. when only the leader is outdated, an updated live standby is asked to claim the next
   term (a switchover: one leadership change, no failover wait); the old leader, fenced
   by that claim, is then an outdated standby and goes by rule 1;
3. with nothing to switch to (one replica, or no pod answers as a standby while the
   leader does not serve either) the leader pod is deleted: it cannot be worse off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from weaseldb_operator.leadership import PodView


@dataclass(frozen=True)
class Step:
    action: Literal["delete", "promote"]
    pod: str
    why: str


def next_step(
    pods: list[PodView],
    *,
    update_revision: str | None,
    leader_pod: str | None,
    leader_ready: bool,
    replicas: int,
) -> Step | None:
    """The one thing to do now to bring the pods to `update_revision`, or None (all
    updated, or waiting for the last step to settle)."""
    if update_revision is None or any(p.deleting for p in pods) or len(pods) < replicas:
        return None  # a pod is on its way out or in: one at a time
    outdated = [p for p in pods if p.revision not in (None, update_revision)]
    if not outdated:
        return None
    others = [p for p in pods if p.name != leader_pod]
    updated_standbys_live = all(p.standby for p in others if p not in outdated)
    for pod in sorted((p for p in outdated if p.name != leader_pod), key=lambda p: p.name)[::-1]:
        if not pod.standby:
            return Step("delete", pod.name, "outdated and not serving as a standby")
        if leader_ready and updated_standbys_live:
            return Step("delete", pod.name, "outdated standby")
        return None  # wait: the leader serves and the updated standbys answer first
    leader = next((p for p in outdated if p.name == leader_pod), None)
    if leader is None:
        return None
    target = next((p.name for p in sorted(others, key=lambda p: p.name) if p.standby), None)
    if target is not None and leader_ready:
        return Step("promote", target, f"switchover from outdated leader {leader.name}")
    if target is None and (replicas == 1 or not leader_ready):
        return Step("delete", leader.name, "outdated leader with no standby to switch to")
    return None  # the leader does not serve but a standby does: failover handles it
