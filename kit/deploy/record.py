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
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import kit
from kit.config.preset import looks_like_model_path, model_name_for_path
from kit.config.preset_files import PROJECT_FOLDER, find_preset, preset_folders
from kit.core.datafiles import PRESETS_DIR
from kit.core.errors import KitError, PresetError, Problem
from kit.core.inputfiles import decode_utf8, input_limits, read_capped
from kit.core.write import _read_regular, read_manifest, sha256_bytes
from kit.core.yamlwrite import dump_with_comments

RECORD_FILE = "vllm-kit.yaml"
# A copy of the user's own preset as the render read it, beside the record: what a change to it is shown against.
PRESET_COPY = ".vllm-kit-preset.yaml"
RECORD_VERSION = 1
HEADER = [
    "vllm-kit: what this folder was rendered from. Every kit command given --out for this folder reads it:",
    "`kit render --out DIR` re-renders it as recorded, overrides on the command line change it, and",
    "`kit status --out DIR` shows it. Edit the preset or pass overrides rather than this file.",
]


class RecordError(KitError):
    """The folder's record cannot be read, or the command asks for something the folder is not."""


class PresetChanged(RecordError):
    """The user's preset changed since the folder was rendered from it: shown, and gone on with only when asked."""


class NoPreset(RecordError):
    """A usage mistake (exit 2, as click's): no preset given, and no folder that says which."""

    exit_code = 2


class RecordUsage(RecordError):
    """A usage mistake about the record (exit 2): a key both given and unset, a fit check both off and on."""

    exit_code = 2


BASE_IMAGE_KEY = "base_image"  # `--unset base_image`: the recorded --base-image


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
    project: str = ""  # the compose project of the folder (compose_project), for whoever runs compose by hand
    # With image.pin_digest: the image the pin stands for, as the folder's inputs tag it unpinned (repository:tag).
    # A render whose inputs tag another image drops the pin (kit/deploy/pipeline.py follow_pin).
    pinned_image: str | None = None

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
        if self.project:
            data["project"] = self.project
        if self.pinned_image:
            data["pinned_image"] = self.pinned_image
        return data

    def text(self) -> str:
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
    allow_no_fit: bool = False  # this command only (`--allow-no-fit`)
    # Recorded: True `--always-allow-no-fit`, False `--check-fit`, None: as the folder has it
    record_allow_no_fit: bool | None = None
    unset: tuple[str, ...] = ()  # recorded overrides to drop (`--unset KEY`), or base_image
    replace: bool = False
    reset_overrides: bool = False
    accept_preset_change: bool = False
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


def compose_project(out_dir: Path) -> str:
    """The compose project of the stack in ``out_dir``: the folder's name (as compose's own default takes it) and a
    short hash of its real path, so two folders of one name (a/deploy, b/deploy) are two stacks, and the same folder
    reached through another path is the same one. Compose's rule: lowercase letters, digits, '_' and '-', starting
    with a letter or digit."""
    real = os.path.realpath(out_dir)
    base = re.sub(r"[^a-z0-9_-]", "", os.path.basename(real).lower()).lstrip("_-")[:40] or "vllm-kit"
    return f"{base}-{hashlib.sha256(real.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"


def file_sha256(path: Path) -> str:
    """The sha256 of a preset file, "" when it is not a regular file of at most preset_max_bytes (a FIFO or a device
    named by a record must not hang or fill the kit)."""
    try:
        return hashlib.sha256(read_capped(path, str(path), int(input_limits()["files"]["preset_max_bytes"]))
                              ).hexdigest()
    except KitError:
        return ""


def override_key(text: str) -> str:
    return text.partition("=")[0]


def override_value(overrides: tuple[str, ...] | list[str], key: str) -> str | None:
    """The value ``overrides`` give ``key`` (the last one), or None when they do not set it."""
    found = [text.partition("=")[2] for text in overrides if override_key(text) == key]
    return found[-1] if found else None


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
    if looks_like_model_path(model):
        import posixpath

        if posixpath.basename(model) == "config.json":  # the model's config.json names its folder
            folder = posixpath.dirname(model)
            model = folder + "/" if folder in (".", "..", "~") else folder
        where = (f"model.host_path={model}", f"model.id={model_name_for_path(model)}")
    else:
        where = (f"model.id={model}", "model.host_path=null")
    return (*where, "model.generate=null", "model.served_model_name=null")


