"""Store URLs: `credentials=NAME` names the environment variables holding a store's keys."""

from __future__ import annotations

import pytest

from weaseldb.runtime.stores import named_credentials, open_store


def test_named_credentials_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BACKUP_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("BACKUP_SECRET_ACCESS_KEY", "secret")
    assert named_credentials("BACKUP") == ("key", "secret")
    assert named_credentials(None) is None


def test_missing_named_credentials_name_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOPE_ACCESS_KEY_ID", raising=False)
    with pytest.raises(ValueError, match="NOPE_ACCESS_KEY_ID and NOPE_SECRET_ACCESS_KEY"):
        open_store("s3://bucket/prefix?endpoint=http://127.0.0.1:1&credentials=NOPE")
