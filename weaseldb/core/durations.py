"""Durations as people write them: ``90s``, ``30m``, ``12h``, ``7d``, or a combination of
them from the largest unit down (``1d12h``, ``2h30m``). One parser for every place that
takes one: `weaseldb compact --keep-history` and the operator's
``spec.backup.keepHistory.duration`` (the CRD carries the same strings)."""

from __future__ import annotations

import argparse
import re

#: Seconds per unit, largest first (the order a combination must follow).
UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+)([dhms])")
#: How a duration reads, for error messages.
EXAMPLES = "like 90s, 30m, 12h, 7d or 1d12h"


def parse_duration(text: str) -> int:
    """Whole seconds in `text`; ValueError naming the text for anything else (no sign, no
    fraction, no bare number: ``90`` could mean seconds or minutes)."""
    compact = text.strip()
    parts = _PART.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        raise ValueError(f"not a duration: {text!r} ({EXAMPLES})")
    order = [list(UNITS).index(unit) for _, unit in parts]
    if order != sorted(set(order)):
        raise ValueError(f"not a duration: {text!r} (units largest first, each once: {EXAMPLES})")
    return sum(int(number) * UNITS[unit] for number, unit in parts)


def format_duration(seconds: int) -> str:
    """The shortest text `parse_duration` reads back as `seconds` (``0s`` for zero)."""
    if seconds < 0:
        raise ValueError(f"a duration is not negative: {seconds}")
    parts = []
    for unit, size in UNITS.items():
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def duration_argument(text: str) -> int:
    """`parse_duration` as an argparse ``type``: a bad value exits 2, argparse naming the
    flag and this naming the text."""
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def count_argument(text: str) -> int:
    """A whole number, zero or more, as an argparse ``type`` (a count of versions, seconds)."""
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"not a whole number, zero or more: {text!r}")
    return count