def _union(old: tuple[str, ...], add: tuple[str, ...], drop: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(name for name in dict.fromkeys((*old, *add)) if name not in drop)


def read_record(out_dir: Path) -> Record | None:
    """The folder's record, or None when the folder has none (never rendered, or rendered before records). A
    record larger than input_limits.yaml's record_max_bytes is refused before it is parsed."""
    path = out_dir / RECORD_FILE
    where = str(path)
    try:
        if path.is_symlink() or not path.is_file():
            return None
    except OSError as error:
        raise RecordError(f"{path}: cannot be read ({error})") from None
    limit = int(input_limits()["files"]["record_max_bytes"])
    text = decode_utf8(read_capped(path, where, limit, error=RecordError, what="deployment record"), where,
                       error=RecordError)
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
    pinned = data.get("pinned_image")
    if pinned is not None and not isinstance(pinned, str):
        raise RecordError(f"{where}: pinned_image: a string")
    return Record(preset=ref, preset_name=name, preset_sha256=str(preset.get("sha256") or ""),
                  overrides=strings("overrides"), with_profiles=strings("with"), with_presets=strings("with_presets"),
                  target=target, base_image=base, allow_no_fit=bool(data.get("allow_no_fit", False)),
                  kit_version=str(data.get("kit_version", "")), project=str(data.get("project") or ""),
                  pinned_image=pinned)


def recorded_ref_path(record: Record, out_dir: Path) -> str:
    """The recorded preset as load_preset takes it from the current directory. A name is a shipped preset's (the
    kit records any other by its path), so it is the shipped file even where ./presets holds one of that name."""
    if not _is_path(record.preset):
        return str(PRESETS_DIR / f"{record.preset}.yaml")
    if not os.path.isabs(record.preset):
        return os.path.normpath(os.path.join(out_dir, record.preset))
    return record.preset


def recorded_path_problem(record: Record, out_dir: Path) -> str | None:
    """Why the recorded preset may not be read, or None: a path the record names must lie (links resolved) in the
    folder itself, the shipped presets, or a presets folder of the user's: ./presets, ~/.config/vllm-kit/presets, or
    the presets/ folder beside the deployment folder (a project's presets/ and deploy/, rendered from its root). A
    record copied from elsewhere must not make a render read any other file of this host as a preset."""
    if not _is_path(record.preset):
        return None  # a shipped preset's name
    target = os.path.realpath(recorded_ref_path(record, out_dir))
    beside = Path(os.path.realpath(out_dir)).parent / PROJECT_FOLDER
    for folder in (out_dir, beside, *(folder for _, folder in preset_folders())):
        real = os.path.realpath(folder)
        if os.path.commonpath([target, real]) == real:
            return None
    return (f"{record.preset} resolves to {target}, outside this folder, the shipped presets and your presets "
            "folders (./presets, ../presets beside this folder, ~/.config/vllm-kit/presets)")


def preset_change(record: Record, out_dir: Path) -> str | None:
    """The change to the recorded user preset since the render, as a unified diff against the copy the render kept
    (or a line saying only the sha256 differs), or None when it is unchanged. Shipped presets change with the kit."""
    import difflib

    if not _is_path(record.preset) or not record.preset_sha256:
        return None
    found = recorded_preset_file(record, out_dir)
    if found is None or file_sha256(found) == record.preset_sha256:
        return None
    limit = int(input_limits()["files"]["preset_max_bytes"])
    try:
        before = read_capped(out_dir / PRESET_COPY, PRESET_COPY, limit).decode("utf-8", "replace")
        after = read_capped(found, str(found), limit).decode("utf-8", "replace")
    except KitError:
        return f"sha256 {file_sha256(found)[:12]}, the record says {record.preset_sha256[:12]} (no copy to compare)"
    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), "as rendered", "now", lineterm=""))
    return "\n".join(lines[:80] + ([f"... ({len(lines) - 80} more lines)"] if len(lines) > 80 else []))


def _is_path(ref: str) -> bool:
    return "/" in ref or ref.endswith((".yaml", ".yml"))


