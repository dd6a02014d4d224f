import os
from pathlib import Path

import pytest

from weaseldb.core import config, configdoc
from weaseldb.core.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_s3_defaults_follow_the_design() -> None:
    c = config.build({"store": "s3://bucket/prefix"})
    p = c.persister
    assert (p.batch_timeout_ms, p.batch_size_threshold, p.max_in_flight_requests) == (
        1,
        1 << 20,
        50,
    )
    assert (p.target_pool_size, p.max_retry_attempts, p.retry_base_delay_ms) == (100, 3, 100)
    assert (c.resolver.window_seconds, c.resolver.window_versions) == (5, 10_000_000)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        pytest.param(
            {"persister": {"max_in_flight_requests": 1001}},
            "persister.max_in_flight_requests",
            id="in-flight-over-1000",
        ),
        pytest.param(
            {"persister": {"max_in_flight_requests": 0}},
            "persister.max_in_flight_requests",
            id="in-flight-zero",
        ),
        pytest.param(
            {"persister": {"batch_timeout_ms": 0}}, "persister.batch_timeout_ms", id="timeout-zero"
        ),
        pytest.param(
            {"persister": {"batch_size_threshold": -1}},
            "persister.batch_size_threshold",
            id="size-negative",
        ),
        pytest.param(
            {"persister": {"max_retry_attempts": -1}},
            "persister.max_retry_attempts",
            id="retries-negative",
        ),
        pytest.param(
            {"persister": {"retry_base_delay_ms": 0}},
            "persister.retry_base_delay_ms",
            id="delay-zero",
        ),
        pytest.param(
            {"persister": {"max_inflight": 5}}, "persister.max_inflight", id="unknown-key"
        ),
        pytest.param({"ring": "udp"}, "ring", id="bad-enum"),
    ],
)
def test_invalid_config_names_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        config.build(data)


def test_overrides_and_files(tmp_path: Path) -> None:
    path = tmp_path / "w.toml"
    path.write_text('store = "dir:/x"\n[persister]\nmax_in_flight_requests = 7\n')
    c = config.load(path, {"gateway.workers": 2})
    assert (c.store, c.persister.max_in_flight_requests, c.gateway.workers) == ("dir:/x", 7, 2)
    path.write_text("not = [toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        config.load(path)


def test_configuration_doc_is_generated_from_the_models() -> None:
    assert (ROOT / "docs" / "configuration.md").read_text() == configdoc.render()


def test_in_flight_default_depends_on_the_store() -> None:
    assert config.build({"store": "dir:/x"}).persister.max_in_flight_requests == 4
    assert config.build({"store": "s3://b/p"}).persister.max_in_flight_requests == 50
    explicit = {"store": "dir:/x", "persister": {"max_in_flight_requests": 9}}
    assert config.build(explicit).persister.max_in_flight_requests == 9


def test_pod_name_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEASELDB_POD_NAME", "db-1")
    assert config.load(None).pod_name == "db-1"
    assert config.load(None, {"pod_name": "explicit"}).pod_name == "explicit"


def test_the_ring_is_unix_by_default_ipc_is_its_old_name_and_the_environment_chooses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert config.load(None).ring == "unix"
    assert config.build({"ring": "ipc"}).ring == "unix"  # configs written before the rename
    monkeypatch.setenv("WEASELDB_RING", "shm")
    assert config.load(None).ring == "shm"
    monkeypatch.setenv("WEASELDB_RING", "zeromq")
    with pytest.raises(ConfigError, match="ring: Input should be 'unix', 'shm' or 'tcp'"):
        config.load(None)


def test_up_starts_one_gateway_worker_per_core_unless_told() -> None:
    from weaseldb_cli.main import MAX_AUTO_WORKERS, gateway_for_host

    automatic = gateway_for_host(config.build({}))
    assert automatic.workers == max(1, min(MAX_AUTO_WORKERS, os.cpu_count() or 1))
    assert gateway_for_host(config.build({"gateway": {"workers": 1}})).workers == 1


def test_a_lease_timeout_within_two_renewals_is_refused_naming_the_fields() -> None:
    with pytest.raises(ConfigError, match=r"lease_timeout_s .* lease_renew_s"):
        config.build({"persister": {"lease_renew_s": 1, "lease_timeout_s": 1.5}})
    assert config.build({"persister": {"lease_timeout_s": 0}}).persister.lease_timeout_s == 0
