"""Write a rendered set of files into a directory: all of them or none, never a mix.

What is on disk
    ``DIR/.vllm-kit.json``        the manifest: sha256 of every file as the kit last wrote it (``files``).
                                  A file whose content differs from its hash was edited by the user and is
                                  refused unless ``force``. ``kept`` (only when there are any) lists files
                                  the kit once wrote, no longer renders, and left in place because the
                                  user had edited them: the user's now, no longer the kit's.
    ``DIR/.vllm-kit.write-lock``  an empty lock file; ``fcntl.flock`` on it serialises writers.
    ``DIR/.vllm-kit.staging/``    new contents while a write is staged (absent at rest).
    ``DIR/.vllm-kit.journal``     the commit record of a write in progress (absent at rest).

How one write goes (every step under the lock)
    1. Recover: finish or undo whatever an interrupted earlier write left (below).
    2. Plan: compare each file with the disk and the manifest (create / identical / changed / forced);
       refuse user edits, and anything at a target path that is not a regular file (a symlink, a FIFO,
       a device, a directory) or lies under a symlinked folder. With ``remove_stale`` (``kit render``),
       every file the manifest lists that the new set no longer has is stale (below). Nothing has been
       written yet.
    3. Stage: write every new file and the new manifest into the staging folder, fsync each file and the
       folder. The user's files are untouched: a crash here leaves the old set plus a staging folder
       that the next run deletes.
    4. Commit point: write the journal (version 2: the staged name, target path and sha256 of each move,
       manifest last; the path and sha256 of each stale file to remove; the folders to remove when they
       are empty) into the staging folder, fsync, and rename it to ``.vllm-kit.journal``; fsync the
       directory. From here on the write always completes.
    5. Apply: unlink each stale file (only while its content still has the journalled sha256), then
       rmdir each journalled folder that is empty, deepest first; rename each staged file over its
       target (rename is atomic per file, on one filesystem), manifest last; fsync the folders; delete
       the (now empty) staging folder, then the journal.

Stale files (``remove_stale``; only ``kit render`` asks for it)
    A file the manifest lists that the new set does not contain: ``removed`` when it still has the
    manifest's sha256 (unedited: the kit's to delete), ``kept`` otherwise (edited, replaced by a link or
    anything but a regular file, or under a symlinked folder: the user's, never touched, not even with
    ``force``, which overwrites edits but never deletes them). A kept file leaves ``files`` for ``kept``,
    so it is reported once, by the render that stopped writing it, and later renders leave it alone; a
    render that writes the path again takes it back (identical, or a conflict unless ``force``). A stale
    file already gone just leaves the manifest. Folders: every folder above a removed file, up to (not
    including) ``DIR``, that no file of the new set or kept file lives in, is removed when it is empty
    after the removals; a folder holding anything else (the user's files) stays. The kit does not record
    which folders it made; an empty folder whose files were all the kit's was made for them. Other
    commands that render (build, lock, fetch, up, smoke) do not remove stale files: they take no
    ``--with``, ``--with-preset`` or ``--target``, so their set can be a part of what ``kit render`` wrote.

Recovery, at the start of every write (and of a dry run that finds a journal)
    A journal means the write was committed: each removal whose file still has its journalled hash is
    done (a file gone was removed already; one with other content was written since, and stays), each
    journalled folder that is empty is removed, each move whose staged file still exists is renamed into
    place (its hash checked first), the others were done already; then the staging folder goes, then
    the journal. A version-1 journal (moves only, from a kit before stale-file removal) is recovered the
    same way; a journal of any other version is refused with a hint, untouched. A staging folder
    without a journal means it was not committed: the folder is deleted and the old set, never
    touched, stands. Recovery is idempotent, so a crash during recovery is
    recovered the same way. A dry run takes the lock too (where a lock file exists), so it never plans
    against a directory half-way through another write.

So after a ``kill -9`` at any instant the directory holds the old set, or the new set, or (only while
a journal exists) a mix that the journal names exactly and that every kit command rendering there
(render, build, lock, fetch, up, smoke all write through here) completes to the new set before it
reads anything. Outside that window the manifest matches the files exactly (its ``files``; ``kept``
ones are the user's). Files the user keeps in the directory are never moved or read beyond a stat
(only files the manifest lists are read, to compare with their hash). Files are staged inside the directory, not in
/tmp, so every rename stays on one filesystem. The one window no rename order can close: a program
other than the kit that reads the directory between a crash after the commit point and the next kit
run sees the mix (the journal beside it says so).

Why not write the set into a sibling directory and swap it in: the user's ``--out`` directory holds
their own files (``.env``, models, caches) and must stay where it is; making the rendered names
symlinks into a swapped folder would put links where Docker build contexts, kubectl and editors
expect files.

Debug hooks for the crash and concurrency tests (environment, never set in normal use):
``VLLM_KIT_DEBUG_WRITE_CRASH_AT=N`` sends the process SIGKILL at the Nth step of a write;
``VLLM_KIT_DEBUG_WRITE_STEP_DELAY=S`` sleeps S seconds at every step, so two writers would interleave
if the lock did not hold them apart. ``VLLM_KIT_LOCK_WAIT=S`` bounds the wait for the lock (default 30).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import signal
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from kit.core.errors import KitError, Problem, WriteError

MANIFEST = ".vllm-kit.json"
LOCK_FILE = ".vllm-kit.write-lock"
JOURNAL = ".vllm-kit.journal"
STAGING = ".vllm-kit.staging"
RESERVED = frozenset({MANIFEST, LOCK_FILE, JOURNAL, STAGING})
JOURNAL_RESERVED = RESERVED - {MANIFEST}  # a journal moves the manifest too

CRASH_ENV = "VLLM_KIT_DEBUG_WRITE_CRASH_AT"
DELAY_ENV = "VLLM_KIT_DEBUG_WRITE_STEP_DELAY"
LOCK_WAIT_ENV = "VLLM_KIT_LOCK_WAIT"
DEFAULT_LOCK_WAIT_S = 30.0
JOURNAL_VERSION = 2  # 2: removals and folders beside moves (stale files); 1: moves only, still recovered
JOURNAL_VERSIONS_READ = (1, 2)
FILE_MODE = 0o644

Notify = Callable[[str], None]


@dataclass(frozen=True)
class FileResult:
    path: str
    # create | identical | changed | conflict | forced; stale files (remove_stale): removed | kept
    status: str


@dataclass(frozen=True)
class _Journal:
    moves: list[dict[str, str]]  # {"staged", "target", "sha256"}, the manifest last
    removals: list[dict[str, str]]  # {"target", "sha256"}: unlinked only while the file still has that hash
    folders: list[str]  # removed when empty, in this order (deepest first)


@dataclass(frozen=True)
class _Plan:
    results: list[FileResult]  # every rendered file, and with remove_stale every stale one, sorted by path
    removals: list[tuple[str, str]]  # (path, sha256) of the unedited stale files
    folders: list[str]  # folders to remove if empty once the removals are done, deepest first
    files: dict[str, str]  # the new manifest's files
    kept: list[str]  # the new manifest's kept


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest_data(out_dir: Path) -> dict:
    data = _read_regular(out_dir / MANIFEST)
    if data is None:
        return {}
    try:
        manifest = json.loads(data.decode("utf-8"))
    except ValueError:
        return {}  # an unreadable manifest vouches for nothing: every file counts as the user's
    return manifest if isinstance(manifest, dict) else {}


def read_manifest(out_dir: Path) -> dict[str, str]:
    """The files the kit wrote and still owns: path -> sha256 as written."""
    files = _manifest_data(out_dir).get("files", {})
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}


def read_kept(out_dir: Path) -> list[str]:
    """Files the kit wrote, no longer renders, and left because the user had edited them (no longer the kit's)."""
    kept = _manifest_data(out_dir).get("kept", [])
    return sorted({str(k) for k in kept}) if isinstance(kept, list) else []


def manifest_text(hashes: dict[str, str], kept: list[str] | tuple[str, ...] = ()) -> str:
    data: dict = {"files": dict(sorted(hashes.items()))}
    if kept:  # absent when empty, so a manifest from before stale-file removal reads back byte for byte
        data["kept"] = sorted(set(kept))
    return json.dumps(data, indent=2) + "\n"


def atomic_write(path: Path, text: str) -> None:
    """One file replaced atomically (temp file beside it, fsync, rename); for single files outside a set."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        _write_synced(tmp, text.encode("utf-8"))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


# --- the steps a test can interrupt -------------------------------------------------------------------


class _Steps:
    """Counts the durable steps of a write so a test can kill the process between any two of them."""

    def __init__(self) -> None:
        self.count = 0
        self.crash_at = _env_number(CRASH_ENV, int) or 0
        self.delay = _env_number(DELAY_ENV, float) or 0.0

    def __call__(self) -> None:
        self.count += 1
        if self.delay:
            time.sleep(self.delay)
        if self.count == self.crash_at:
            os.kill(os.getpid(), signal.SIGKILL)


def _env_number(name: str, kind: type[int] | type[float]) -> int | float | None:
    raw = os.environ.get(name)
    if not raw:
        return None
    try:
        value = kind(raw)
    except ValueError:
        raise WriteError(f"${name}={raw!r}: not a number") from None
    if not value >= 0 or value == float("inf"):
        raise WriteError(f"${name}={raw!r}: must be a finite number >= 0")
    return value


# --- small file-system helpers ------------------------------------------------------------------------


def _write_synced(path: Path, data: bytes) -> None:
    # O_EXCL|O_NOFOLLOW: never write through a link or into a file someone else put there.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, FILE_MODE)  # the umask must not make a rendered file unreadable in the image
        os.fsync(fd)
    except OSError as error:
        # os.write and os.fsync name no file: name it, so the user's one line says where (ENOSPC, EIO).
        raise OSError(error.errno, error.strerror, str(path)) from None
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_regular(path: Path) -> bytes | None:
    """The bytes of a regular file, or None when there is none. Never blocks on a FIFO or follows a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:  # a symlink: not a file the kit wrote
            return None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def file_kind(mode: int) -> str:
    """What a stat mode is, as an error says it ("a regular file", "a directory", "a FIFO")."""
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "an unknown kind of file"


def _plain_relative(rel: str, reserved: frozenset[str] = RESERVED) -> bool:
    """A rendered or journalled path: relative, inside the directory, not one of the writer's own names."""
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts) \
        and parts[0] not in reserved


