"""The newest point operation per key, on Arrow tables (no Spark: the job runs it inside
`mapInArrow`, the tests call it directly).

A stamp is (version, index in its transaction); per key the highest stamp wins. The winner
is found by order: sort (key ascending, stamp descending) and keep the first row of each
key. Only the sort keys and the positions are reordered; the winners' rows, values
included, are copied once, so the memory a call needs beyond its input is small.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

#: Newest first within a key: the first row of each key is its winner.
NEWEST_FIRST = [("key", "ascending"), ("version", "descending"), ("idx", "descending")]


def newest_per_key(table: pa.Table) -> pa.Table:
    """One row per key of `table` (columns key, version, idx and any others): the one with
    the highest (version, idx), in key order."""
    if table.num_rows == 0:
        return table
    order = pc.sort_indices(table.select(["key", "version", "idx"]), sort_keys=NEWEST_FIRST)
    keys = table.column("key").take(order).combine_chunks()
    return table.take(order.filter(_starts_of_runs(keys)))


def _starts_of_runs(sorted_keys: pa.Array) -> pa.Array:
    """True where a key differs from the one before it (and at the first row)."""
    n = len(sorted_keys)
    changed = pc.not_equal(sorted_keys.slice(1), sorted_keys.slice(0, n - 1))
    return pa.concat_arrays([pa.array([True], pa.bool_()), changed])
