"""What a deployment folder was rendered from, kept in the folder (as copier keeps its answers, helm a release).

``DIR/vllm-kit.yaml`` records the preset (a shipped preset by name; any other by its path relative to DIR, with
the sha256 of its text at the render), the overrides given on the command line, the ``--with`` add-ons, the
``--with-preset`` companions, the target, the base image, whether a plan that does not fit was allowed, and the
kit's version. Every command that renders into DIR (render, build, lock, fetch, up, smoke) writes it in the same
all-or-nothing write as the other files, and every command given ``--out DIR`` reads it first:

- no preset on the command line: the recorded one, with its overrides and add-ons;
- the same preset: the recorded overrides, then the command line's (a key given again replaces the recorded
  value; ``--reset-overrides`` drops the recorded ones first);
- another preset: refused unless ``--replace`` (then nothing recorded carries over).

``--with NAME`` adds an add-on, ``--without NAME`` takes one (or a ``--with-preset`` companion) away. The
record is data the kit reads; edit the preset, or pass overrides, rather than this file (a hand edit is refused
at the next write like any edited rendered file, unless ``--force``).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import kit
from kit.core.errors import KitError, PresetError, Problem

RECORD_FILE = "vllm-kit.yaml"
RECORD_VERSION = 1
HEADER = [
    "vllm-kit: what this folder was rendered from. Every kit command given --out for this folder reads it:",
    "`kit render --out DIR` re-renders it as recorded, overrides on the command line change it, and",
    "`kit status --out DIR` shows it. Edit the preset or pass overrides rather than this file.",
]


class RecordError(KitError):
    """The folder's record cannot be read, or the command asks for something the folder is not."""


class NoPreset(RecordError):
    """A usage mistake (exit 2, as click's): no preset given, and no folder that says which."""

    exit_code = 2


@dataclass(frozen=True)
class Record:
    """One deployment: the inputs of its render, as the command line gave them (merged over time)."""

    preset: str  # a shipped preset's name, or a path (relative to the folder, or absolute) to the user's file
    preset_name: str
    preset_sha256: str
    overrides: tuple[str, ...] = ()  # KEY=VALUE, one per key, in the order first given
    with_profiles: tuple[str, ...] = ()
    with_presets: tuple[str, ...] = ()
    target: str = "compose"
    base_image: str | None = None
    allow_no_fit: bool = False
    kit_version: str = kit.__version__

    def as_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "version": RECORD_VERSION,
            "kit_version": self.kit_version,
            "preset": {"ref": self.preset, "name": self.preset_name, "sha256": self.preset_sha256},
            "overrides": list(self.overrides),
            "with": list(self.with_profiles),
            "with_presets": list(self.with_presets),
            "target": self.target,
            "base_image": self.base_image,
            "allow_no_fit": self.allow_no_fit,
        }
        return data

    def text(self) -> str:
        from kit.core.yamlwrite import dump_with_comments

        return dump_with_comments(self.as_data(), HEADER, {})


@dataclass(frozen=True)
class Request:
    """What one command line asks for: ``None`` where it said nothing (so the record's value stands)."""

    preset: str | None = None
    overrides: tuple[str, ...] = ()
    with_profiles: tuple[str, ...] = ()
    without: tuple[str, ...] = ()
    with_presets: tuple[str, ...] = ()
    target: str | None = None
    base_image: str | None = None
    allow_no_fit: bool = False
    replace: bool = False
    reset_overrides: bool = False
    # Overrides the command derives itself (`--port`, `model=`), merged like the user's
    derived: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Resolved:
    """The inputs a command renders with, and the record it writes."""

    ref: str  # what load_preset resolves (a name, or a path valid from the current directory)
    overrides: list[str]
    with_profiles: list[str]
    with_presets: list[str]
    target: str
    base_image: str | None
    allow_no_fit: bool
    record: Record
    recorded: Record | None  # what the folder held before this command


def file_sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def override_key(text: str) -> str:
    return text.partition("=")[0]


