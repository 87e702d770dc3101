"""The one-way flow in one place: load -> check -> plan deployment -> render (no writes here)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kit.checks import CheckReport, check_preset
from kit.deployment import Deployment, plan_deployment
from kit.errors import PresetError
from kit.preset import Preset, display_path, load_preset
from kit.render import image_ref_for, render
from kit.safevalue import UnsafeValue


@dataclass(frozen=True)
class Prepared:
    name: str
    path: Path
    preset: Preset
    report: CheckReport
    deployment: Deployment
    files: dict[str, str]

    @property
    def image_ref(self) -> str:
        return image_ref_for(self.deployment, self.files["Dockerfile"], self.files["requirements.txt"])


def load_and_check(ref: str, overrides: list[str] | None = None, *, force: bool = False,
                   target: str = "compose") -> tuple[str, Path, Preset, CheckReport]:
    name, path, preset = load_preset(ref, overrides)
    report = check_preset(name, path, preset, force=force, target=target)
    if report.errors:
        raise PresetError(f"{path}: preset has problems", problems=report.errors)
    return name, path, preset, report


def prepare(ref: str, overrides: list[str] | None = None, *, base_image: str | None = None,
            force: bool = False, target: str = "compose") -> Prepared:
    name, path, preset, report = load_and_check(ref, overrides, force=force, target=target)
    try:
        deployment = plan_deployment(name, preset, base_image=base_image)
        files = render(deployment, plan_lines=report.plan_lines, target=target, plan=report.plan)
    except UnsafeValue as exc:  # validation applies the same rules; this catches --base-image and derived values
        raise PresetError(f"{display_path(path)}: {exc}") from None
    return Prepared(name, path, preset, report, deployment, files)
