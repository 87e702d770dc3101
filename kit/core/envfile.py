"""A deployment folder's .env, read as compose reads it (python-dotenv's parser, which follows compose's rules:
quotes, multi-line quoted values such as a PEM key, `export`, comments), and only as a plain file: never through a
link, never a FIFO or device (it would hang the kit), at most input_limits.yaml's env_max_bytes. Values are
returned to the caller that needs one (the API key a client sends); no message quotes them.

``fill_env_values`` is the one writer: it gives the file the names it lacks (absent, or set to nothing), keeps every
other byte the user wrote (lines, comments, order), and replaces the file atomically with mode 0600.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from kit.core.errors import KitError
from kit.core.inputfiles import decode_utf8, input_limits, read_capped


class EnvFileError(KitError):
    """The .env is there but is not a plain file the kit reads (a link, a FIFO, too large, not UTF-8)."""


def _read_text(path: Path) -> str | None:
    """The text of the .env at ``path``, None when there is none; a link, FIFO, device, folder or oversized file is
    EnvFileError."""
    if not os.path.lexists(path):
        return None
    if os.path.islink(path):
        raise EnvFileError(f"{path}: is a link; the kit reads .env only as a plain file",
                           hint="put the file itself there (compose would follow the link; the kit does not)")
    limit = int(input_limits()["files"]["env_max_bytes"])
    return decode_utf8(read_capped(path, str(path), limit, error=EnvFileError, what=".env file"), str(path),
                       error=EnvFileError)


def _values(text: str) -> dict[str, str | None]:
    from dotenv import dotenv_values

    return dict(dotenv_values(stream=io.StringIO(text), interpolate=True))


def read_env_file(path: Path) -> dict[str, str | None]:
    """NAME -> value (None for a name with no `=`) of the .env at ``path``; {} when there is none. A link, a FIFO,
    a device, a folder or an oversized file is EnvFileError, naming the file, never its contents."""
    text = _read_text(path)
    return {} if text is None else _values(text)


def is_set(value: str | None) -> bool:
    """Whether a .env value counts: a name with no `=`, an empty or a blank value sets nothing (compose's `:?`
    refuses an empty value, and an empty key is no key)."""
    return bool(value and value.strip())


def fill_env_values(path: Path, values: Mapping[str, str], header: Sequence[str] = ()) -> list[str]:
    """Give the .env at ``path`` each name of ``values`` it does not set (``is_set``); the names written, in order.

    A name set to nothing is given its value on its own line (the last one, the line compose reads); a missing one
    is appended, after the ``header`` comment lines when the file does not hold them already (a second write adds
    names, not a second copy of the header). Everything else the file holds stays byte for byte. The new file
    replaces the old atomically (a temp file beside it, fsync, rename), mode 0600; a link, FIFO or anything but a
    plain file there is EnvFileError and nothing is written. Each value must be one line of plain characters (the caller makes them)."""
    text = _read_text(path)
    current = _values(text) if text is not None else {}
    wanted = {name: value for name, value in values.items() if not is_set(current.get(name))}
    if not wanted:
        return []
    for name, value in wanted.items():
        if not value or any(ch.isspace() or ch in "\\\"'$#`" or not ch.isprintable() for ch in value):
            raise ValueError(f"{name}: a generated .env value must be plain characters")  # the kit's own bug
    pieces = _pieces(text or "")
    last = {key: i for i, (key, _) in enumerate(pieces) if key is not None}
    appended: list[str] = []
    for name, value in wanted.items():
        if name in last:
            original = pieces[last[name]][1]
            pieces[last[name]] = (name, f"{name}={value}" + ("\n" if original.endswith("\n") else ""))
        else:
            appended.append(f"{name}={value}\n")
    new = "".join(piece for _, piece in pieces)
    if appended:
        if new and not new.endswith("\n"):
            new += "\n"
        block = "".join(f"# {line}\n" if line else "#\n" for line in header)
        new += ("" if block and block in new else block) + "".join(appended)  # the header once, not once a write
    try:
        _replace(path, new)
    except OSError as exc:  # a folder the kit may not write in, a full disk: one line naming the file
        raise EnvFileError(f"{path}: cannot write ({exc.strerror or exc})",
                           hint="add the names to it yourself (.env.example says what each is)") from None
    return list(wanted)


def _pieces(text: str) -> list[tuple[str | None, str]]:
    """The file as (name or None, original text) pieces, by python-dotenv's parser; pieces joined give ``text``
    back (if the parser ever did not, the file is taken as one piece, and names are only appended)."""
    from dotenv.parser import parse_stream

    pieces = [(b.key, b.original.string) for b in parse_stream(io.StringIO(text))]
    if "".join(piece for _, piece in pieces) != text:
        return [(None, text)]
    return pieces


def _replace(path: Path, text: str) -> None:
    folder = path.parent
    tmp = folder / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    # O_EXCL|O_NOFOLLOW: never write through a link or into a file someone else put there.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)  # the umask must not matter either way: secrets, the user's only
            data = memoryview(text.encode("utf-8"))
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)
        if os.path.islink(path):  # put there since it was read: the user's, never replaced
            raise EnvFileError(f"{path}: is a link; the kit writes .env only as a plain file",
                               hint="put the file itself there and run the command again")
        os.replace(tmp, path)  # replaces the name itself, never what a link there would point at
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def env_names(path: Path) -> list[str]:
    """The names a .env sets, in order; [] when it cannot be read as a plain file (its reader says why)."""
    try:
        return list(read_env_file(path))
    except EnvFileError:
        return []


def env_value(path: Path, name: str) -> str | None:
    """One value of a .env (stripped, None when unset or empty, or when the file is not a plain readable file)."""
    try:
        value = read_env_file(path).get(name)
    except EnvFileError:
        return None
    return value.strip() if value is not None and is_set(value) else None
