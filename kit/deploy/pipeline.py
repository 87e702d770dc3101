"""The one-way flow in one place: load -> check -> plan deployment -> render (no writes here)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from kit.config.preset import Preset, blame_overrides, display_path, load_preset
from kit.config.preset_files import is_shipped
from kit.core.errors import PresetError, Problem
from kit.core.safevalue import UnsafeValue
from kit.deploy.checks import CheckReport, check_preset
from kit.deploy.deployment import (
    FETCH_FILE,
    BUILD_FILES,
    Deployment,
    plan_deployment,
    side_by_side_preset,
    side_by_side_problems,
)
from kit.deploy.profiles import check_profiles
from kit.deploy.record import Resolved
from kit.deploy.render import Companion, image_ref_for, render


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

    @property
    def image_ref(self) -> str:
        files = self.files
        return image_ref_for(self.deployment, files["Dockerfile"], files["requirements.txt"], files[FETCH_FILE],
                            *(files[name] for name in BUILD_FILES if name in files))


def load_and_check(ref: str, overrides: list[str] | None = None, *, allow_no_fit: bool = False,
                   target: str = "compose") -> tuple[str, Path, Preset, CheckReport]:
    name, path, preset = load_preset(ref, overrides)
    report = check_preset(name, path, preset, allow_no_fit=allow_no_fit, target=target)
    where = display_path(path)
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
            with_profiles: list[str] | None = None) -> Prepared:
    """``allow_no_fit``: a plan that does not fit is a warning, not an error (`--allow-no-fit`)."""
    name, path, preset, report = load_and_check(ref, overrides, allow_no_fit=allow_no_fit, target=target)
    profiles = check_profiles(list(with_profiles or []))
    if "webui" in profiles:
        from kit.deploy.webui import webui_exposure

        report.warnings += blame_overrides(webui_exposure(display_path(path), preset), display_path(path), overrides)
    try:
        deployment = plan_deployment(name, preset, base_image=base_image, preset_shipped=is_shipped(path))
        companions = companions_for(deployment, list(with_presets or []), base_image=base_image,
                                    allow_no_fit=allow_no_fit)
        if companions and preset.runtime.replicas > 1:
            raise PresetError(f"{display_path(path)}: runtime.replicas: --with-preset and replicas behind a router "
                              "are not combined yet", hint="render the replicated preset on its own")
        if companions and (target != "compose" or deployment.serve.cluster is not None):
            raise PresetError("--with-preset: side-by-side servers need the compose target of a one-node preset")
        if profiles and preset.runtime.replicas > 1:
            raise PresetError(f"{display_path(path)}: runtime.replicas: --with {profiles[0]} and replicas behind a "
                              "router are not combined yet", hint="render the replicated preset on its own")
        if profiles and target != "compose":
            raise PresetError(f"--with {profiles[0]}: profiles add compose services; --target {target} has none")
        files = render(deployment, plan_lines=report.plan_lines, target=target, plan=report.plan,
                       companions=tuple(Companion(c.deployment, c.report.plan_lines) for c in companions),
                       profiles=profiles)
    except UnsafeValue as exc:  # validation applies the same rules; this catches --base-image and derived values
        raise PresetError(f"{display_path(path)}: {exc}") from None
    return Prepared(name, path, preset, report, deployment, files,
                    tuple(replace(c, files=files) for c in companions))


def prepare_resolved(resolved: Resolved) -> Prepared:
    """``prepare`` with what a command resolved against its folder's record; the files include the record."""
    from kit.deploy.record import RECORD_FILE

    prepared = prepare(resolved.ref, resolved.overrides, base_image=resolved.base_image,
                       allow_no_fit=resolved.allow_no_fit, target=resolved.target,
                       with_presets=resolved.with_presets, with_profiles=resolved.with_profiles)
    return replace(prepared, files={**prepared.files, RECORD_FILE: resolved.record.text()})
