"""Memory and speed of the remembered request ids, unit level (no processes, no store).

    .venv/bin/python bench/bench_idmemory.py [--ids 1000000] [--out bench/results/idmemory.json]

For the sequencer's `RequestIdWindow` and the persister's `Answers`, each in a fresh
child process (so one's freed memory cannot hide the other's growth): the RSS before and
after remembering `--ids` distinct ids with the cap set to that many (so the figure is the
cost per id at the cap, index included), and the time per id of the hot path:
- window: `get` (a miss, as for a fresh id) + `add` + `expire` (which moves the oldest id to
  the faded set once the window is full), the sequencer's work per commit;
- answers: `reply` to an accepted commit (remember it, forget the oldest) + a status lookup.
The window's time is measured with a full window (every add expires one), the answers' as
they fill and once full; and `Sequencer.sequence` per commit on ring batches of 64 fresh
commits with the window full (the sequencer's whole hot path: hash, look up, assign, add,
expire). Runs against whatever `services/` is on PYTHONPATH, so the same
script measures the code before and after a change.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

from weaseldb.core.types import RequestId, Term, Version

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def _window(ids: int) -> dict[str, Any]:
    from services.sequencer.window import FadedIds, RequestIdWindow
    from weaseldb.core.requestids import id_hash

    hashes = [id_hash(RequestId(f"req-{i}")) for i in range(2 * ids)]
    before = rss()
    window = RequestIdWindow(ids, 0, ids, FadedIds(max(ids, 1024)))
    started = time.process_time()
    for i in range(ids):
        window.get(hashes[i])
        window.add(hashes[i], i + 1, i // 10)
        window.expire(i // 10)
    filling = time.process_time() - started
    grown = rss() - before
    started = time.process_time()
    for i in range(ids, 2 * ids):  # full: every add expires the oldest into the faded set
        window.get(hashes[i])
        window.add(hashes[i], i + 1, i // 10)
        window.expire(i // 10)
    full = time.process_time() - started
    assert len(window) == ids and window.get(hashes[-1]) == 2 * ids
    return {
        "rss_bytes_per_id": round(grown / ids, 1),
        "us_per_id_filling": round(filling / ids * 1e6, 3),
        "us_per_id_full": round(full / ids * 1e6, 3),
    }


def _answers(ids: int) -> dict[str, Any]:
    from services.persister.answers import Answers
    from weaseldb.core.protocol import CommitEntry, CommitState, StatusEntry, Write

    entries = []
    for i in range(2 * ids):
        entry = CommitEntry(i, 0, RequestId(f"req-{i}"), [], [Write(b"k", b"v")])
        entry.state, entry.version = CommitState.ACCEPTED, Version(i + 1)
        entries.append(entry)
    status = StatusEntry(0, 0, RequestId("req-0"))
    before = rss()
    answers = Answers(ids, window_ms=0, hard_cap=ids)
    answers.indexed_through = 2 * ids
    started = time.process_time()
    for i in range(ids):
        answers.reply(entries[i], Version(i), i // 10)
        answers.reply(status, Version(i), i // 10)
    filling = time.process_time() - started
    grown = rss() - before
    started = time.process_time()
    for i in range(ids, 2 * ids):
        answers.reply(entries[i], Version(i), i // 10)
        answers.reply(status, Version(i), i // 10)
    full = time.process_time() - started
    assert len(answers) == ids
    return {
        "rss_bytes_per_id": round(grown / ids, 1),
        "us_per_id_filling": round(filling / ids * 1e6, 3),
        "us_per_id_full": round(full / ids * 1e6, 3),
    }


def _sequencer(ids: int) -> dict[str, Any]:
    """`Sequencer.sequence` on ring batches of 64 fresh commits, the window full."""
    from services.sequencer.logic import Sequencer
    from weaseldb.core.protocol import CommitEntry, Operation, RingEntry, TermStart, Write

    sequencer = Sequencer(id_memory=ids, window_ms=0, id_hard_cap=ids)
    sequencer.sequence([TermStart(Term(1), "leader", Version(1), Version(0))], 0)
    writes: list[Operation] = [Write(b"k", b"v")]
    for start in range(0, ids, 64):  # fill the window
        batch: list[RingEntry] = [
            CommitEntry(i, 0, RequestId(f"fill-{i}"), [], writes) for i in range(start, start + 64)
        ]
        sequencer.sequence(batch, start)
    batches: list[list[RingEntry]] = [
        [CommitEntry(i, 0, RequestId(f"req-{i}"), [], writes) for i in range(start, start + 64)]
        for start in range(0, min(ids, 200_000), 64)
    ]
    started = time.process_time()
    for batch in batches:
        sequencer.sequence(batch, ids)
    elapsed = time.process_time() - started
    return {"us_per_commit_full": round(elapsed / (64 * len(batches)) * 1e6, 3)}


def _child(name: str, ids: int, out: Any) -> None:
    out.put({"window": _window, "answers": _answers, "sequencer": _sequencer}[name](ids))


def measure(name: str, ids: int) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_child, args=(name, ids, queue))
    child.start()
    result: dict[str, Any] = queue.get()
    child.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ids", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = {"ids": args.ids, "window": measure("window", args.ids)}
    result["answers"] = measure("answers", args.ids)
    result["sequencer"] = measure("sequencer", args.ids)
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
