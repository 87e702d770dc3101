"""Releases the user adds to the kit's data, from their config folder: the one place that reads it.

``$XDG_CONFIG_HOME/vllm-kit/`` (``~/.config/vllm-kit/`` when the variable is unset or not absolute, as the XDG base
directory spec says) may hold, beside ``presets/`` (kit/config/preset_files.py):

- ``flags/vllm-X.Y.Z.json``: the flag snapshot of a release (``python -m kit.config.flagsnap --regenerate X.Y.Z``
  writes it there), read as kit/data/flags/ is;
- ``vllm.yaml``: ``versions:`` rows of releases, each checked as the shipped rows of kit/data/vllm.yaml are
  (kit/core/tables.py ``version_row_problems``).

So a kit installed from a wheel (pipx) can move to a release newer than itself without editing the package. The
shipped data wins: a user file for a release the kit ships is not read (``shadowed_user_files`` names it, and
`kit upgrade` says so), so a kit update that ships the release is never overridden by an old copy. The user's
files are read only inside that folder (a link out of it is refused), size-capped (kit/data/input_limits.yaml), and
every problem names the file and the field.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Any

from kit.core.dataread import DATA_DIR, SAFE_LOADER, load_yaml
from kit.core.errors import KitError
from kit.core.inputfiles import decode_utf8, input_limits, read_capped
from kit.core.versions import VERSION_RE

APP_FOLDER = "vllm-kit"
FLAGS_FOLDER = "flags"
VERSIONS_FILE = "vllm.yaml"
SNAPSHOT_NAME_RE = re.compile(r"vllm-(?P<version>.+)\.json")

# The fields of a flag snapshot the kit reads (kit/config/flags.py FlagSnapshot.from_dict), and argparse's kinds.
SNAPSHOT_FORMAT = 1
FLAG_KINDS = ("store", "store_true", "store_false", "store_const", "boolean_optional", "append", "count", "other")


class UserDataError(KitError):
    """A file in the user's config folder cannot be used; the message names the file and the field."""


def user_config_dir() -> Path | None:
    """``$XDG_CONFIG_HOME/vllm-kit``, else ``~/.config/vllm-kit``; None without a home folder."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative value is invalid and ignored
        try:
            base = str(Path.home() / ".config")
        except RuntimeError:  # no HOME and no passwd entry
            return None
    return Path(base) / APP_FOLDER


def user_snapshot_dir() -> Path | None:
    folder = user_config_dir()
    return None if folder is None else folder / FLAGS_FOLDER


def user_file(relative: str, folder: Path | None = None) -> Path | None:
    """The user's file at ``relative`` inside the config folder, None when nothing is there. A link that leads out
    of the folder (or a name that does) is refused: the folder is what the user put there, not what it points at."""
    folder = folder if folder is not None else user_config_dir()
    if folder is None:
        return None
    path = folder / relative
    try:
        if not os.path.lexists(path):
            return None
        real, base = os.path.realpath(path), os.path.realpath(folder)
    except (OSError, ValueError):
        return None
    if os.path.commonpath([real, base]) != base:
        raise UserDataError(f"{path}: is a link to {real}, outside {folder}; the kit reads the user's data only "
                            "inside that folder", hint=f"copy the file into {path.parent} instead of linking it")
    return path


def _read_text(path: Path, limit_key: str, what: str) -> str:
    limit = int(input_limits()["files"][limit_key])
    return decode_utf8(read_capped(path, str(path), limit, error=UserDataError, what=what), str(path),
                       error=UserDataError)


# --------------------------------------------------------------------------- flag snapshots


def user_snapshot_versions() -> list[str]:
    """Releases with a snapshot file in the user's flags folder (by file name; read when loaded)."""
    folder = user_snapshot_dir()
    try:
        names = sorted(os.listdir(folder)) if folder is not None else []
    except OSError:
        return []
    found = []
    for name in names:
        match = SNAPSHOT_NAME_RE.fullmatch(name)
        if match and re.match(VERSION_RE, match["version"]):
            found.append(match["version"])
    return found