def _rendered_path(rel: str) -> PurePosixPath:
    if not _plain_relative(rel):
        raise WriteError(f"rendered file {rel!r}: not a plain relative path inside the directory")
    return PurePosixPath(rel)


def _check_target(out_dir: Path, rel: PurePosixPath) -> bool:
    """Whether a regular file exists at ``rel``; refuses anything else there or a link on the way to it."""
    here = out_dir
    for i, part in enumerate(rel.parts):
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except FileNotFoundError:
            return False
        last = i == len(rel.parts) - 1
        if last and stat.S_ISREG(mode):
            return True
        if not last and stat.S_ISDIR(mode):
            continue
        what = file_kind(mode)
        if stat.S_ISLNK(mode):
            what += f" (to {os.readlink(here)})"
        role = "the kit writes a regular file here" if last else "the kit writes files under this folder"
        raise WriteError(f"{here}: is {what}; {role}",
                         hint="move it away, or choose another --out")
    return False


def _os_error(error: OSError, out_dir: Path, committed: bool) -> WriteError:
    where = error.filename if error.filename is not None else out_dir
    reason = error.strerror or str(error)
    code = errno.errorcode.get(error.errno or 0)
    if committed:
        hint = "the write was committed: the next kit render into this directory completes it"
    else:
        hint = "none of the rendered files was changed"
    if error.errno == errno.ENOSPC:
        hint += "; free space there first"
    elif error.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        hint += "; choose a writable --out"
    return WriteError(f"{where}: {reason}" + (f" ({code})" if code else ""), hint=hint)


