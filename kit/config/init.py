"""A preset of the user's own (``kit init NAME --from PRESET``): the source's text, comments kept, schema pointer fixed.

Public entry point: ``init_preset(name, source)``. It writes ``./presets/NAME.yaml`` (never over an existing file)
and ``./presets/schema.json``, the kit's preset schema, which the new file's ``# yaml-language-server: $schema=``
line names by a relative path, as the shipped presets name theirs: it works in any editor, in any checkout of the
user's project, and a later ``kit init`` brings it up to the kit's current schema.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from kit.config.preset_files import find_preset
from kit.config.presetload import load_preset
from kit.config.presetyaml import load_preset_yaml, read_preset_file
from kit.config.preset_files import (
    PROJECT,
    SCHEMA_FILE,
    find_named,
    looks_like_path,
    name_problem,
    preset_folders,
    project_presets_dir,
)
from kit.config.schema import schema_text
from kit.core.errors import KitError, PresetError
from kit.core.inputfiles import decode_utf8, input_limits, read_capped
from kit.core.write import atomic_write

SCHEMA_LINE = f"# yaml-language-server: $schema={SCHEMA_FILE}"
_MODELINE = re.compile(r"^#\s*yaml-language-server:\s*\$schema=.*$", re.MULTILINE)
SCHEMA_TITLE = "vllm-kit preset"  # kit/config/schema.py: how the kit knows a schema.json is its own


DEFAULT_SOURCE = "cpu"


@dataclass(frozen=True)
class MadePreset:
    name: str
    path: Path
    schema_path: Path
    schema_status: str  # create | updated | identical | kept (a schema.json that is not the kit's)
    shadows: tuple[str, ...] = ()  # origins whose preset of this name the new one hides
    warnings: list[str] = field(default_factory=list)
    source: str = DEFAULT_SOURCE  # what it was copied from: a name, or a file's path


def preset_text(source_text: str, name: str, source: str) -> str:
    """The new preset's text: the source's, its schema modeline (kept first) pointing at ./schema.json."""
    body = _MODELINE.sub("", source_text, count=1).lstrip("\n")
    # Only names the kit validated go into the comment (a path could hold a character that ends a YAML comment).
    origin = f"the {source} preset" if not looks_like_path(source) and name_problem(source) is None else "a preset file"
    if looks_like_path(source) and Path(source).stem == name:
        origin = f"the {name} preset it shadows"
    intro = (f"# {name}: your preset, started from {origin} by `kit init`. `kit validate preset={name}` checks it;\n"
             f"# `kit render preset={name} --out DIR` writes its deployment (both from the folder above presets/).\n")
    return f"{SCHEMA_LINE}\n{intro}{body}"


def init_preset(name: str, source: str | None = None) -> MadePreset:
    """``source`` None: the preset ``preset=NAME`` meant until now (a shipped one, or your config folder's), so the
    new file starts as the same deployment and only your edits change it; ``cpu`` when NAME is new."""
    problem = name_problem(name)
    if problem:
        raise PresetError(f"preset name {name!r} {problem}")
    folder = project_presets_dir()
    target = folder / f"{name}.yaml"
    if os.path.lexists(target):
        raise KitError(f"{target}: already exists; kit init never overwrites a preset",
                       hint="edit it, delete it first, or choose another NAME")
    shadowed = find_named(name)  # before the new file exists: what preset=NAME meant until now
    if source is None:
        source = str(shadowed.path) if shadowed is not None else DEFAULT_SOURCE
    source_path = find_preset(source)
    load_preset(str(source_path) if looks_like_path(source) else source)  # a broken source is refused, not copied
    where = str(source_path)
    raw = read_capped(source_path, where, input_limits()["files"]["preset_max_bytes"], error=PresetError,
                      what="preset file")
    source_text = decode_utf8(raw, where, error=PresetError)
    text = preset_text(source_text, name, source)
    # The copy must be the same preset: only comment lines changed.
    if load_preset_yaml(text, str(target)) != read_preset_file(source_path):
        raise PresetError(f"{where}: its text could not be copied without changing it",
                          hint="copy the file by hand into presets/")

    folder.mkdir(parents=True, exist_ok=True)
    schema_path, schema_status = _write_schema(folder)
    _create(target, text)

    warnings = []
    shadows: tuple[str, ...] = ()
    if shadowed is not None:
        shadows = (shadowed.origin,)
        warnings.append(f"{target.parent.name}/{target.name} shadows the {shadowed.origin} preset {name} "
                        f"({shadowed.path}): preset={name} now means yours in this folder (kit presets says so)")
    if schema_status == "kept":
        warnings.append(f"{schema_path}: not the kit's preset schema, left as it is; the new preset's "
                        f"`$schema={SCHEMA_FILE}` line points at it")
    if not any(origin == PROJECT for origin, _ in preset_folders()):
        # ./presets is the shipped folder: this is the kit's own checkout
        warnings.append(f"{folder} is the kit's shipped presets folder (this is a checkout of vllm-kit): "
                        f"{name} is a shipped preset now")
    return MadePreset(name, target, schema_path, schema_status, shadows, warnings, source)


def _write_schema(folder: Path) -> tuple[Path, str]:

    path = folder / SCHEMA_FILE
    text = schema_text()
    try:
        current = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        atomic_write(path, text)
        return path, "create"
    except (OSError, UnicodeDecodeError):
        return path, "kept"
    if current == text:
        return path, "identical"
    try:
        ours = json.loads(current).get("title") == SCHEMA_TITLE
    except (ValueError, AttributeError):
        ours = False
    if not ours:
        return path, "kept"
    atomic_write(path, text)  # the schema of an older kit: the kit's own file, brought up to date
    return path, "updated"


def _create(target: Path, text: str) -> None:
    """Write ``target`` whole or not at all, and never over a file that appeared meanwhile (link fails if it exists)."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, target)
        except FileExistsError:
            raise KitError(f"{target}: already exists; kit init never overwrites a preset",
                           hint="edit it, delete it first, or choose another NAME") from None
        except OSError:  # a filesystem without hard links: an exclusive create, still never over a file
            with open(target, "x", encoding="utf-8") as fh:
                fh.write(text)
    finally:
        tmp.unlink(missing_ok=True)