def merge_overrides(old: tuple[str, ...] | list[str], new: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``old`` then ``new``, one entry per key: a key given again takes the new value, in its first place."""
    merged: dict[str, str] = {}
    for text in (*old, *new):
        merged[override_key(text)] = text
    return tuple(merged.values())


def model_overrides(model: str | None) -> tuple[str, ...]:
    """``model=ID|PATH`` on any command that takes a preset: a hub id, or a host folder (model.host_path, with the
    folder's name as model.id), and neither the preset's generated tiny model nor its served name (the server then
    answers to the id, as `vllm serve ID` does)."""
    if not model:
        return ()
    from kit.config.preset import looks_like_model_path, model_name_for_path

    if looks_like_model_path(model):
        where = (f"model.host_path={model}", f"model.id={model_name_for_path(model)}")
    else:
        where = (f"model.id={model}", "model.host_path=null")
    return (*where, "model.generate=null", "model.served_model_name=null")


def _union(old: tuple[str, ...], add: tuple[str, ...], drop: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(name for name in dict.fromkeys((*old, *add)) if name not in drop)


def read_record(out_dir: Path) -> Record | None:
    """The folder's record, or None when the folder has none (never rendered, or rendered before records)."""
    path = out_dir / RECORD_FILE
    try:
        if path.is_symlink() or not path.is_file():
            return None
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RecordError(f"{path}: cannot be read ({error})") from None
    where = str(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise RecordError(f"{where}: not YAML ({str(error).splitlines()[0]})",
                          hint="render again with --replace preset=NAME, or restore the file") from None
    if not isinstance(data, dict) or data.get("version") != RECORD_VERSION or not isinstance(data.get("preset"), dict):
        raise RecordError(f"{where}: not a deployment record this kit wrote (version {RECORD_VERSION})",
                          hint="render again with --replace preset=NAME")

    def strings(key: str) -> tuple[str, ...]:
        value = data.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise RecordError(f"{where}: {key}: a list of strings")
        return tuple(value)

    preset = data["preset"]
    ref, name = preset.get("ref"), preset.get("name")
    if not isinstance(ref, str) or not ref or not isinstance(name, str):
        raise RecordError(f"{where}: preset.ref: missing")
    target = data.get("target", "compose")
    if target not in ("compose", "k8s"):
        raise RecordError(f"{where}: target: {target!r} is not compose or k8s")
    base = data.get("base_image")
    if base is not None and not isinstance(base, str):
        raise RecordError(f"{where}: base_image: a string")
    return Record(preset=ref, preset_name=name, preset_sha256=str(preset.get("sha256") or ""),
                  overrides=strings("overrides"), with_profiles=strings("with"), with_presets=strings("with_presets"),
                  target=target, base_image=base, allow_no_fit=bool(data.get("allow_no_fit", False)),
                  kit_version=str(data.get("kit_version", "")))


def recorded_ref_path(record: Record, out_dir: Path) -> str:
    """The recorded preset as load_preset takes it from the current directory. A name is a shipped preset's (the
    kit records any other by its path), so it is the shipped file even where ./presets holds one of that name."""
    if not _is_path(record.preset):
        from kit.core.datafiles import PRESETS_DIR

        return str(PRESETS_DIR / f"{record.preset}.yaml")
    if not os.path.isabs(record.preset):
        return os.path.normpath(os.path.join(out_dir, record.preset))
    return record.preset


def _is_path(ref: str) -> bool:
    return "/" in ref or ref.endswith((".yaml", ".yml"))


def _ref_for_record(path: Path, name: str, out_dir: Path) -> str:
    """A shipped preset by name; the user's own by its path relative to the folder (it moves with it)."""
    from kit.core.datafiles import PRESETS_DIR

    resolved = path.resolve()
    if resolved.parent == PRESETS_DIR.resolve():
        return name
    try:
        return os.path.relpath(resolved, out_dir.resolve())
    except ValueError:
        return str(resolved)


def resolve(request: Request, out_dir: Path | None) -> Resolved:
    """The inputs for a command: the request, merged with the folder's record when there is one."""
    from kit.config.preset import find_preset

    recorded = read_record(out_dir) if out_dir is not None and out_dir.is_dir() else None
    fresh = recorded is None or request.replace
    if request.preset is None and fresh:
        if request.replace:
            raise NoPreset("--replace: give the preset to render here instead (preset=NAME)")
        where = f" and {out_dir} holds no deployment ({RECORD_FILE})" if out_dir is not None else ""
        raise NoPreset(f"no preset given{where}",
                          hint="pass preset=NAME (see `kit presets`), or --out DIR of a rendered deployment")
    if not fresh and request.preset is not None:
        assert recorded is not None and out_dir is not None
        given = find_preset(request.preset).resolve()
        found = recorded_preset_file(recorded, out_dir)
        before = found.resolve() if found is not None else None
        if before != given:
            what = (f"preset={request.preset} is another" if given.stem != recorded.preset_name
                    else f"preset={request.preset} finds another file of that name here ({given})")
            raise RecordError(
                f"{out_dir}: holds a deployment of preset {recorded.preset_name} ({RECORD_FILE}); {what}",
                hint=f"add --replace to render {request.preset} here instead (nothing recorded carries over), "
                     f"or choose another --out")
    if fresh:
        ref = request.preset
        assert ref is not None
        overrides = merge_overrides((), (*request.overrides, *request.derived))
        profiles = _union((), request.with_profiles, request.without)
        companions = _union((), request.with_presets, request.without)
        target = request.target or "compose"
        base_image = request.base_image
        allow = request.allow_no_fit
    else:
        assert recorded is not None and out_dir is not None
        ref = recorded_ref_path(recorded, out_dir) if request.preset is None else request.preset
        _unknown_drops(request.without, (*recorded.with_profiles, *recorded.with_presets, *request.with_profiles,
                                         *request.with_presets))
        kept = () if request.reset_overrides else recorded.overrides
        overrides = merge_overrides(kept, (*request.overrides, *request.derived))
        profiles = _union(recorded.with_profiles, request.with_profiles, request.without)
        companions = _union(recorded.with_presets, request.with_presets, request.without)
        target = request.target or recorded.target
        base_image = request.base_image if request.base_image is not None else recorded.base_image
        allow = request.allow_no_fit or recorded.allow_no_fit
    path = find_preset(ref)
    name = path.stem
    record = Record(preset=_ref_for_record(path, name, out_dir or Path(".")), preset_name=name,
                    preset_sha256=file_sha256(path), overrides=overrides, with_profiles=profiles,
                    with_presets=companions, target=target, base_image=base_image, allow_no_fit=allow)
    return Resolved(ref=ref, overrides=list(overrides), with_profiles=list(profiles), with_presets=list(companions),
                    target=target, base_image=base_image, allow_no_fit=allow, record=record, recorded=recorded)


def recorded_preset_file(record: Record, out_dir: Path) -> Path | None:
    """The recorded preset's file, or None when it no longer resolves."""
    from kit.config.preset import find_preset

    try:
        return find_preset(recorded_ref_path(record, out_dir))
    except PresetError:
        return None


def _unknown_drops(without: tuple[str, ...], present: tuple[str, ...]) -> None:
    unknown = [name for name in without if name not in present]
    if unknown:
        raise RecordError(f"--without {unknown[0]}: this deployment has no such add-on or companion preset",
                          problems=[Problem(f"--without {name}", "not in this deployment",
                                            f"it has: {', '.join(present) or 'none'}") for name in unknown])


def describe(record: Record, out_dir: Path) -> list[tuple[str, str]]:
    """(key, value) rows for `kit status`: what the folder is, and whether its preset changed since."""
    rows = [("preset", record.preset_name if record.preset == record.preset_name else
             f"{record.preset_name} ({record.preset})")]
    found = recorded_preset_file(record, out_dir)
    if found is not None:
        now = file_sha256(found)
        rows.append(("preset file", "unchanged since the render" if now == record.preset_sha256
                     else "changed since the render: `kit render --out DIR --diff` shows what a render would change"))
    else:
        rows.append(("preset file", "missing: the recorded preset no longer resolves"))
    rows.append(("overrides", " ".join(record.overrides) or "none"))
    rows.append(("add-ons", ", ".join(record.with_profiles) or "none"))
    if record.with_presets:
        rows.append(("beside", ", ".join(record.with_presets)))
    rows.append(("target", record.target))
    if record.base_image:
        rows.append(("base image", record.base_image))
    if record.allow_no_fit:
        rows.append(("allow no fit", "yes (rendered although the plan does not fit)"))
    rows.append(("rendered by", f"vllm-kit {record.kit_version}"))
    return rows


def edited_files(out_dir: Path) -> list[str]:
    """Files the kit wrote into ``out_dir`` that differ from what it wrote (its manifest's sha256), or are gone."""
    from kit.core.write import _read_regular, read_manifest, sha256_bytes

    edited = []
    for rel, digest in sorted(read_manifest(out_dir).items()):
        data = _read_regular(out_dir / rel)
        if data is None:
            edited.append(f"{rel} (missing)")
        elif sha256_bytes(data) != digest:
            edited.append(rel)
    return edited