# --- the lock -----------------------------------------------------------------------------------------


class _Lock:
    """An exclusive flock on DIR/.vllm-kit.write-lock, waited for a bounded time."""

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / LOCK_FILE
        self.fd: int | None = None

    def __enter__(self) -> _Lock:
        wait = _env_number(LOCK_WAIT_ENV, float)
        deadline = time.monotonic() + (DEFAULT_LOCK_WAIT_S if wait is None else wait)
        flags = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # NONBLOCK: a FIFO put here must not hang us
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | flags, FILE_MODE)
        except OSError as error:
            if error.errno not in (errno.EROFS, errno.EACCES) or not os.path.isfile(self.path):
                raise
            # A read-only directory can still be checked (a render with nothing to change succeeds there).
            fd = os.open(self.path, os.O_RDONLY | flags)
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise WriteError(f"{self.path}: is {file_kind(mode)}; the kit keeps its lock file here",
                                 hint="move it away")
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        waited = wait if wait is not None else DEFAULT_LOCK_WAIT_S
                        raise WriteError(
                            f"{self.path}: another kit command is writing into {self.path.parent}; "
                            f"gave up waiting after {waited:g} s",
                            hint=f"run it again when the other one is done (${LOCK_WAIT_ENV} sets the wait)",
                        ) from None
                    time.sleep(0.05)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the flock
            self.fd = None


