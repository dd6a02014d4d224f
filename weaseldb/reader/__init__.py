"""The reader: a read replica of a WeaselDB database (docs/reader.md).

`weaseldb reader` runs it as a service (weaseldb.reader.service); `one_off` catches up
in-process for a single read; `VersionedState` is the multi-version state both read from.
"""

from weaseldb.reader.oneoff import OneOff, catch_up, one_off
from weaseldb.reader.state import Item, TooOld, VersionedState

__all__ = ["Item", "OneOff", "TooOld", "VersionedState", "catch_up", "one_off"]
