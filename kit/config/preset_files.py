"""Where a preset named on the command line is found: the one place that knows the lookup order.

``preset=NAME`` is looked up, first match wins, in
    1. ``./presets/NAME.yaml``: the project's own presets, beside the deployments (``kit init NAME`` writes there);
    2. ``$XDG_CONFIG_HOME/vllm-kit/presets/NAME.yaml`` (``~/.config/vllm-kit/presets`` when the variable is unset or
       not absolute, as the XDG base directory spec says): the user's own, from any folder;
    3. the presets shipped with the kit.
A user's preset may shadow a shipped name; ``kit presets`` says so. A ``preset=`` value with a ``/`` or ending in
``.yaml``/``.yml`` is a file path instead, never looked up (``find_preset`` takes either). The folders are read when
asked (never at import time), from the current working folder and environment. ``display_path`` is how messages name
a preset file.

Light on purpose (no pydantic): shell completion reads the names on every TAB.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from kit.core.dataread import PRESETS_DIR
from kit.core.errors import PresetError
from kit.core.inputfiles import user_path
from kit.core.userdata import user_config_dir

PROJECT, USER, SHIPPED = "project", "user", "shipped"
PROJECT_FOLDER = "presets"  # under the current working folder
SCHEMA_FILE = "schema.json"  # beside the presets; their `# yaml-language-server: $schema=` pointer names it
# A preset's name becomes an image repository (vllm-kit/NAME), a compose service suffix and Kubernetes names: one
# path component of Docker's repository grammar (lowercase letters and digits, single separators inside), short.
NAME_RE = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")
NAME_MAX = 64


@dataclass(frozen=True)
class PresetFile:
    name: str
    path: Path
    origin: str  # project | user | shipped
    shadows: tuple[str, ...] = ()  # origins further down the lookup order with a preset of the same name


def looks_like_path(ref: str) -> bool:
    return "/" in ref or ref.endswith((".yaml", ".yml"))


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a preset's name (a file stem ``preset=NAME`` finds), or None when it can."""
    if not name:
        return "is empty"
    if len(name) > NAME_MAX:
        return f"is longer than {NAME_MAX} characters"
    if name.endswith((".yaml", ".yml")):
        return "ends in .yaml/.yml: give the name without it (preset=NAME.yaml would be read as a file path)"
    if not NAME_RE.fullmatch(name):
        return ("is not a preset name: lowercase letters, digits, and '.', '_' or '-' between them "
                "(it names the image repository vllm-kit/NAME)")
    return None


def user_presets_dir() -> Path | None:
    """``$XDG_CONFIG_HOME/vllm-kit/presets``, else ``~/.config/vllm-kit/presets``; None without a home folder."""
    folder = user_config_dir()
    return None if folder is None else folder / "presets"


def project_presets_dir() -> Path:
    return Path.cwd() / PROJECT_FOLDER


def _same_path(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def preset_folders() -> list[tuple[str, Path]]:
    """(origin, folder) in lookup order. In the kit's own checkout ./presets is the shipped folder: listed once, as
    shipped."""
    folders: list[tuple[str, Path]] = []
    try:
        project: Path | None = project_presets_dir()
    except OSError:  # the working folder was deleted under us: it holds no presets
        project = None
    for origin, folder in ((PROJECT, project), (USER, user_presets_dir())):
        if folder is not None and not _same_path(folder, PRESETS_DIR) \
                and not any(_same_path(folder, seen) for _, seen in folders):
            folders.append((origin, folder))
    folders.append((SHIPPED, PRESETS_DIR))
    return folders


def _present(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except (OSError, ValueError):
        return None


def find_named(name: str) -> PresetFile | None:
    """The preset ``preset=NAME`` means from here, or None. A project or user entry that is there but not a regular
    file (a folder, a FIFO) is still returned: reading it then says what it is, rather than a shipped preset of the
    same name being used behind the user's back."""
    if name_problem(name) is not None:
        return None
    for origin, folder in preset_folders():
        path = folder / f"{name}.yaml"
        found = _present(path)
        if found is None:
            continue
        if origin != SHIPPED or stat.S_ISREG(found.st_mode):
            return PresetFile(name, path, origin)
    return None


def all_presets() -> list[PresetFile]:
    """Every preset a name finds, one per name (the first in lookup order), each with what it shadows."""
    found: dict[str, PresetFile] = {}
    for origin, folder in preset_folders():
        try:
            paths = sorted(folder.glob("*.yaml"))
        except OSError:
            continue
        for path in paths:
            name = path.stem
            if name_problem(name) is not None:
                continue  # `preset=` could not name it
            if name in found:
                first = found[name]
                found[name] = PresetFile(name, first.path, first.origin, (*first.shadows, origin))
            else:
                found[name] = PresetFile(name, path, origin)
    return [found[name] for name in sorted(found)]


def is_shipped(path: Path) -> bool:
    """Whether ``path`` is one of the kit's shipped presets (wherever the kit is installed)."""
    try:
        return path.resolve().parent == PRESETS_DIR.resolve()
    except OSError:
        return False


def preset_names() -> list[str]:
    """The presets shipped with the kit (the suite's every-preset tests use these); ``all_presets`` adds the user's."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def find_preset(ref: str) -> Path:
    """A preset name (./presets, then the user's config folder, then the shipped ones: the lookup order above), or
    a path to a preset file of the user's own."""
    if looks_like_path(ref):
        path, found = user_path(ref, error=PresetError)
        if found is None:
            raise PresetError(f"{ref}: no such preset file")
        return path  # a directory, FIFO or device is refused when read, with what it is
    entry = find_named(ref)
    if entry is not None:
        return entry.path
    names = [p.name for p in all_presets()]
    close = difflib.get_close_matches(ref, names, n=3, cutoff=0.4)
    hint = f"did you mean {', '.join(close)}?" if close else f"known presets: {', '.join(names)}"
    folders = ", ".join(_shown_folder(folder) for _, folder in preset_folders())
    raise PresetError(f"unknown preset {ref!r} (looked in {folders})", hint=hint)


def _shown_folder(folder: Path) -> str:
    return "the shipped presets" if folder == PRESETS_DIR else f"{_relative_to_cwd(folder)}/"


def _relative_to_cwd(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def display_path(path: Path) -> str:
    if path.resolve().parent == PRESETS_DIR.resolve():  # a shipped preset, wherever the kit is installed
        return f"presets/{path.name}"
    return _relative_to_cwd(path)


def preset_ref_for(name: str, path: Path) -> str:
    """What ``preset=`` takes to find this same preset again from here: its name when the name finds this file
    (a shipped, user or project preset, not shadowed), else the file's path (cwd-relative inside the working folder,
    absolute outside it). Hints the kit prints on the terminal (`kit push`) name the preset this way; rendered files
    do not (a path there would depend on where the render ran: kit/deploy/deployment.py preset_shipped)."""
    entry = find_named(name)
    if entry is not None and _same_path(entry.path, path):
        return name
    shown = _relative_to_cwd(path)
    return shown if looks_like_path(shown) else f"./{shown}"