def _ref_for_record(path: Path, name: str, out_dir: Path) -> str:
    """A shipped preset by name; the user's own by its path relative to the folder (it moves with it)."""
    resolved = path.resolve()
    if resolved.parent == PRESETS_DIR.resolve():
        return name
    try:
        return os.path.relpath(resolved, out_dir.resolve())
    except ValueError:
        return str(resolved)


def resolve(request: Request, out_dir: Path | None) -> Resolved:
    """The inputs for a command: the request, merged with the folder's record when there is one."""
    recorded = read_record(out_dir) if out_dir is not None and out_dir.is_dir() else None
    fresh = recorded is None or request.replace
    if request.preset is None and fresh:
        if request.replace:
            raise NoPreset("--replace: give the preset to render here instead (preset=NAME)")
        where = f" and {out_dir} holds no deployment ({RECORD_FILE})" if out_dir is not None else ""
        raise NoPreset(f"no preset given{where}",
                          hint="pass preset=NAME (see `kit presets`), or --out DIR of a rendered deployment")
    if request.record_allow_no_fit is not None and request.allow_no_fit and not request.record_allow_no_fit:
        raise RecordUsage("--check-fit and --allow-no-fit: the fit check is either on or off for this command")
    given_twice = sorted({override_key(o) for o in request.overrides} & set(request.unset))
    if given_twice:
        raise RecordUsage(f"--unset {given_twice[0]} and {given_twice[0]}=...: give one")
    if not fresh and request.preset is not None:
        assert recorded is not None and out_dir is not None
        given = find_preset(request.preset).resolve()
        found = recorded_preset_file(recorded, out_dir)
        before = found.resolve() if found is not None else None
        # The recorded file is gone (the folder or the preset moved): the same preset found again is re-pointed,
        # its overrides kept. The same preset: the recorded name, or the very text recorded.
        moved = found is None and (given.stem == recorded.preset_name or file_sha256(given) == recorded.preset_sha256)
        if before != given and not moved:
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
        allow_recorded = bool(request.record_allow_no_fit)
        if request.unset:
            raise RecordError(f"--unset {request.unset[0]}: nothing is recorded here to unset",
                              hint="--unset drops an override a deployment folder recorded (kit status --out DIR "
                                   "lists them)")
    else:
        assert recorded is not None and out_dir is not None
        if request.preset is None:
            _check_recorded_preset(recorded, out_dir, request.accept_preset_change)
        ref = recorded_ref_path(recorded, out_dir) if request.preset is None else request.preset
        _unknown_drops(request.without, (*recorded.with_profiles, *recorded.with_presets, *request.with_profiles,
                                         *request.with_presets))
        _unknown_unsets(request.unset, recorded)
        kept = () if request.reset_overrides else tuple(o for o in recorded.overrides
                                                         if override_key(o) not in request.unset)
        overrides = merge_overrides(kept, (*request.overrides, *request.derived))
        profiles = _union(recorded.with_profiles, request.with_profiles, request.without)
        companions = _union(recorded.with_presets, request.with_presets, request.without)
        target = request.target or recorded.target
        base_image = (request.base_image if request.base_image is not None
                      else None if BASE_IMAGE_KEY in request.unset else recorded.base_image)
        allow_recorded = (recorded.allow_no_fit if request.record_allow_no_fit is None
                          else request.record_allow_no_fit)
    allow = request.allow_no_fit or allow_recorded
    path = find_preset(ref)
    name = path.stem
    record = Record(preset=_ref_for_record(path, name, out_dir or Path(".")), preset_name=name,
                    preset_sha256=file_sha256(path), overrides=overrides, with_profiles=profiles,
                    with_presets=companions, target=target, base_image=base_image, allow_no_fit=allow_recorded,
                    project=compose_project(out_dir) if out_dir is not None else "")
    return Resolved(ref=ref, overrides=list(overrides), with_profiles=list(profiles), with_presets=list(companions),
                    target=target, base_image=base_image, allow_no_fit=allow, record=record, recorded=recorded)


