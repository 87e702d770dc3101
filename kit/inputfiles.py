"""Reading files the user hands the kit (presets, model configs): regular files only, size-capped.

A FIFO or a device would block or never end, a directory is not a file, and a huge file would make the
kit hang on parsing: each is refused before anything is parsed, with the reason, as the caller's KitError.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kit.errors import KitError


def read_capped(path: Path, where: str, limit: int, *, error: type[KitError] = KitError, what: str = "file") -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them; anything else is ``error``."""
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
        if info.st_size > limit:
            raise error(f"{where}: {info.st_size} bytes, larger than the {limit} bytes a {what} may have")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:  # the file may grow while we read: never read more than limit + 1 bytes
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise error(f"{where}: larger than the {limit} bytes a {what} may have")
        return b"".join(chunks)
    except OSError as exc:
        raise error(f"{where}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def decode_utf8(data: bytes, where: str, *, error: type[KitError] = KitError) -> str:
    """UTF-8 text (a leading BOM is dropped); other encodings are refused naming the byte offset."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{where}: not UTF-8 text (invalid byte 0x{data[exc.start]:02x} at offset {exc.start})",
                    hint="save the file as UTF-8") from None
