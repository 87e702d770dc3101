"""Reading what the user hands the kit (presets, model configs, checkpoint headers, numbers): regular files
only, size-capped, numbers bounded; the limits are in kit/data/input_limits.yaml.

A FIFO or a device would block or never end, a directory is not a file, and a huge file would make the
kit hang on parsing: each is refused before anything is parsed, with the reason, as the caller's KitError.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kit.core.dataread import load_yaml
from kit.core.errors import KitError

# The largest whole number a float (and so JSON and YAML readers in most languages, and the planner's
# arithmetic) holds exactly. No count, size or time the kit takes comes near; beyond it a value is a typo or an
# attack. Presets and CLI numbers are held to it.
NUMBER_MAX = 1 << 53


def input_limits() -> dict[str, Any]:
    return load_yaml("input_limits.yaml")


def user_path(ref: str, *, error: type[KitError] = KitError) -> tuple[Path, os.stat_result | None]:
    """The path the user typed (``~`` expanded) and its stat, None when nothing is there. A name the OS
    refuses (too long, a NUL byte, an unknown ``~user``) is ``error``, not an exception from pathlib."""
    where = ref if len(ref) <= 80 else ref[:77] + "..."
    try:
        path = Path(ref).expanduser()
        return path, path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return path, None
    except OSError as exc:
        raise error(f"{where}: not a usable path ({exc.strerror or exc})") from None
    except (ValueError, RuntimeError) as exc:  # NUL byte; "Could not determine home directory"
        raise error(f"{where}: not a usable path ({exc})") from None


@contextmanager
def open_regular(path: Path, where: str, *, error: type[KitError] = KitError, what: str = "file") -> Iterator[
    tuple[int, int]
]:
    """(file descriptor, size) of the regular file at ``path``; a directory, FIFO or device is ``error``."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer must not hang; the fstat below then refuses it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise error(f"{where}: cannot read ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise error(f"{where}: is a directory, not a {what}")
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{where}: is not a regular file (a FIFO, socket or device); give a {what}")
        yield fd, info.st_size
    except OSError as exc:
        raise error(f"{where}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def read_capped(path: Path, where: str, limit: int, *, error: type[KitError] = KitError, what: str = "file") -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them; anything else is ``error``."""
    with open_regular(path, where, error=error, what=what) as (fd, size):
        if size > limit:
            raise error(f"{where}: {size} bytes, larger than the {limit} bytes a {what} may have")
        chunks: list[bytes] = []
        read = 0
        while read <= limit:  # the file may grow while we read: never read more than limit + 1 bytes
            chunk = os.read(fd, min(1 << 20, limit + 1 - read))
            if not chunk:
                break
            chunks.append(chunk)
            read += len(chunk)
        if read > limit:
            raise error(f"{where}: larger than the {limit} bytes a {what} may have")
        return b"".join(chunks)


def decode_utf8(data: bytes, where: str, *, error: type[KitError] = KitError) -> str:
    """UTF-8 text (a leading BOM is dropped); other encodings are refused naming the byte offset."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{where}: not UTF-8 text (invalid byte 0x{data[exc.start]:02x} at offset {exc.start})",
                    hint="save the file as UTF-8") from None
