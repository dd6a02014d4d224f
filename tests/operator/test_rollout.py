"""The rollout of a configuration change (rollout.py, pure): standbys first, the leader
last through a switchover, one pod at a time, stopping where a new configuration does not
come up."""

from __future__ import annotations

from dataclasses import replace

from weaseldb_operator.leadership import PodView
from weaseldb_operator.rollout import Step, next_step

from weaseldb.core.channels import Role

OLD, NEW = "rev-old", "rev-new"


def leader(name: str = "db-0", revision: str | None = OLD) -> PodView:
    return PodView(name, ready=True, answer=Role.LEADER, role="leader", revision=revision)


def standby(name: str, revision: str | None = OLD) -> PodView:
    return PodView(name, ready=False, answer=Role.STANDBY, role="standby", revision=revision)


def step(pods: list[PodView], leader_ready: bool = True, replicas: int = 0) -> Step | None:
    return next_step(
        pods,
        update_revision=NEW,
        leader_pod="db-0",
        leader_ready=leader_ready,
        replicas=replicas or len(pods),
    )


def test_nothing_to_do_when_every_pod_is_at_the_update_revision() -> None:
    assert step([leader(revision=NEW), standby("db-1", NEW)]) is None


def test_standbys_go_first_highest_ordinal_first_one_at_a_time() -> None:
    pods = [leader(), standby("db-1"), standby("db-2")]
    assert step(pods) == Step("delete", "db-2", "outdated standby")
    deleting = [pods[0], pods[1], replace(pods[2], deleting=True)]
    assert step(deleting) is None
    recreated = [pods[0], pods[1], PodView("db-2", ready=False, revision=NEW)]
    assert step(recreated) is None  # db-2 does not answer as a standby yet
    assert step([pods[0], pods[1], standby("db-2", NEW)]) == Step(
        "delete", "db-1", "outdated standby"
    )


def test_a_missing_pod_waits_for_the_statefulset_to_recreate_it() -> None:
    assert step([leader(), standby("db-1")], replicas=3) is None


def test_the_leader_goes_last_through_a_switchover_to_an_updated_standby() -> None:
    pods = [leader(), standby("db-1", NEW), standby("db-2", NEW)]
    assert step(pods) == Step("promote", "db-1", "switchover from outdated leader db-0")


def test_the_fenced_old_leader_is_then_deleted_as_an_outdated_pod() -> None:
    old_leader = PodView("db-0", ready=False, role="standby", revision=OLD)
    new_leader = PodView("db-1", ready=True, role="leader", revision=NEW)
    found = next_step(
        [old_leader, new_leader],
        update_revision=NEW,
        leader_pod="db-1",
        leader_ready=True,
        replicas=2,
    )
    assert found == Step("delete", "db-0", "outdated and not serving as a standby")


def test_a_new_configuration_that_does_not_come_up_stops_the_roll_at_the_standby() -> None:
    broken = PodView("db-1", ready=False, revision=NEW)  # never answers as a standby
    assert step([leader(), broken]) is None
    assert step([leader(), broken, standby("db-2")]) is None


def test_a_single_replica_is_replaced_in_place() -> None:
    assert step([leader()]) == Step(
        "delete", "db-0", "outdated leader with no standby to switch to"
    )


def test_a_leader_that_does_not_serve_with_no_standby_is_replaced() -> None:
    broken = PodView("db-1", ready=False, revision=NEW)
    assert step([leader(), broken], leader_ready=False) == Step(
        "delete", "db-0", "outdated leader with no standby to switch to"
    )


def test_a_leader_that_does_not_serve_with_a_standby_is_left_to_failover() -> None:
    assert step([leader(), standby("db-1", NEW)], leader_ready=False) is None


def test_an_outdated_pod_that_is_not_a_standby_goes_even_while_the_leader_is_down() -> None:
    starting = PodView("db-1", ready=False, revision=OLD)
    assert step([leader(), starting], leader_ready=False) == Step(
        "delete", "db-1", "outdated and not serving as a standby"
    )


def test_pods_without_a_revision_label_or_an_unsettled_statefulset_are_left_alone() -> None:
    unlabelled = [leader(revision=None), standby("db-1", revision=None)]
    assert step(unlabelled) is None
    assert (
        next_step(
            [leader(), standby("db-1")],
            update_revision=None,
            leader_pod="db-0",
            leader_ready=True,
            replicas=2,
        )
        is None
    )
