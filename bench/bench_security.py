"""What TLS and client authentication cost on the commit path (performance.md P1 and P9
with the client API secured; docs/operator.md, "Security").

    .venv/bin/python bench/bench_security.py [--seconds 8] [--out bench/results/security.json]

Three `weaseldb up` sets on directory stores (fsync) and etcd run side by side and take
turns at every point, as in bench_commit.py: WeaselDB in plaintext, WeaselDB with TLS on
its client port, and WeaselDB with TLS and a bearer token checked against a grants file
(every commit's keys checked against the token's prefixes). The load generator keeps its
connections alive, so a TLS handshake is paid once per connection and the figures are the
steady cost: encryption and the grant check per request. One connection runs three times
per system (P9 takes the median p50); 16 and 64 connections once (P1 is at 64).
Writes JSON and a PNG next to it.
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path
from typing import Any

from bench_commit import Target, at, closed_loops, save
from systems import build_loadgen, etcd, warn_if_busy, weaseldb

COUNTS = [1, 16, 64]
PLAIN, TLS, TLS_AUTH, ETCD = "WeaselDB", "WeaselDB TLS", "WeaselDB TLS+token", "etcd"


def figures(runs: dict[str, list[Any]]) -> dict[str, float]:
    """P1 and P9 for each WeaselDB variant, and each secured one's cost against plaintext."""
    found: dict[str, float] = {}
    peer = runs[ETCD]
    for name, key in ((PLAIN, "plain"), (TLS, "tls"), (TLS_AUTH, "tls_token")):
        mine = runs[name]
        found[f"P1_commits_per_s_at_64_{key}_over_etcd"] = round(
            at(mine, 64)["per_second"] / at(peer, 64)["per_second"], 3
        )
        found[f"P9_p50_at_1_{key}_over_etcd"] = round(
            at(mine, 1)["latency_ms"]["p50"] / at(peer, 1)["latency_ms"]["p50"], 3
        )
        found[f"commits_per_s_at_64_{key}"] = round(at(mine, 64)["per_second"])
        found[f"p50_ms_at_1_{key}"] = at(mine, 1)["latency_ms"]["p50"]
    for key in ("tls", "tls_token"):
        found[f"throughput_at_64_{key}_over_plain"] = round(
            found[f"commits_per_s_at_64_{key}"] / found["commits_per_s_at_64_plain"], 3
        )
        found[f"p50_at_1_{key}_over_plain"] = round(
            found[f"p50_ms_at_1_{key}"] / found["p50_ms_at_1_plain"], 3
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--out", default="bench/results/security.json")
    args = parser.parse_args()
    build_loadgen()
    warn_if_busy()
    print("WeaselDB plaintext, with TLS, with TLS and a token; etcd:", flush=True)
    with (
        weaseldb() as plain,
        weaseldb(tls=True) as tls,
        weaseldb(tls=True, auth=True) as secured,
        etcd() as peer,
    ):
        targets = [
            Target(PLAIN, plain.address, "weasel"),
            Target(TLS, tls.address, "weasel", cacert=tls.cacert),
            Target(
                TLS_AUTH,
                secured.address,
                "weasel",
                cacert=secured.cacert,
                token_file=secured.token_file,
            ),
            Target(ETCD, peer.address, "etcd"),
        ]
        runs = closed_loops(targets, args.seconds, COUNTS)
    summary = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_generator": "bench/loadgen (Go, one HTTP/1.1 keep-alive connection each)",
        "workload": "point_read + write of one key; 16-byte keys of 100,000; 100-byte values",
        "closed_loop": runs,
        "figures": figures(runs),
    }
    save(summary, runs, Path(args.out))


if __name__ == "__main__":
    main()
