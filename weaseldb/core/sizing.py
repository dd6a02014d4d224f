"""The memory the sequencer and the persister need, derived from the idempotency cap (pure).

Both hold request ids up to `idempotency.request_id_max` (the cap); everything else they
hold is bounded by constants. The operator's default limits, the chart's example and
examples/*.yaml take their figures from `memory_limit_mib`, and tests/unit/test_sizing.py
pins them to it (docs/idempotency.md, "Memory limits").

    cap = request_id_max, memory = request_id_memory, file = cap + memory window entries
    merge = 8 x 8 x persister.index_segment_ids entries (a level-2 index merge's input)
    sequencer = BASE + cap x 26 B            (window: 20 B of columns + 6 B of index slots)
                     + memory x 7.2 B        (the faded ids: two Bloom generations at 1e-6)
                     + file x 32 B x 2       (a term start: the window file's bytes, and the
                                              window being built from them)
    persister = BASE + cap x 18 B            (outcomes: 12 B of columns + 6 B of index slots)
                     + max(file, merge) x 32 B x 4
                                             (building the window file at a term start, or
                                              merging index segments: the segments' bytes,
                                              their entries, the concatenation, its sorted
                                              copy)
                     + 64 MiB x workers      (answers queued for slow gateway workers)
    limit     = figure x 1.25, rounded up to 64 MiB

At the defaults (cap 5M, memory 1M, segments of 100k ids; 2 gateway workers): sequencer
587 MiB -> 768 MiB, persister 1,085 MiB -> 1,408 MiB. BASE is a stage process with its
imports and buffers and no ids: 70-75 MiB measured (bench/bench_soak.py's first sample),
rounded up to 90.
"""

from __future__ import annotations

import math

from weaseldb.core.config import Config
from weaseldb.core.idring import INDEX_BYTES_PER_ID
from weaseldb.core.types import Stage

MIB = 1 << 20
BASE_BYTES = 90 * MIB
#: Bytes per id in the sequencer's window and in the persister's outcomes (their columns:
#: RequestIdWindow.BYTES_PER_ID and Answers.BYTES_PER_ID; tests check they agree).
WINDOW_BYTES_PER_ID = 20
OUTCOME_BYTES_PER_ID = 12
#: weaseldb.core.requestids.ENTRY's size, and the level-0 segments a level-2 merge reads
#: (MERGE_FAN_IN ** MAX_MERGE_LEVEL): copied, not imported, as the operator imports this
#: module and requestids brings the store clients (tests check they agree).
ENTRY_BYTES = 32
SEGMENTS_PER_TOP_MERGE = 64
#: A Bloom filter at one false positive in a million: -ln(1e-6) / ln(2)^2 bits per id.
BLOOM_BYTES_PER_ID = -math.log(1e-6) / math.log(2) ** 2 / 8
#: Copies of window or segment entries held at once at the stage's largest moment.
SEQUENCER_COPIES = 2
PERSISTER_COPIES = 4
#: services/persister/app.py WORKER_BACKLOG_BYTES: frames queued per gateway worker.
BACKLOG_BYTES = 64 * MIB
MARGIN = 1.25
STAGES_WITH_IDS = (Stage.SEQUENCER, Stage.PERSISTER)


def needed_bytes(stage: Stage, config: Config) -> int:
    """What `stage` holds at the cap, its largest moment included."""
    ids = config.idempotency
    window_file = ids.request_id_max + ids.request_id_memory
    if stage == Stage.SEQUENCER:
        window = ids.request_id_max * (WINDOW_BYTES_PER_ID + INDEX_BYTES_PER_ID)
        faded = 2 * ids.request_id_memory * BLOOM_BYTES_PER_ID
        return int(BASE_BYTES + window + faded + window_file * ENTRY_BYTES * SEQUENCER_COPIES)
    if stage == Stage.PERSISTER:
        outcomes = ids.request_id_max * (OUTCOME_BYTES_PER_ID + INDEX_BYTES_PER_ID)
        merge = SEGMENTS_PER_TOP_MERGE * config.persister.index_segment_ids
        largest = max(window_file, merge) * ENTRY_BYTES * PERSISTER_COPIES
        return int(BASE_BYTES + outcomes + largest + BACKLOG_BYTES * config.gateway.workers)
    raise ValueError(f"{stage} holds no request ids")


def memory_limit_mib(stage: Stage, config: Config) -> int:
    """The container memory limit for `stage`: what it needs with a margin, in MiB rounded
    up to a multiple of 64."""
    return math.ceil(needed_bytes(stage, config) * MARGIN / MIB / 64) * 64


__all__ = ["STAGES_WITH_IDS", "memory_limit_mib", "needed_bytes"]
