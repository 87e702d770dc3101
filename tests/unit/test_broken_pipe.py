"""`kit ... | head`: the reader closing the pipe ends the command quietly (exit 1, as click apps do), never with
"internal error: BrokenPipeError" or Python's "Exception ignored" at exit."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("args", [
    ["plan", "preset=rtx4090-awq", "--explain"],  # more than a pipe's buffer: fails while the command runs
    ["upgrade", "--to", "0.33.0", "preset=cpu"],  # buffered until exit: fails in the last flush
    ["presets"],
], ids=lambda a: a[0])
def test_a_closed_pipe_on_stdout_is_no_error(args):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the kit writes a byte: every write meets EPIPE
    try:
        result = subprocess.run([sys.executable, "-m", "kit.cli.main", *args], stdout=write_end,
                                stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    finally:
        os.close(write_end)
    assert "BrokenPipe" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr
    assert "internal error" not in result.stderr, result.stderr
    assert result.returncode == 1, result.stderr
