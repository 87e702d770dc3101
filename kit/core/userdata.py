"""Releases the user adds to the kit's data, from their config folder: the one place that reads it.

``$XDG_CONFIG_HOME/vllm-kit/`` (``~/.config/vllm-kit/`` when the variable is unset or not absolute, as the XDG base
directory spec says) may hold, beside ``presets/`` (kit/config/preset_files.py):

- ``flags/vllm-X.Y.Z.json``: the flag snapshot of a release (``python -m kit.config.flagsnap --regenerate X.Y.Z``
  writes it there), read as kit/data/flags/ is;
- ``vllm.yaml``: ``versions:`` rows of releases, each checked as the shipped rows of kit/data/vllm.yaml are
  (``version_row_problems``).

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
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kit.core.errors import KitError, Problem
from kit.core.safevalue import UnsafeValue, check_image_ref
from kit.core.versions import VERSION_RE

if TYPE_CHECKING:
    from kit.core.tables import VersionRow

APP_FOLDER = "vllm-kit"
FLAGS_FOLDER = "flags"
VERSIONS_FILE = "vllm.yaml"
SNAPSHOT_NAME_RE = re.compile(r"vllm-(?P<version>.+)\.json")

ROW_HINT = "a row has the fields of the kit's own rows (README: Releases the kit does not ship)"
RULE_UNKNOWN = "is not a planner rule the kit knows (kit/data/vllm.yaml rule_changes)"
# The FlashInfer modules images/flashinfer_aot.py can compile into a slim image (its GENERATORS): a release row may
# name only these, since they go into the Dockerfile's RUN line.
FLASHINFER_AOT_MODULES = ("sampling", "rope")
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
    from kit.core.inputfiles import decode_utf8, input_limits, read_capped

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


def _image_problems(where: str, row: dict[Any, Any], cudas: set[str]) -> list[Problem]:
    """The row's official image and CUDA variants: image references the kit can render, for CUDA it knows."""
    problems: list[Problem] = []
    images = [("official_image", row.get("official_image"))] if "official_image" in row else []
    variants = row.get("official_variants", {})
    if not isinstance(variants, dict):
        variants = {}  # the row model says what it should be
    for cuda, image in variants.items():
        if str(cuda) not in cudas:
            problems.append(Problem(f"{where}.official_variants.{cuda}", "is not a CUDA release the kit knows"))
        images.append((f"official_variants.{cuda}", image))
    for field, image in images:
        try:
            check_image_ref(image, f"{where}.{field}")
        except UnsafeValue as exc:
            problems.append(Problem(f"{where}.{field}", str(exc).replace(f"{where}.{field} ", "")))
    return problems


def _table_problems(where: str, row: dict[Any, Any], table: Mapping[str, Any]) -> list[Problem]:
    """What the row model cannot see: the row against the rest of the shipped ``table`` (its CUDA rows and image
    layouts), its release (the pip pin) and what the kit can build (FlashInfer modules, the CPU build or why not)."""
    version = where.removeprefix("versions.")
    problems: list[Problem] = []
    cudas = {str(c) for c in table.get("cuda") or {}}
    if "cuda" in row and str(row["cuda"]) not in cudas:
        problems.append(Problem(f"{where}.cuda", f"{row['cuda']!r} is not a CUDA release the kit knows "
                                f"({', '.join(sorted(cudas))})"))
    for key in ("torch", "python"):
        if isinstance(row.get(key), str) and not re.fullmatch(r"\d+\.\d+(\.\d+)?(\S*)", row[key]):
            problems.append(Problem(f"{where}.{key}", "is not a version in quotes (\"2.14.0\")"))
    if isinstance(row.get("pip"), str) and row["pip"] != f"vllm=={version}":
        problems.append(Problem(f"{where}.pip", f"is {row['pip']!r}, not vllm=={version}"))
    problems += _image_problems(where, row, cudas)
    layouts = table.get("official_layouts") or {}
    if isinstance(row.get("official_layout"), str) and row["official_layout"] not in layouts:
        problems.append(Problem(f"{where}.official_layout",
                                f"{row['official_layout']!r} is not one of: {', '.join(layouts)}"))
    aot = row.get("flashinfer_aot", [])
    if aot is None or (isinstance(aot, list) and not all(m in FLASHINFER_AOT_MODULES for m in aot)):
        problems.append(Problem(f"{where}.flashinfer_aot", "is not a list of FlashInfer modules the kit compiles into "
                                f"an image ({', '.join(FLASHINFER_AOT_MODULES)})"))
    reason = row.get("no_cpu_build", "given")
    if reason is None or (isinstance(reason, str) and not reason.strip()):  # another type: the row model says so
        problems.append(Problem(f"{where}.no_cpu_build", "is not a sentence saying why the release has no CPU build"))
    if "no_cpu_build" in row and "cpu" in row:
        problems.append(Problem(f"{where}.no_cpu_build", "goes with no `cpu` build: give one or the other"))
    return problems


