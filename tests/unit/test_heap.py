"""weaseldb/runtime/heap.py: what a stage frees goes back to the system."""

from pathlib import Path

import numpy as np

from weaseldb.runtime import heap


def rss_mib() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20


def test_freed_arrays_of_a_few_mb_leave_the_process() -> None:
    """After glibc has freed a large array, arrays of a few MB (an index merge's) come from
    its heap, and stay there once freed, until `give_back`."""
    large = np.ones(30 * 2**20, np.uint8)
    del large  # glibc's mmap threshold rises to 30 MB
    arrays = [np.ones(2 * 2**20, np.uint8) for _ in range(24)]
    held = rss_mib()
    del arrays
    kept = rss_mib()
    heap.give_back()
    assert kept > held - 8  # glibc kept them
    assert rss_mib() < kept - 40
