"""The side channels (weaseldb.core.channels): one place names them, and /readyz answers a
typed body whose `role` programs read."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from weaseldb.core import channels
from weaseldb.core.channels import Readiness, Role
from weaseldb.runtime.service import Health

REPO = Path(__file__).resolve().parents[2]
#: How each channel's file is spelled; only weaseldb/core/channels.py may spell it.
SPELLINGS = re.compile(r"""idwindow-|committed\.version|["']config\.json|\.port["']""")


def test_an_id_window_is_read_only_under_its_own_name(tmp_path: Path) -> None:
    name = channels.id_window_name(7)
    assert name == "idwindow-00000000000000000007.bin"
    assert Path(name).match(channels.ID_WINDOW_GLOB)
    assert channels.id_window_path(tmp_path, name) == tmp_path / name
    for elsewhere in ("", "../idwindow-00000000000000000007.bin", "/etc/passwd", "x.bin"):
        with pytest.raises(ValueError, match="not an id-window file name"):
            channels.id_window_path(tmp_path, elsewhere)


def test_readiness_carries_a_role_and_only_the_details_a_stage_has() -> None:
    body = channels.encode_readiness(Readiness(False, Role.STANDBY, "standby: db-0 leads"))
    assert msgspec.json.decode(body) == {
        "ready": False,
        "role": "standby",
        "reason": "standby: db-0 leads",
    }
    assert channels.decode_readiness(body).role is Role.STANDBY
    with pytest.raises(msgspec.ValidationError):  # an answer from before `role`
        channels.decode_readiness(b'{"ready": false, "reason": "standby: db-0 leads"}')


def test_health_says_leader_when_ready_and_starting_until_then_unless_told() -> None:
    health = Health("recovering")
    assert (health.ready, health.readiness.role, health.reason) == (
        False,
        Role.STARTING,
        "recovering",
    )
    health.set(True, "leading")
    assert (health.ready, health.readiness.role) == (True, Role.LEADER)
    health.set(False, "standby: the newest term is held by pod db-0", Role.STANDBY)
    assert channels.readiness_status(health.readiness) == 503
    assert health.readiness.role is Role.STANDBY


def test_only_the_channels_module_spells_a_channel_file() -> None:
    sources = [
        path
        for top in ("weaseldb", "weaseldb_cli", "services", "operator")
        for path in (REPO / top).rglob("*.py")
    ]
    spelled = {
        str(path.relative_to(REPO))
        for path in sources
        if path != REPO / "weaseldb/core/channels.py" and SPELLINGS.search(path.read_text())
    }
    assert not spelled, f"use weaseldb.core.channels in {sorted(spelled)}"
