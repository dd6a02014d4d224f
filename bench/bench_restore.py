"""Point-in-time restore throughput: operations folded per second by `weaseldb restore`'s
job (weaseldb_compaction.restore) on local[2], and the wall time to restore a history of
N operations (default 10,000,000) into an empty prefix.

    .venv/bin/python bench/bench_restore.py --operations 10000000

The source is bench_compaction's log (`fill`: 16-byte keys from 1,000,000, random 100-byte
values, 5 % deletes, 0.1 % range deletes, 1,000 operations per batch) in a directory store.
Two restores into fresh directory stores, on a local[2] session started beforehand (its
start reported apart):
- newest: the whole history (a clone);
- middle: the version in the middle of the middle batch (a cut inside a batch: half the
  history folded; the survey still reads every batch's header, no snapshot bounds it).
Operations folded = V x 10 (every transaction holds 10). Writes JSON and a PNG to
bench/results/.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_compaction import PER_BATCH, PER_TX, filled, local2_session
from systems import data_dir, write_summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--operations", type=int, default=10_000_000)
    parser.add_argument("--out", default="bench/results/restore.json")
    args = parser.parse_args()
    from weaseldb_compaction import restore

    work = data_dir("bench-restore-")
    try:
        log_bytes = filled(work / "source", args.operations)
        newest = args.operations // PER_TX
        middle = newest // 2 + PER_BATCH // PER_TX // 2  # inside a batch
        spark, session_s = local2_session(work)
        runs = {}
        try:
            for name, version in (("newest", newest), ("middle", middle)):
                options = restore.RestoreOptions(
                    f"dir:{work / 'source'}", f"dir:{work / name}", to_version=version
                )
                result = restore.run(spark, options, lambda line: None)
                assert result.version == version
                folded = version * PER_TX  # operations up to V (the cut batch's later ones dropped)
                runs[name] = {"version": version, "operations": folded, "keys": result.keys,
                              "batches_read": result.batches_read, "seconds": result.seconds,
                              "ops_per_s": folded / result.seconds}  # fmt: skip
                rate = folded / result.seconds
                print(f"restore to {name} version {version}: {result.seconds:.1f} s, "
                      f"{rate:,.0f} ops/s, {result.keys} keys", flush=True)  # fmt: skip
        finally:
            spark.stop()
        result_json = {
            "figure": "restore",
            "operations": args.operations,
            "batches": args.operations // PER_BATCH,
            "batch_log_bytes": log_bytes,
            "session_start_s": session_s,
            "restore_seconds": runs["newest"]["seconds"],
            "ops_per_s": runs["newest"]["ops_per_s"],
            "runs": runs,
        }
        write_summary(result_json, args.out)
        plot(result_json, Path(args.out).with_suffix(".png"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def plot(result: dict[str, object], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = result["runs"]
    assert isinstance(runs, dict)
    names = list(runs)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    left.bar([f"to {n}\n(v {runs[n]['version']:,})" for n in names],
             [runs[n]["ops_per_s"] for n in names], color=["#e25a1c", "#4477aa"])  # fmt: skip
    left.set_ylabel("operations folded / s")
    left.set_title(f"restore, Spark local[2], {result['operations']:,} operations")
    right.bar(names, [runs[n]["seconds"] for n in names], color=["#e25a1c", "#4477aa"])
    right.set_ylabel("wall time, s (session start apart)")
    right.set_title("time to restore")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
