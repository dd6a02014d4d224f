"""Port files: how stages find each other's real port while the set starts."""

from __future__ import annotations

import threading
from pathlib import Path

from weaseldb.runtime.service import read_port_file, write_port_file


def test_a_missing_or_half_written_port_file_reads_as_not_yet(tmp_path: Path) -> None:
    assert read_port_file(tmp_path, "sequencer") is None
    (tmp_path / "sequencer.port").write_text("")  # what a reader saw mid-write before
    assert read_port_file(tmp_path, "sequencer") is None
    write_port_file(str(tmp_path), "sequencer", 18001)
    assert read_port_file(tmp_path, "sequencer") == 18001
    assert [p.name for p in tmp_path.iterdir()] == ["sequencer.port"]


def test_a_reader_never_sees_a_port_file_being_rewritten(tmp_path: Path) -> None:
    """A set restarted in the same run directory rewrites the file another stage polls."""
    write_port_file(str(tmp_path), "resolver", 18002)
    seen: list[int | None] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            seen.append(read_port_file(tmp_path, "resolver"))

    reader = threading.Thread(target=poll)
    reader.start()
    for port in range(18002, 20002):
        write_port_file(str(tmp_path), "resolver", port)
    done.set()
    reader.join()
    assert seen and None not in seen
