"""Regenerate the README's performance table from the JSON `make bench` wrote, so the table
is never typed by hand.

    .venv/bin/python bench/report.py [--readme README.md] [--log bench/HISTORY.md | --no-log]

Rewrites the part of the README between the two `bench:table` markers and appends the same
table, dated and with the commit it measured, to the measurement history (bench/HISTORY.md),
so the README says what the last run measured and the history keeps every run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path("bench/results")
BEGIN, END = "<!-- bench:table:begin -->", "<!-- bench:table:end -->"
GOALS = {
    "P1": ">= 1.0 at 16 and at 64 (aim 2.0)",
    "P2": "<= 1.0",
    "P3": ">= 0.8",
    "P4": "<= 20",
    "P5": "<= 1.5",
    "P6": ">= 0.8",
    "P7": ">= 1.0",
    "P9": "<= 1.5 (aim 1.0)",
    "P10": "<= 5 s",
    "P11": ">= 0.9",
    "P12": ">= 1.0",
    "P13": "<= 48 B; >= 0.9",
}


def read(name: str) -> Any:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def _runs(weasel: dict[str, Any], peer: dict[str, Any], percentile: str = "p99") -> str:
    """`; medians of a, b, c / d, e, f`: every run's value where the figure took the
    median of several (none from a JSON written before it did)."""
    field = f"{percentile}_runs"
    if field not in weasel or field not in peer:
        return ""
    each = [", ".join(str(p) for p in r[field]) for r in (weasel, peer)]
    return f"; medians of {each[0]} / {each[1]}"


def _closed(commit: Any, system: str, connections: int) -> Any:
    return next(r for r in commit["closed_loop"][system] if r["connections"] == connections)


def rows() -> list[tuple[str, str, str, str]]:
    """(figure, what, measured, goal)"""
    found: list[tuple[str, str, str, str]] = []
    commit = read("commit.json")
    if commit:
        figures = commit["figures"]
        w64, e64 = _closed(commit, "WeaselDB", 64), _closed(commit, "etcd", 64)
        w16, e16 = _closed(commit, "WeaselDB", 16), _closed(commit, "etcd", 16)
        w1, e1 = _closed(commit, "WeaselDB", 1), _closed(commit, "etcd", 1)
        noop64 = _closed(commit, "no-op POST", 64)
        half_w, half_e = commit["open_loop_at_half_max"].values()
        found += [
            (
                "P1",
                "durable commits/s at 64 connections (at 16), WeaselDB / etcd",
                f"{figures['P1_commits_per_s_at_64_weasel_over_etcd']} "
                f"({w64['per_second']:,.0f} / {e64['per_second']:,.0f}); at 16: "
                f"{figures['P1_commits_per_s_at_16_weasel_over_etcd']} "
                f"({w16['per_second']:,.0f} / {e16['per_second']:,.0f})",
                GOALS["P1"],
            ),
            (
                "P2",
                "p99 at 50 % of each one's maximum, open loop, WeaselDB / etcd",
                f"{figures['P2_p99_at_half_max_weasel_over_etcd']} "
                f"({half_w['latency_ms']['p99']} ms / {half_e['latency_ms']['p99']} ms"
                f"{_runs(half_w, half_e)})",
                GOALS["P2"],
            ),
            (
                "P3",
                "commits/s / no-op POSTs/s on the same stack, at 64 connections",
                f"{figures['P3_commit_over_noop_at_64']} (no-op: {noop64['per_second']:,.0f}/s)",
                GOALS["P3"],
            ),
            (
                "P4",
                "object-store PUTs per 1,000 commits on MinIO at saturation (the connection "
                "count with the most commits/s; at 64 connections in brackets)",
                _p4(commit),
                GOALS["P4"],
            ),
            (
                "P9",
                "p50 at 1 connection, WeaselDB / etcd",
                f"{figures['P9_p50_at_1_weasel_over_etcd']} "
                f"({w1['latency_ms']['p50']} ms / {e1['latency_ms']['p50']} ms"
                f"{_runs(w1, e1, 'p50')})",
                GOALS["P9"],
            ),
        ]
    recovery = read("recovery-dir.json")
    if recovery:
        small, large = recovery["results"][0], recovery["results"][-1]
        found.append(
            (
                "P5",
                f"recovery with {large['batches']:,} batches / with {small['batches']:,}",
                f"{recovery['P5_ratio_large_over_small']} ({large['recovery_ms_median']} ms / "
                f"{small['recovery_ms_median']} ms)",
                GOALS["P5"],
            )
        )
    subscribe = read("subscribe.json")
    if subscribe:
        found.append(
            (
                "P6",
                f"commits/s with {subscribe['subscribers']} live subscribers / with none",
                f"{subscribe['P6_with_over_without']} "
                f"({subscribe['events_per_s_delivered']:,} events/s delivered, "
                f"{subscribe['gaps']} gaps)",
                GOALS["P6"],
            )
        )
    compaction = read("compaction.json")
    if compaction and compaction.get("figure") == "P7":
        found.append(
            (
                "P7",
                "compaction: operations/s, Spark local[2] / one process",
                _p7(compaction),
                GOALS["P7"],
            )
        )
    soak = read("soak.json")
    if soak:
        figures = soak["figures"]
        found.append(
            (
                "P13",
                f"soak, {soak['seconds'] / 60:g} min at {soak['connections']} connections: "
                "RSS growth of all processes per remembered request id; commits/s of the "
                f"last {figures['minute_s']:g} s / the first",
                f"{figures['P13_rss_bytes_per_remembered_id']} B "
                f"({figures['rss_growth_bytes'] / 2**20:,.0f} MiB / "
                f"{figures['remembered_at_end']:,} ids); {figures['P13_last_over_first']} "
                f"({figures['commits_per_s_last_minute']:,} / "
                f"{figures['commits_per_s_first_minute']:,} per s)",
                GOALS["P13"],
            )
        )
    failover = read("failover.json")
    if failover:
        rounds = ", ".join(f"{r:g}" for r in failover["rounds"])
        found.append(
            (
                "P10",
                "failover on kind: leader pod SIGKILLed under load to the first commit "
                "after it, median (etcd elects in ~1 s; CloudNativePG 30 s+)",
                f"{failover['P10_median_s']:g} s (rounds {rounds}; "
                f"worst {failover['worst_s']:g} s)",
                GOALS["P10"],
            )
        )
    found += _readers(read("readers.json"))
    found += _restore(read("restore.json"))
    found += _security(read("security.json"))
    found += _ring(read("ring.json"))
    restart = read("stage-restart.json")
    if restart:
        stages = restart["stages"]
        slowest = max((max(times["first_commit_s"]), stage) for stage, times in stages.items())
        found.append(
            (
                "-",
                "one stage SIGKILLed and started alone: its start to the first commit",
                f"at most {slowest[0]:.1f} s (the {slowest[1]})",
                "seconds",
            )
        )
    return sorted(found)


def _readers(readers: Any) -> list[tuple[str, str, str, str]]:
    if not readers:
        return []
    p11, p12, cold = readers["P11"], readers["P12"], readers["catch_up"]
    return [
        (
            "P11",
            f"commits/s at 64 connections with {p11['subscribers']:,} subscribers on two "
            "readers / with none; the database's own CPU per commit beside it (readers, "
            "subscribers and generator share the 2 cores; then the database alone on one)",
            f"{p11['P11_with_over_without']} ({p11['commits_per_s_with_reader_subscribers']:,}"
            f" / {p11['commits_per_s_alone']:,}; {p11['events_per_s_delivered']:,} events/s "
            f"delivered, {p11['gaps']} gaps; {_cpu(p11)}){_apart(p11)}",
            GOALS["P11"],
        ),
        (
            "P12",
            "point reads/s at 64 connections, one reader / etcd serializable reads",
            f"{p12['P12_reader_over_etcd']} ({p12['reader_reads_per_s']:,} / "
            f"{p12['etcd_reads_per_s']:,}; p99 {p12['reader_p99_ms']} / {p12['etcd_p99_ms']} ms)",
            GOALS["P12"],
        ),
        (
            "-",
            f"reader catch-up: cold start on a snapshot, then {cold['log_operations']:,} "
            "operations of log",
            f"bootstrap {cold['bootstrap_s']} s; {cold['operations_applied_per_s']:,} "
            f"operations/s ({cold['transactions_applied_per_s']:,} transactions/s)",
            "-",
        ),
    ]


def _security(security: Any) -> list[tuple[str, str, str, str]]:
    if not security:
        return []
    f = security["figures"]
    rate = {k: f"{f[f'commits_per_s_at_64_{k}']:,}" for k in ("plain", "tls", "tls_token")}
    p50 = {k: f["p50_ms_at_1_" + k] for k in ("plain", "tls", "tls_token")}
    return [
        (
            "P1, P9 secured",
            "with TLS on the client API, then TLS and a bearer token checked against key "
            "prefixes (each / plaintext, the same run): commits/s at 64 connections; p50 at 1",
            f"{f['throughput_at_64_tls_over_plain']} and "
            f"{f['throughput_at_64_tls_token_over_plain']} "
            f"({rate['tls']} and {rate['tls_token']} / {rate['plain']}/s); "
            f"{f['p50_at_1_tls_over_plain']} and {f['p50_at_1_tls_token_over_plain']} "
            f"({p50['tls']} and {p50['tls_token']} / {p50['plain']} ms)",
            "-",
        )
    ]


def _ring(ring: Any) -> list[tuple[str, str, str, str]]:
    if not ring:
        return []
    f, hop = ring["figures"], ring["one_hop"]
    over = ", ".join(f"{f[f'commits_per_s_at_{c}_shm_over_unix']} at {c}" for c in (1, 16, 64, 256))
    return [
        (
            "P1, P2, P9 by ring",
            "the shared-memory ring / the Unix-socket ring (the same run): commits/s at 1, 16, "
            "64 and 256 connections; P1 at 16, P2, P9 of each; one hop's round trip; CPU per "
            "commit at 64",
            f"{over}; P1 at 16 {f['P1_commits_per_s_at_16_shm_over_etcd']} / "
            f"{f['P1_commits_per_s_at_16_unix_over_etcd']}; P2 "
            f"{f['P2_p99_at_half_max_shm_over_etcd']} / {f['P2_p99_at_half_max_unix_over_etcd']}; "
            f"P9 {f['P9_p50_at_1_shm_over_etcd']} / {f['P9_p50_at_1_unix_over_etcd']}; hop "
            f"{hop['shm']['round_trip_p50_us']} / {hop['unix']['round_trip_p50_us']} µs; "
            f"{f['cpu_us_per_commit_at_64_shm']} / {f['cpu_us_per_commit_at_64_unix']} µs",
            "-",
        )
    ]


def _restore(restore: Any) -> list[tuple[str, str, str, str]]:
    if not restore:
        return []
    newest, middle = restore["runs"]["newest"], restore["runs"]["middle"]
    return [
        (
            "-",
            f"point-in-time restore on Spark local[2]: a {restore['operations']:,}-operation "
            "history into an empty prefix (session start apart)",
            f"{newest['seconds']:.1f} s, {newest['ops_per_s']:,.0f} operations folded/s (to the "
            f"middle version: {middle['seconds']:.1f} s)",
            "-",
        )
    ]


def _cpu(run: Any) -> str:
    return (
        f"{run['leader_cpu_us_per_commit_with_reader_subscribers']} / "
        f"{run['leader_cpu_us_per_commit_alone']} µs CPU per commit"
    )


def _apart(p11: Any) -> str:
    apart = p11.get("leader_on_its_own_core")
    if not apart:
        return ""
    return (
        f"; database on its own core: {apart['P11_with_over_without']} "
        f"({apart['commits_per_s_with_reader_subscribers']:,} / "
        f"{apart['commits_per_s_alone']:,}; {_cpu(apart)})"
    )


def _p4(commit: Any) -> str:
    minio, figures = commit["minio"], commit["figures"]
    if "saturated_at" not in minio:  # a JSON from before the saturation sweep
        return f"{figures['P4_puts_per_1000_commits_minio_c64']} at 64 connections"
    peak = minio["saturated_at"]
    return (
        f"{minio['at_saturation']} at {peak} connections, "
        f"{minio[f'c{peak}_commits_per_s']:,} commits/s ({minio['c64']} at 64)"
    )


def _p7(compaction: Any) -> str:
    spark, reference = compaction["spark_local2"], compaction["reference"]
    return (
        f"{compaction['ratio_spark_over_reference']:.2f} "
        f"({spark['ops_per_s']:,.0f} vs {reference['ops_per_s']:,.0f} ops/s at "
        f"{compaction['operations']:,} operations; snapshot "
        f"{compaction['snapshot_over_log']:.1%} of the log)"
    )


def table() -> str:
    lines = ["| figure | what | measured | goal |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows()]
    return "\n".join(lines)


def _commit() -> str:
    """The commit measured (marked `+dirty` when the tree has changes)."""
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], check=False).returncode != 0
    return f"{head or 'unknown'}{'+dirty' if dirty else ''}"


def log_entry(generated: str, when: datetime, commit: str) -> str:
    return f"\n## {when:%Y-%m-%d %H:%M} UTC: `make bench` on {commit}\n\n{generated}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--readme", default="README.md")
    parser.add_argument("--log", default="bench/HISTORY.md", help="history to append to")
    parser.add_argument("--no-log", action="store_true", help="only rewrite the README")
    args = parser.parse_args()
    readme = Path(args.readme)
    text = readme.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    generated = table()
    readme.write_text(text[:start] + "\n" + generated + "\n" + text[end:])
    if not args.no_log:
        with Path(args.log).open("a") as log:
            log.write(log_entry(generated, datetime.now(UTC), _commit()))
    print(generated)


if __name__ == "__main__":
    main()
