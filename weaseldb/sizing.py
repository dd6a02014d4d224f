"""The memory the sequencer and the persister need, derived from the idempotency cap (pure).

Both hold request ids up to `idempotency.request_id_max` (the cap); everything else they
hold is bounded by constants. The operator's default limits, the chart's example and
examples/*.yaml take their figures from `memory_limit_mib`, and tests/unit/test_sizing.py
pins them to it (docs/architecture.md, "Bounded memory").

    cap = request_id_max, memory = request_id_memory, file = cap + memory window entries
    sequencer = BASE + cap x 18 B            (window: 12 B of columns + 6 B of index slots)
                     + memory x 7.2 B        (the faded ids: two Bloom generations at 1e-6)
                     + file x 32 B x 2       (a term start: the window file's bytes and the
                                              entries decoded from them, both held at once)
    persister = BASE + cap x 18 B            (outcomes: 12 B of columns + 6 B of index slots)
                     + file x 32 B x 4       (a term start: the segments' bytes, their entries,
                                              the concatenation and its sorted copy)
                     + BACKLOG x workers     (answers queued for slow gateway workers)
    limit     = figure x 1.25, rounded up to 64 MiB

At the defaults (cap 5M, memory 1M, 2 gateway workers): sequencer 549 MiB -> 704 MiB,
persister 1,036 MiB -> 1,344 MiB. BASE is a process with its imports and buffers and no
ids, at work: 90 MiB measured (bench/bench_soak.py's first sample: 70-80 MiB per stage
before the load), rounded up.
"""

from __future__ import annotations

import math

from weaseldb.idring import INDEX_BYTES_PER_ID

MIB = 1 << 20
BASE_BYTES = 90 * MIB
#: Bytes per id in the sequencer's window and in the persister's outcomes (their columns:
#: RequestIdWindow.BYTES_PER_ID and Answers.BYTES_PER_ID; tests check they agree).
WINDOW_BYTES_PER_ID = 12
OUTCOME_BYTES_PER_ID = 12
#: A Bloom filter at one false positive in a million: -ln(1e-6) / ln(2)^2 bits per id.
BLOOM_BYTES_PER_ID = -math.log(1e-6) / math.log(2) ** 2 / 8
ENTRY_BYTES = 32  # weaseldb.requestids.ENTRY
#: Copies of the window's entries held at once while a term starts.
SEQUENCER_WINDOW_COPIES = 2
PERSISTER_WINDOW_COPIES = 4
#: services/persister/app.py WORKER_BACKLOG_BYTES: frames queued per gateway worker.
BACKLOG_BYTES = 64 * MIB
MARGIN = 1.25
STAGES_WITH_IDS = ("sequencer", "persister")


def needed_bytes(stage: str, request_id_max: int, request_id_memory: int, workers: int) -> int:
    """What `stage` holds at the cap, its largest moment (a term start) included."""
    window_file = (request_id_max + request_id_memory) * ENTRY_BYTES
    if stage == "sequencer":
        ids = request_id_max * (WINDOW_BYTES_PER_ID + INDEX_BYTES_PER_ID)
        faded = 2 * request_id_memory * BLOOM_BYTES_PER_ID
        return int(BASE_BYTES + ids + faded + window_file * SEQUENCER_WINDOW_COPIES)
    if stage == "persister":
        ids = request_id_max * (OUTCOME_BYTES_PER_ID + INDEX_BYTES_PER_ID)
        backlog = BACKLOG_BYTES * workers
        return int(BASE_BYTES + ids + window_file * PERSISTER_WINDOW_COPIES + backlog)
    raise ValueError(f"{stage} holds no request ids")


def memory_limit_mib(stage: str, request_id_max: int, request_id_memory: int, workers: int) -> int:
    """The container memory limit for `stage`: what it needs with a margin, in MiB rounded
    up to a multiple of 64."""
    needed = needed_bytes(stage, request_id_max, request_id_memory, workers) * MARGIN / MIB
    return math.ceil(needed / 64) * 64


__all__ = ["STAGES_WITH_IDS", "memory_limit_mib", "needed_bytes"]
