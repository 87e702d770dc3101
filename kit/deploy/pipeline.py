"""The one-way flow in one place: load -> check -> plan deployment -> render (no writes here)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from kit.config.overrides import blame_overrides
from kit.config.preset import Preset
from kit.config.preset_files import display_path
from kit.config.presetload import load_preset
from kit.config.preset_files import is_shipped
from kit.core.errors import KitError, PresetError, Problem
from kit.core.inputfiles import input_limits, read_capped
from kit.core.safevalue import UnsafeValue
from kit.deploy.checks import CheckReport, check_preset
from kit.deploy.deployment import (
    Deployment,
    plan_deployment,
    side_by_side_preset,
    side_by_side_problems,
)
from kit.deploy.profiles import check_profiles
from kit.deploy.record import PRESET_COPY, RECORD_FILE, Resolved, override_key, override_value
from kit.deploy.render import Companion, image_inputs, image_ref_for, render
from kit.deploy.webui import webui_exposure


@dataclass(frozen=True)
class Prepared:
    name: str
    path: Path
    preset: Preset
    report: CheckReport
    deployment: Deployment
    files: dict[str, str]
    # Presets whose servers run beside this one (--with-preset), each with the stack's files
    companions: tuple[Prepared, ...] = ()
    # The image.pin_digest this render dropped because its inputs tag another image than the pinned one
    dropped_pin: str | None = None
    # What prepare_resolved rendered with (the record it writes), after follow_pin
    resolved: Resolved | None = None

    @property
    def image_ref(self) -> str:
        return image_ref_for(self.deployment, *image_inputs(self.files))


def load_and_check(ref: str, overrides: list[str] | None = None, *, allow_no_fit: bool = False,
                   target: str = "compose") -> tuple[str, Path, Preset, CheckReport]:
    name, path, preset = load_preset(ref, overrides)
    where = display_path(path)
    try:
        report = check_preset(name, path, preset, allow_no_fit=allow_no_fit, target=target)
    except KitError as error:  # one that stops the checks (the planner's): named as the override too
        if not error.problems:
            raise
        raise PresetError(f"{path}: preset has problems", hint=error.hint,
                          problems=blame_overrides(error.problems, where, overrides)) from None
    report.errors = blame_overrides(report.errors, where, overrides)  # a value typed on the command line is
    report.warnings = blame_overrides(report.warnings, where, overrides)  # named as the override, not the file
    if report.errors:
        raise PresetError(f"{path}: preset has problems", problems=report.errors)
    return name, path, preset, report


def companions_for(primary: Deployment, refs: list[str], *, base_image: str | None,
                   allow_no_fit: bool) -> list[Prepared]:
    """The presets that run beside ``primary`` in its compose stack, checked to fit there (one image, own port).
    Their ``files`` are filled in by ``prepare`` (the stack's)."""
    companions: list[Prepared] = []
    for ref in refs:
        name, path, preset, report = load_and_check(ref, allow_no_fit=allow_no_fit)
        where = display_path(path)
        if name == primary.preset_name or any(c.name == name for c in companions):
            raise PresetError(f"--with-preset {ref}: {name} is already in this stack")
        preset = side_by_side_preset(primary.preset, preset, name)
        d = plan_deployment(name, preset, base_image=base_image, preset_shipped=is_shipped(path))
        problems = side_by_side_problems(primary, d, where)
        if problems:
            raise PresetError(f"{where}: cannot run beside {primary.preset_name}",
                              problems=[Problem(f"{where}: {f}", message) for f, message in problems])
        # It runs on the primary's image: same inputs (checked above), so the same tag.
        d = replace(d, image=replace(d.image, image_repository=primary.image.image_repository))
        companions.append(Prepared(name, path, preset, report, d, {}))
    return companions


def prepare(ref: str, overrides: list[str] | None = None, *, base_image: str | None = None,
            allow_no_fit: bool = False, target: str = "compose", with_presets: list[str] | None = None,
            with_profiles: list[str] | None = None, project: str = "") -> Prepared:
    """``allow_no_fit``: a plan that does not fit is a warning, not an error (`--allow-no-fit`). ``project``: the
    folder's compose project, written as the compose files' top-level name."""
    name, path, preset, report = load_and_check(ref, overrides, allow_no_fit=allow_no_fit, target=target)
    profiles = check_profiles(list(with_profiles or []))
    if "webui" in profiles:
        report.warnings += blame_overrides(webui_exposure(display_path(path), preset), display_path(path), overrides)
    try:
        deployment = plan_deployment(name, preset, base_image=base_image, preset_shipped=is_shipped(path))
        companions = companions_for(deployment, list(with_presets or []), base_image=base_image,
                                    allow_no_fit=allow_no_fit)
        if companions and (target != "compose" or deployment.serve.cluster is not None):
            raise PresetError("--with-preset: side-by-side servers need the compose target of a one-node preset")
        if profiles and target != "compose":
            raise PresetError(f"--with {profiles[0]}: profiles add compose services; --target {target} has none")
        files = render(deployment, plan_lines=report.plan_lines, target=target, plan=report.plan,
                       companions=tuple(Companion(c.deployment, c.report.plan_lines) for c in companions),
                       profiles=profiles, project=project)
    except UnsafeValue as exc:  # validation applies the same rules; this catches --base-image and derived values
        raise PresetError(f"{display_path(path)}: {exc}") from None
    return Prepared(name, path, preset, report, deployment, files,
                    tuple(replace(c, files=files) for c in companions))


PIN_FIELD = "image.pin_digest"


def _prepare_with(resolved: Resolved, overrides: list[str]) -> Prepared:
    return prepare(resolved.ref, overrides, base_image=resolved.base_image, allow_no_fit=resolved.allow_no_fit,
                   target=resolved.target, with_presets=resolved.with_presets, with_profiles=resolved.with_profiles,
                   project=resolved.record.project)


def _unpinned(overrides: list[str], pinned_in_preset: bool) -> list[str]:
    """The overrides without the pin: the recorded override goes, and a pin in the preset file is overridden."""
    kept = [text for text in overrides if override_key(text) != PIN_FIELD]
    return [*kept, f"{PIN_FIELD}=null"] if pinned_in_preset else kept


def follow_pin(resolved: Resolved, prepared: Prepared) -> tuple[Resolved, Prepared]:
    """A pinned deployment whose inputs now tag another image than the one pinned (another vLLM release, strategy,
    extra_pip, CUDA, base, or a changed preset file) no longer runs what it says: the pin goes (compose then builds
    the image here), and ``dropped_pin`` says which digest, so the command prints build, push and pin again.

    The pinned image is recorded as the folder's inputs tagged it unpinned when the pin was given (the record's
    ``pinned_image``); a pin given on this command line stands for this render's image."""
    pin = prepared.preset.image.pin_digest
    if pin is None:
        return replace(resolved, record=replace(resolved.record, pinned_image=None)), prepared
    in_preset = override_value(resolved.overrides, PIN_FIELD) is None
    unpinned_overrides = _unpinned(resolved.overrides, in_preset)
    unpinned = _prepare_with(resolved, unpinned_overrides)
    recorded = resolved.recorded
    recorded_pin = override_value(recorded.overrides, PIN_FIELD) if recorded is not None else None
    if recorded is None or recorded_pin != override_value(resolved.overrides, PIN_FIELD) or not recorded.pinned_image:
        pinned_image = unpinned.image_ref  # given now (or by a kit that did not record it): this render's image
    else:
        pinned_image = recorded.pinned_image
    if unpinned.image_ref == pinned_image:
        return replace(resolved, record=replace(resolved.record, pinned_image=pinned_image)), prepared
    where = f"override {PIN_FIELD}" if not in_preset else f"{display_path(prepared.path)}: {PIN_FIELD}"
    unpinned.report.warnings.append(Problem(
        where, f"dropped: {pin} is the image of {pinned_image}, and this deployment's inputs now build "
               f"{unpinned.image_ref}; compose builds that here until it is pushed and pinned again",
        "kit build, kit push, then the render with the new image.pin_digest that kit push prints"))
    record = replace(resolved.record, overrides=tuple(unpinned_overrides), pinned_image=None)
    return (replace(resolved, overrides=unpinned_overrides, record=record), replace(unpinned, dropped_pin=pin))


def prepare_resolved(resolved: Resolved) -> Prepared:
    """``prepare`` with what a command resolved against its folder's record; the files include the record."""
    resolved, prepared = follow_pin(resolved, _prepare_with(resolved, resolved.overrides))
    files = {**prepared.files, RECORD_FILE: resolved.record.text()}
    if resolved.record.preset != resolved.record.preset_name:  # the user's own preset: kept to show a change
        limit = int(input_limits()["files"]["preset_max_bytes"])
        files[PRESET_COPY] = read_capped(prepared.path, str(prepared.path), limit).decode("utf-8")
    return replace(prepared, files=files, resolved=resolved)