# --- recovery -----------------------------------------------------------------------------------------


def _load_journal(out_dir: Path) -> _Journal | None:
    path = out_dir / JOURNAL
    data = _read_regular(path)
    if data is None:
        if os.path.lexists(path):
            raise WriteError(f"{path}: is {file_kind(os.lstat(path).st_mode)}; the kit keeps its journal here",
                             hint="move it away")
        return None
    hint = f"if no kit command is running, delete {JOURNAL} and {STAGING}/ and render again"
    journal, version = _decode_journal(path, data, hint)
    _refuse_newer_journal(path, out_dir, version, hint)
    try:
        return _journal_of(journal, version)
    except (ValueError, KeyError, TypeError) as error:
        raise WriteError(f"{path}: not a journal this kit wrote ({error})", hint=hint) from None


def _decode_journal(path: Path, data: bytes, hint: str) -> tuple[Any, Any]:
    """The journal's JSON and its version (None when it is not an object)."""
    try:
        journal = json.loads(data.decode("utf-8"))
        version = journal.get("version") if isinstance(journal, dict) else None
    except (ValueError, UnicodeDecodeError) as error:
        raise WriteError(f"{path}: not a journal this kit wrote ({error})", hint=hint) from None
    return journal, version


def _refuse_newer_journal(path: Path, out_dir: Path, version: object, hint: str) -> None:
    """A newer kit's journal is left for that kit: this one cannot know what its entries mean."""
    if isinstance(version, int) and not isinstance(version, bool) and version > JOURNAL_VERSION:
        raise WriteError(f"{path}: journal version {version}, written by a newer vllm-kit (this one reads "
                         f"versions {', '.join(map(str, JOURNAL_VERSIONS_READ))})",
                         hint=f"finish the write with the newer kit (any command that renders into {out_dir}); "
                              + hint)


def _journal_of(journal: object, version: object) -> _Journal:
    """The journal, checked against its version's shape; ValueError (KeyError, TypeError) names what does not fit."""
    if version not in JOURNAL_VERSIONS_READ:
        raise ValueError("unknown version")
    assert isinstance(journal, dict)  # _decode_journal's version is None for anything else
    keys = {"version", "moves"} if version == 1 else {"version", "moves", "removals", "folders"}
    if set(journal) != keys:
        raise ValueError(f"keys {sorted(journal)}, expected {sorted(keys)}")
    moves, removals, folders = journal["moves"], journal.get("removals", []), journal.get("folders", [])
    if not isinstance(moves, list) or not moves or not isinstance(removals, list) \
            or not isinstance(folders, list):
        raise ValueError("no moves, or not lists")
    for move in moves:
        _check_journal_move(move)
    for removal in removals:
        _check_journal_removal(removal)
    for folder in folders:
        if not isinstance(folder, str) or not _plain_relative(folder):
            raise ValueError(f"folder {folder!r} is outside the directory")
    return _Journal(moves, removals, folders)


