"""The admin door's rules (weaseldb.runtime.service.AdminDoor); the real process test is
tests/integration/test_admin_door.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from weaseldb.core.config import ConfigError, build
from weaseldb.runtime.service import AdminDoor


def test_without_a_token_file_the_door_is_open() -> None:
    door = AdminDoor.of(build({}))
    assert door.admits(None) and door.admits("Bearer anything")


def test_with_one_only_the_bearer_token_passes(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("abc123\n")
    door = AdminDoor.of(build({"admin_token_file": str(tmp_path / "token")}))
    assert door.admits("Bearer abc123") and door.admits("bearer abc123")
    for refused in (None, "", "abc123", "Bearer abc12", "Bearer abc1234", "Basic abc123"):
        assert not door.admits(refused), refused


@pytest.mark.parametrize("content", [None, "", "\n"])
def test_a_missing_or_empty_token_file_stops_the_start(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match="admin_token_file"):
        AdminDoor.of(build({"admin_token_file": str(path)}))


def test_a_rotated_token_file_is_read_at_the_next_request(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("old")
    door = AdminDoor.of(build({"admin_token_file": str(path)}))
    path.write_text("new\n")  # the kubelet refreshed the mounted Secret
    assert door.admits("Bearer new") and not door.admits("Bearer old")
    path.unlink()  # unreadable now: the last token read stays, the door stays shut
    assert door.admits("Bearer new") and not door.admits(None)
