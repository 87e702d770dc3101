"""Output people read: tables and progress with rich, colour only where it can be seen.

rich is imported inside the functions, when a command prints a table or a progress bar, so `kit --help` and
completion never load it (tests/unit/test_cli_lazy.py). Colour is off with `--no-color`, a non-empty NO_COLOR
(https://no-color.org) or off a terminal; a terminal is forced only when the stream is one, so a pipe or a
file gets plain text. Cells are rich ``Text``: a value from a preset or a log is never read as markup.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

import click

# Off a terminal nobody resizes the window: wide enough that a table's rows are never cut or wrapped for grep.
PIPE_WIDTH = 240
# The progress lines the kit's long steps print: Docker's "step 3/9: ..." (kit/image/build.py) and the fetch script's
# "[2/5] name 10.0 MiB (20.0 MiB of 50.0 MiB, 5.0 MiB/s)" (kit/launch/fetch_files.py).
COUNT_RE = re.compile(r"^\s*(?:step\s+|\[)(\d+)/(\d+)\b")
BYTES_RE = re.compile(r"\(([\d.]+) MiB of ([\d.]+) MiB")


def color_wanted(stream: TextIO) -> bool:
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.color is False:  # --no-color (the root sets it; children inherit)
        return False
    if os.environ.get("NO_COLOR"):
        return False
    return stream.isatty()


def console(*, err: bool = False):  # noqa: ANN201 - rich.console.Console, imported late
    from rich.console import Console

    stream = sys.stderr if err else sys.stdout
    tty, colour = stream.isatty(), color_wanted(stream)
    # No colour means plain text: no bold either (color_system=None writes no escape sequence at all).
    return Console(file=stream, no_color=not colour, color_system="auto" if colour else None,
                   force_terminal=True if tty else None, width=None if tty else PIPE_WIDTH, highlight=False,
                   emoji=False, markup=False)


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None,
          right: Sequence[str] = (), styles: dict[str, str] | None = None, header: bool = True) -> None:
    """Print rows under a header; ``right`` names the numeric columns, ``styles`` colours a column."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    out = console()
    grid = Table(title=title, box=box.SIMPLE_HEAD, safe_box=True, header_style="bold", title_justify="left",
                 pad_edge=False, show_edge=False, show_header=header)
    for name in columns:
        grid.add_column(name, justify="right" if name in right else "left", overflow="fold",
                        style=(styles or {}).get(name))
    for row in rows:
        grid.add_row(*(Text("" if cell is None else str(cell)) for cell in row))
    if out.is_terminal:
        out.print(grid)
        return
    # Off a terminal rich pads every line to the widest row (up to PIPE_WIDTH): a long note would leave each line
    # 240 columns of trailing blanks in a file, a pipe or a narrower pager; the lines are written without them.
    with out.capture() as captured:
        out.print(grid)
    out.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


def key_values(pairs: Sequence[tuple[str, Any]], *, title: str | None = None) -> None:
    """A two-column table of names and values (status, a build's result)."""
    table(("", ""), [(k, v) for k, v in pairs], title=title, header=False, styles={"": "bold"})


def parse_progress(line: str) -> tuple[float, float, str] | None:
    """(done, total, unit) from a progress line, or None: bytes when the line carries them, else a count."""
    count = COUNT_RE.match(line)
    if count is None:
        return None
    sizes = BYTES_RE.search(line)
    if sizes:
        return float(sizes.group(1)) * 2**20, float(sizes.group(2)) * 2**20, "bytes"
    return float(count.group(1)), float(count.group(2)), "steps"


@contextmanager
def progress(label: str) -> Iterator[Callable[[str], None]]:
    """A progress callback for a long step. On a terminal: one rich bar (steps, or bytes where the lines carry
    them) and every other line printed above it. Off a terminal: each line on stderr as it comes."""
    if not sys.stderr.isatty():
        yield lambda message: click.echo(message, err=True)
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    out = console(err=True)
    bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=out, transient=False)
    bytes_bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), DownloadColumn(binary_units=True),
                         TimeElapsedColumn(), console=out, transient=False)
    task: dict[str, Any] = {}

    def on_line(message: str) -> None:
        parsed = parse_progress(message)
        if parsed is None:
            out.print(message, markup=False, highlight=False)
            return
        done, total, unit = parsed
        which = bytes_bar if unit == "bytes" else bar
        if unit not in task:
            which.start()
            task[unit] = which.add_task(label, total=total)
        which.update(task[unit], completed=done, total=total, description=f"{label}: {message.strip()[:60]}")

    try:
        yield on_line
    finally:
        for which in (bar, bytes_bar):
            which.stop()