def _check_journal_move(move: object) -> None:
    if not isinstance(move, dict) or set(move) != {"staged", "target", "sha256"} \
            or not all(isinstance(v, str) for v in move.values()):
        raise ValueError("bad move")
    if not _plain_relative(move["target"], JOURNAL_RESERVED):
        raise ValueError(f"target {move['target']!r} is outside the directory")
    if not move["staged"].isdecimal():  # staged files are numbered
        raise ValueError("bad staged name")


def _check_journal_removal(removal: object) -> None:
    if not isinstance(removal, dict) or set(removal) != {"target", "sha256"} \
            or not all(isinstance(v, str) for v in removal.values()):
        raise ValueError("bad removal")
    if not _plain_relative(removal["target"]):
        raise ValueError(f"removal {removal['target']!r} is outside the directory")


def recover(out_dir: Path, steps: Callable[[], None] = lambda: None) -> str | None:
    """Finish (journal present) or undo (staging only) an interrupted write. Call with the lock held.

    Returns what was done, for the user, or None when there was nothing to do.
    """
    journal = _load_journal(out_dir)
    staging = out_dir / STAGING
    if journal is None:
        if not os.path.lexists(staging):
            return None
        _remove(staging)
        _fsync_dir(out_dir)
        return "removed the staged files of an interrupted write that was not committed (the old files stand)"
    _apply(out_dir, journal, steps)
    removed = f" and a removal of {len(journal.removals)} stale file(s)" if journal.removals else ""
    return f"completed an interrupted write of {len(journal.moves) - 1} file(s){removed} (its journal was committed)"


def _apply(out_dir: Path, journal: _Journal, steps: Callable[[], None]) -> None:
    staging = out_dir / STAGING
    with contextlib.suppress(FileNotFoundError):  # absent: every move was done before the interruption
        mode = os.lstat(staging).st_mode
        if not stat.S_ISDIR(mode):
            # A link here would have recovery move files from wherever it points into the folder.
            raise WriteError(f"{staging}: is {file_kind(mode)}; the kit stages its writes in a folder of its own "
                             "here and does not follow links", hint=f"if no kit command is running, delete {JOURNAL} "
                             f"and {STAGING} and render again")
    parents = set()
    # Removals first, then the folders they empty, then the moves: no move ever lands in a folder removed
    # here (the plan never lists a folder a rendered file lives in), and the manifest stays the last move.
    for removal in journal.removals:
        if _stale_state(out_dir, removal["target"], removal["sha256"]) == "removed":
            target = out_dir / removal["target"]
            os.unlink(target)
            parents.add(target.parent)
            steps()
    for folder in journal.folders:
        path = out_dir / folder
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                os.rmdir(path)
        except FileNotFoundError:
            continue  # removed before the interruption
        except OSError as error:
            if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
                continue  # something else lives there (the user's): it stays
            raise
        parents.discard(path)
        parents.add(path.parent)
        steps()
    for move in journal.moves:
        source = staging / move["staged"]
        target = out_dir / move["target"]
        data = _read_regular(source)
        if data is None:
            continue  # moved before the interruption
        if sha256_bytes(data) != move["sha256"]:
            raise WriteError(f"{source}: does not match its journal entry for {move['target']}",
                             hint=f"delete {JOURNAL} and {STAGING}/ and render again")
        _check_target(out_dir, PurePosixPath(move["target"]))  # checked by _load_journal
        _make_parents(out_dir, target.parent)
        os.rename(source, target)
        parents.add(target.parent)
        steps()
    for parent in sorted(parents):
        if os.path.isdir(parent):  # a parent of a removed file may be a removed folder
            _fsync_dir(parent)
    steps()
    # The staging folder goes before the journal: a staging folder without a journal always means
    # "not committed", so recovery never mistakes a finished write for an unfinished one.
    _remove(staging)
    _fsync_dir(out_dir)
    steps()
    os.unlink(out_dir / JOURNAL)
    _fsync_dir(out_dir)
    steps()


def _make_parents(out_dir: Path, folder: Path) -> None:
    missing = []
    while folder != out_dir and not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        os.mkdir(path)
        _fsync_dir(path.parent)