def _row_problems(version: object, row: object, table: Mapping[str, Any]) -> tuple[list[Problem], VersionRow | None]:
    """The problems of one `versions` row (each naming the dotted field, not yet the file), and the row as its model
    when there are none: kit/core/tables.py VersionRow checks the fields and their types, then ``_table_problems``
    what the model cannot see."""
    where = f"versions.{version}"
    if not isinstance(version, str) or not re.match(VERSION_RE, version):
        return [Problem(where, "is not a release X.Y.Z (quote it: \"0.34.0\")")], None
    if not isinstance(row, dict):
        return [Problem(where, "is not a mapping of the release's fields")], None
    from kit.core.tables import FIELD_UNKNOWN, VersionRow, check_table  # pydantic: not at import (`kit --help`)

    model = None
    try:
        model = check_table(VersionRow, row, "", error=UserDataError, prefix=where)
        problems = []
    except UserDataError as exc:
        # a key of `defaults` the model does not know is a planner rule the kit does not have
        problems = [Problem(p.where, RULE_UNKNOWN, p.hint) if p.where.rpartition(".")[0] == f"{where}.defaults"
                    and p.message == FIELD_UNKNOWN else p for p in exc.problems]
    problems += _table_problems(where, row, table)
    return problems, (model if not problems else None)


def version_row_problems(version: object, row: object, table: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, what is wrong) of one `versions` row against the shipped ``table`` (its CUDA rows, image layouts and
    rule names): the one check of every row, shipped (tests/unit/test_userdata.py) or the user's."""
    return [(p.where, p.message) for p in _row_problems(version, row, table)[0]]


@functools.lru_cache(maxsize=16)
def _user_rows(folder: Path) -> tuple[Path | None, dict[Any, Any]]:
    """The user's vllm.yaml in ``folder`` and its `versions` mapping, as written (not yet checked)."""
    import yaml

    from kit.core.datafiles import SAFE_LOADER

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


def user_version_rows(folder: Path, shipped: Mapping[str, Any]) -> dict[str, VersionRow]:
    """The user's `versions` rows (``folder``/vllm.yaml) of releases the ``shipped`` table lacks, each checked (as
    version_row_problems says) into its model; one UserDataError listing every problem of the first bad row, each
    naming the user's file and the field."""
    path, rows = _user_rows(folder)
    found: dict[str, VersionRow] = {}
    for version, row in rows.items():
        if str(version) in shipped["versions"]:
            continue  # the kit ships this release: its own row wins (shadowed_user_files says so)
        problems, model = _row_problems(version, row, shipped)
        if problems or model is None:
            first = problems[0]
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise UserDataError(f"{path}: {first.where}: {first.message}{more}", hint=ROW_HINT,
                                problems=[Problem(f"{path}: {p.where}", p.message, p.hint) for p in problems])
        found[str(version)] = model
    return found


def shadowed_user_files(versions: list[str]) -> list[str]:
    """A note for each user file about one of ``versions`` that the kit's own data of that release overrides."""
    from kit.core.datafiles import DATA_DIR, load_yaml

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
        path, rows = _user_rows(folder)
    except UserDataError:
        return notes  # reading the release's row says what is wrong
    shipped_rows = load_yaml("vllm.yaml")["versions"]
    notes += [f"{path}: versions.{v}: not read: the kit ships the row of vLLM {v}, which wins; delete yours"
              for v in versions if v in rows and v in shipped_rows]
    return notes