def snapshot_problem(data: Any, version: str) -> tuple[str, str] | None:
    """(field, what is wrong) with a snapshot's data for ``version``, or None: the shape the kit reads."""
    if not isinstance(data, dict):
        return "(top level)", "is not a JSON object"
    if data.get("format") != SNAPSHOT_FORMAT:
        return "format", f"is {data.get('format')!r}, the kit reads format {SNAPSHOT_FORMAT}"
    if not isinstance(data.get("generator"), dict) or not isinstance(data["generator"].get("version"), int):
        return "generator.version", "is missing or not a whole number"
    vllm = data.get("vllm")
    if not isinstance(vllm, dict) or vllm.get("version") != version:
        said = vllm.get("version") if isinstance(vllm, dict) else None
        return "vllm.version", f"is {said!r}, but the file name says {version}"
    flags = data.get("flags")
    if not isinstance(flags, dict) or not flags:
        return "flags", "is missing or empty (a mapping of flag name to its description)"
    for key, entry in flags.items():
        where = f"flags.{key}"
        if not isinstance(entry, dict):
            return where, "is not a JSON object"
        if not isinstance(entry.get("dest"), str):
            return f"{where}.dest", "is missing or not text"
        options = entry.get("options")
        if not isinstance(options, list) or not options or not all(
                isinstance(o, str) and o.startswith("-") for o in options):
            return f"{where}.options", "is not a list of option strings (--name)"
        if entry.get("kind") not in FLAG_KINDS:
            return f"{where}.kind", f"is {entry.get('kind')!r}, not one of: {', '.join(FLAG_KINDS)}"
        if not isinstance(entry.get("type"), str):
            return f"{where}.type", "is missing or not text"
        for name in ("hidden_options", "negative_options", "choices", "suggestions"):
            value = entry.get(name)
            if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                return f"{where}.{name}", "is not a list of text"
    return None


@functools.lru_cache(maxsize=16)
def load_user_snapshot_data(path: Path, version: str) -> dict[str, Any]:
    """The checked data of the user's snapshot of ``version`` at ``path``; UserDataError names file and field."""
    text = _read_text(path, "user_snapshot_max_bytes", "flag snapshot")
    try:
        data = json.loads(text)
    except ValueError as exc:
        line = f" at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise UserDataError(f"{path}: not JSON{line}", hint="regenerate it: `python -m kit.config.flagsnap "
                            f"--regenerate {version}`") from None
    problem = snapshot_problem(data, version)
    if problem is not None:
        raise UserDataError(f"{path}: {problem[0]}: {problem[1]}", hint="regenerate it: `python -m "
                            f"kit.config.flagsnap --regenerate {version}`")
    return data


# --------------------------------------------------------------------------- version rows


@functools.lru_cache(maxsize=16)
def read_user_rows(folder: Path) -> tuple[Path | None, dict[Any, Any]]:
    """The user's vllm.yaml in ``folder`` and its `versions` mapping, as written (not yet checked)."""
    import yaml


    path = user_file(VERSIONS_FILE, folder)
    if path is None:
        return None, {}
    text = _read_text(path, "user_versions_max_bytes", "version table")
    try:
        data = yaml.load(text, Loader=SAFE_LOADER)  # noqa: S506 - a safe loader, C or Python
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise UserDataError(f"{path}: not YAML{line}") from None
    if data is None:
        return path, {}
    if not isinstance(data, dict) or set(data) - {"versions"}:
        extra = [str(k) for k in data if k != "versions"] if isinstance(data, dict) else []
        raise UserDataError(f"{path}: {', '.join(extra) or '(top level)'}: the file holds only a `versions:` "
                            "mapping of release rows")
    rows = data.get("versions") or {}
    if not isinstance(rows, dict):
        raise UserDataError(f"{path}: versions: is not a mapping of release to its row")
    return path, rows


def shadowed_user_files(versions: list[str]) -> list[str]:
    """A note for each user file about one of ``versions`` that the kit's own data of that release overrides."""
    notes: list[str] = []
    folder = user_config_dir()
    if folder is None:
        return notes
    for version in versions:
        shipped, mine = DATA_DIR / "flags" / f"vllm-{version}.json", folder / FLAGS_FOLDER / f"vllm-{version}.json"
        if shipped.is_file() and os.path.lexists(mine):
            notes.append(f"{mine} is not read: the kit ships the snapshot of vLLM {version}, which wins; "
                         "delete your copy")
    try:
        path, rows = read_user_rows(folder)
    except UserDataError:
        return notes  # reading the release's row says what is wrong
    shipped_rows = load_yaml("vllm.yaml")["versions"]
    notes += [f"{path}: versions.{v}: not read: the kit ships the row of vLLM {v}, which wins; delete yours"
              for v in versions if v in rows and v in shipped_rows]
    return notes