def _remove(path: Path) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _stale_state(out_dir: Path, rel: str, sha256: str) -> str:
    """What a stale file's fate is: ``removed`` (a regular file with the kit's hash, under real folders),
    ``gone`` (nothing there), or ``kept`` (anything else: the user's). Never follows a link."""
    here = out_dir
    parts = PurePosixPath(rel).parts
    for i, part in enumerate(parts):
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except FileNotFoundError:
            return "gone"
        except NotADirectoryError:
            return "kept"
        if i < len(parts) - 1 and not stat.S_ISDIR(mode):
            return "kept"  # a link or a file where the kit had a folder: not the kit's to go through
    if not stat.S_ISREG(mode):
        return "kept"
    data = _read_regular(here)
    return "removed" if data is not None and sha256_bytes(data) == sha256 else "kept"


# --- planning and writing -----------------------------------------------------------------------------


def plan_writes(files: dict[str, str], out_dir: Path, force: bool = False,
                remove_stale: bool = False) -> list[FileResult]:
    """Decide each file's fate without writing anything (stale files too, with ``remove_stale``)."""
    return _plan(files, out_dir, force, remove_stale).results


def _plan(files: dict[str, str], out_dir: Path, force: bool, remove_stale: bool) -> _Plan:
    manifest = read_manifest(out_dir)
    results = []
    for rel, text in sorted(files.items()):
        if not _check_target(out_dir, _rendered_path(rel)):
            results.append(FileResult(rel, "create"))
            continue
        current = _read_regular(out_dir / rel)
        if current == text.encode("utf-8"):
            results.append(FileResult(rel, "identical"))
        elif current is not None and manifest.get(rel) == sha256_bytes(current):
            results.append(FileResult(rel, "changed"))  # still as the kit wrote it: safe to update
        else:
            results.append(FileResult(rel, "forced" if force else "conflict"))
    new_files = {rel: sha256_text(text) for rel, text in files.items()}
    kept = [rel for rel in read_kept(out_dir) if rel not in files and _plain_relative(rel)]
    removals: list[tuple[str, str]] = []
    if remove_stale:
        for rel, digest in sorted(manifest.items()):
            if rel in files or not _plain_relative(rel):
                continue  # a path no render could have written (a hand-edited manifest): never touched
            state = _stale_state(out_dir, rel, digest)
            if state == "removed":
                removals.append((rel, digest))
            elif state == "kept":
                kept.append(rel)
            if state != "gone":
                results.append(FileResult(rel, state))
        results.sort(key=lambda r: r.path)
    else:
        new_files = {**manifest, **new_files}
    # A kept file the user has deleted since is forgotten: the record is of files that are there.
    kept = sorted({rel for rel in kept if os.path.lexists(out_dir / rel)})
    return _Plan(results, removals, _folders_to_remove(removals, files, kept), new_files, kept)


def _folders_to_remove(removals: list[tuple[str, str]], files: dict[str, str], kept: list[str]) -> list[str]:
    """The folders above removed files that no rendered or kept file needs, deepest first."""
    def above(rel: str) -> set[str]:
        return {p.as_posix() for p in PurePosixPath(rel).parents if p.parts}

    needed = set().union(*map(above, files), *map(above, kept))
    candidates = set().union(*(above(rel) for rel, _ in removals)) - needed
    return sorted(candidates, key=lambda folder: (-folder.count("/"), folder))


def _refuse_conflicts(results: list[FileResult], out_dir: Path, files: dict[str, str]) -> None:
    conflicts = [r for r in results if r.status == "conflict"]
    if conflicts:
        manifest = read_manifest(out_dir)
        raise KitError(
            f"{out_dir}: files changed since the kit wrote them",
            problems=[_conflict(out_dir, r.path, manifest.get(r.path) == sha256_text(files[r.path]))
                      for r in conflicts],
        )


def _conflict(out_dir: Path, rel: str, same_as_before: bool) -> Problem:
    """One refused file. ``same_as_before``: this write's text is what the kit wrote there last, so the user's edit
    is the whole difference and --force would only undo it (said, so the choice is made knowing it)."""
    import shlex

    message = ("changed since the kit wrote it; not overwritten (this render writes it as before: your edit is all "
               "that differs, and --force would undo it)" if same_as_before else
               "changed since the kit wrote it (or not written by the kit); not overwritten")
    diff = f"`kit render --out {shlex.quote(str(out_dir))} --diff` shows it"
    return Problem(str(out_dir / rel), message,
                   f"keep your edit in the preset instead ({diff}), or re-run with --force to overwrite")