def _check_recorded_preset(recorded: Record, out_dir: Path, accept_change: bool) -> None:
    where = f"{out_dir / RECORD_FILE}: preset.ref"
    problem = recorded_path_problem(recorded, out_dir)
    found = recorded_preset_file(recorded, out_dir) if problem else None
    # A preset elsewhere is read only while it is the very file rendered (its sha256 as recorded): a record that
    # names another file of this host gets nothing read from it.
    if problem and (found is None or not recorded.preset_sha256 or file_sha256(found) != recorded.preset_sha256):
        # Your own preset kept beside the folder and edited since looks the same as a record pointed elsewhere: the
        # way on names the file on the command line, which keeps what the folder records (--replace would drop it).
        raise RecordError(f"{where}: {problem}, and it is not the file this folder was rendered from (sha256: "
                          "another file, or yours edited since)",
                          hint="if it is your preset, edited: name it on the command line (preset=PATH; the folder's "
                               "recorded overrides, add-ons and base image carry over), or move it into one of those "
                               "folders")
    change = preset_change(recorded, out_dir)
    if change and not accept_change:
        raise PresetChanged(f"{out_dir / RECORD_FILE}: preset.sha256: {recorded.preset} changed since this folder "
                            "was rendered from it:", detail=change.splitlines(),
                            hint="--accept-preset-change renders it as it is now (and records its new sha256)")


def recorded_preset_file(record: Record, out_dir: Path) -> Path | None:
    """The recorded preset's file, or None when it no longer resolves."""
    try:
        return find_preset(recorded_ref_path(record, out_dir))
    except PresetError:
        return None


def _unknown_unsets(unset: tuple[str, ...], recorded: Record) -> None:
    present = [override_key(o) for o in recorded.overrides] + ([BASE_IMAGE_KEY] if recorded.base_image else [])
    unknown = [key for key in unset if key not in present]
    if unknown:
        raise RecordError(f"--unset {unknown[0]}: this deployment records no such override",
                          problems=[Problem(f"--unset {key}", "not recorded in this deployment",
                                            f"it records: {', '.join(present) or 'none'}") for key in unknown])


def target_switch_refusal(out_dir: Path, recorded: Record | None, target: str,
                          running: list[dict[str, Any]]) -> RecordError | None:
    """Why a render may not switch the folder from compose to another target now, or None. ``running`` is the
    probe's answer (kit/run/ops.py running_services: the folder's containers that run): the switch removes
    compose.yaml, after which nothing of the kit stops what still runs from it."""
    if recorded is None or recorded.target != "compose" or target == "compose" or not running:
        return None
    import shlex

    names = ", ".join(sorted({f"{r.get('service')} ({r.get('project')})" for r in running}))
    return RecordError(f"{out_dir}: --target {target}: the compose stack of this folder is running ({names}); the "
                       "switch would remove compose.yaml, the one file that stops it",
                       hint=f"stop it first: kit down --out {shlex.quote(str(out_dir))}, then render --target "
                            f"{target} again")


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
        import shlex

        diff = f"kit render --out {shlex.quote(str(out_dir))} --diff"  # the folder asked about, as typed to run
        rows.append(("preset file", "unchanged since the render" if now == record.preset_sha256
                     else f"changed since the render: `{diff}` shows what a render would change"))
    else:
        rows.append(("preset file", "missing: the recorded preset no longer resolves"))
    rows.append(("overrides", " ".join(record.overrides) or "none"))
    rows.append(("add-ons", ", ".join(record.with_profiles) or "none"))
    if record.with_presets:
        rows.append(("beside", ", ".join(record.with_presets)))
    rows.append(("target", record.target))
    if record.target == "compose":
        rows.append(("compose project", compose_project(out_dir)))
    if record.base_image:
        rows.append(("base image", record.base_image))
    if record.allow_no_fit:
        rows.append(("allow no fit", "yes, recorded (--always-allow-no-fit): --check-fit turns the check back on"))
    rows.append(("rendered by", f"vllm-kit {record.kit_version}"))
    return rows


def edited_files(out_dir: Path) -> list[str]:
    """Files the kit wrote into ``out_dir`` that differ from what it wrote (its manifest's sha256), or are gone."""
    edited = []
    for rel, digest in sorted(read_manifest(out_dir).items()):
        data = _read_regular(out_dir / rel)
        if data is None:
            edited.append(f"{rel} (missing)")
        elif sha256_bytes(data) != digest:
            edited.append(rel)
    return edited
