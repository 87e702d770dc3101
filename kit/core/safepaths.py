"""Paths under a deployment folder that the kit writes, without following a link out of it.

Public entry points: ``work_folder(out_dir, *parts)`` (the ``.kit/`` work folder and folders under it, made
without following links) and ``open_nofollow(path, mode)`` (a file the kit writes there). ``--out`` itself may be
a link to a folder (the user chose it, and every path then lies in that folder); below it, the kit never writes
through a symlink: a link at ``.kit``, at a folder under it or at a file it writes is refused with an error naming
the path, not followed. Folders are walked with ``O_NOFOLLOW`` relative to the folder above (``dir_fd``), so a
link swapped in between a check and a write is refused too; the file's own open uses ``O_NOFOLLOW``.
The all-or-nothing renderer (kit/core/write.py) has its own checks for the files it writes; ``.env`` is written
by kit/core/envfile.py fill_env_values (a temp file made with ``O_EXCL | O_NOFOLLOW``, renamed over it) and by
kit/run/stack.py write_smoke_env with ``O_EXCL | O_NOFOLLOW``.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import IO

from kit.core.errors import WriteError

WORK_DIR = ".kit"
FILE_MODE = 0o644
_OPEN_FLAGS = {"w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND}


def refuse_link(path: Path, what: str) -> WriteError:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return WriteError(f"{path}: is a symlink (to {target}); the kit writes {what} there and does not follow links",
                      hint="remove the link (or replace it with a folder or file of its own) and run the command again")


def work_folder(out_dir: Path, *parts: str) -> Path:
    """``out_dir/.kit/PARTS...``, each folder made when missing, none of them a link (refused, naming it)."""
    names = (WORK_DIR, *parts)
    fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        path = Path(out_dir)
        for name in names:
            path = path / name
            try:
                os.mkdir(name, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as error:
                mode = os.lstat(name, dir_fd=fd).st_mode
                if stat.S_ISLNK(mode) or error.errno == errno.ELOOP:
                    raise refuse_link(path, "its work files (build context, logs)") from None
                raise WriteError(f"{path}: is not a folder; the kit keeps its work files there",
                                 hint="move it away and run the command again") from None
            os.close(fd)
            fd = child
        return path
    finally:
        os.close(fd)


def open_nofollow(path: Path, mode: str = "w") -> IO[str]:
    """A text file the kit writes, opened without following a link at its name (refused, naming the path)."""
    try:
        fd = os.open(path, _OPEN_FLAGS[mode] | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise refuse_link(path, "a file of its own") from None
        raise
    return os.fdopen(fd, mode, encoding="utf-8")