def _check_out_dir(out_dir: Path) -> bool:
    """Whether --out exists (as a directory, possibly through a link the user chose)."""
    try:
        mode = os.stat(out_dir).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(mode):
        raise WriteError(f"--out {out_dir}: is {file_kind(mode)}, not a directory")
    return True


def write_files(files: dict[str, str], out_dir: Path, *, force: bool = False, dry_run: bool = False,
                notify: Notify | None = None, remove_stale: bool = False) -> list[FileResult]:
    """Write the set all or nothing (see the module docstring); refuse user edits unless ``force``.

    ``remove_stale``: files an earlier write made that this set no longer has are removed when unedited
    (``removed``) and left when edited (``kept``), in the same all-or-nothing write; without it they stay
    the kit's, untouched. ``notify`` hears about a recovered earlier write. OS errors become one
    ``WriteError`` naming the path.
    """
    try:
        exists = _check_out_dir(out_dir)
        if dry_run:
            if not exists:
                return [FileResult(rel, "create") for rel in sorted(files)]
            # A dry run reads under the lock too, so it never plans against a write half-way through its
            # renames; where no writer ever ran (no lock file) it creates nothing.
            journal = os.path.lexists(out_dir / JOURNAL)
            locked = journal or os.path.lexists(out_dir / LOCK_FILE)
            with _Lock(out_dir) if locked else contextlib.nullcontext():
                if journal:  # a committed write is completed first, or the plan would be against a mix
                    _say(notify, recover(out_dir))
                results = plan_writes(files, out_dir, force, remove_stale)
            _refuse_conflicts(results, out_dir, files)
            return results
        if not exists:
            out_dir.mkdir(parents=True, exist_ok=True)
        steps = _Steps()
        with _Lock(out_dir):
            steps()
            _say(notify, recover(out_dir, steps))
            plan = _plan(files, out_dir, force, remove_stale)
            _refuse_conflicts(plan.results, out_dir, files)
            _check_target(out_dir, PurePosixPath(MANIFEST))  # a folder there would block the commit for good
            text = manifest_text(plan.files, plan.kept)
            changes = [(r.path, files[r.path]) for r in plan.results
                       if r.status not in ("identical", "removed", "kept")]
            if changes or plan.removals or _read_regular(out_dir / MANIFEST) != text.encode():
                changes.append((MANIFEST, text))
                _commit(out_dir, changes, plan, steps)
        return plan.results
    except OSError as error:
        raise _os_error(error, out_dir, committed=os.path.lexists(out_dir / JOURNAL)) from None


def _commit(out_dir: Path, changes: list[tuple[str, str]], plan: _Plan, steps: Callable[[], None]) -> None:
    staging = out_dir / STAGING
    try:
        os.mkdir(staging)
        steps()
        moves = []
        for i, (rel, text) in enumerate(changes):
            data = text.encode("utf-8")
            _write_synced(staging / str(i), data)
            moves.append({"staged": str(i), "target": rel, "sha256": sha256_bytes(data)})
            steps()
        journal = _Journal(moves, [{"target": rel, "sha256": digest} for rel, digest in plan.removals],
                           plan.folders if plan.removals else [])
        record = {"version": JOURNAL_VERSION, "moves": journal.moves, "removals": journal.removals,
                  "folders": journal.folders}
        _write_synced(staging / "journal", (json.dumps(record, indent=2) + "\n").encode("utf-8"))
        _fsync_dir(staging)
        steps()
        os.rename(staging / "journal", out_dir / JOURNAL)  # the commit point
    except BaseException:
        try:
            _remove(staging)  # not committed: undo, so the old set stands with nothing beside it
        except OSError:
            pass  # the next write removes it (recovery deletes an uncommitted staging folder)
        raise
    _fsync_dir(out_dir)
    steps()
    _apply(out_dir, journal, steps)


def _say(notify: Notify | None, message: str | None) -> None:
    if notify and message:
        notify(message)
