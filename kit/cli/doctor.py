"""`kit doctor [preset=NAME] [--json]`: is this host ready to run a preset?"""

from __future__ import annotations

import click

from pathlib import Path

from kit.cli.common import (
    PathOption,
    emit_json,
    preset_arguments,
    problem_json,
    resolve_deployment,
    split_args,
    standard_options,
)

STATUS_COLOURS = {"pass": "green", "warn": "yellow", "fail": "red"}


@click.command()
@preset_arguments
@click.option("--out", "out_dir", type=PathOption(folder=True), default=None,
              help="A deployment folder: its preset, and its image as this Docker engine has it, are checked.")
@standard_options
def doctor(args: tuple[str, ...], preset_option: str | None, out_dir: Path | None, as_json: bool) -> None:
    """Check this host: Docker, Compose, the NVIDIA runtime and driver, GPUs, shm, disk, HF cache."""
    from kit.config.preset_files import display_path
    from kit.config.presetload import load_preset
    from kit.core.errors import KitError
    from kit.deploy.pipeline import prepare, prepare_resolved
    from kit.host.doctor import FAIL, diagnose, gather_facts, image_cuda_matters, report_json

    ref, overrides, _ = split_args(args, preset_option)
    preset, where, image_ref, image_unknown = None, "preset", None, ""
    if out_dir is not None:  # the folder's record, as every command with --out reads it; its fit is doctor's to check
        prepared = prepare_resolved(resolve_deployment(args, preset_option, out_dir, allow_no_fit=True))
        preset, where = prepared.preset, display_path(prepared.path)
        image_ref = prepared.image_ref if image_cuda_matters(preset) else None
    elif ref:
        _, path, preset = load_preset(ref, overrides)
        where = display_path(path)
        if image_cuda_matters(preset):
            try:  # the image this preset renders to (a pure render), whose labels say what its wheels need
                image_ref = prepare(ref, overrides, allow_no_fit=True).image_ref
            except KitError as error:
                image_unknown = f"the preset does not render: {error.message}"
    checks = diagnose(preset, where, gather_facts(image_ref, image_unknown))
    report = report_json(checks)
    if as_json:  # data: {checks: [{name, status, detail, fix}], ok}; failed checks are the problems
        emit_json(report, ok=report["ok"],
                  problems=[problem_json(None, f"{c.name}: {c.detail}", c.fix) for c in checks if c.status == FAIL],
                  warnings=[f"{c.name}: {c.detail}" for c in checks if c.status == "warn"])
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            label = click.style(f"{c.status:<4}", fg=STATUS_COLOURS.get(c.status))
            click.echo(f"{label}  {c.name:<{width}}  {c.detail}")
            if c.fix and c.status != "pass":
                click.echo(f"      {'':<{width}}  fix: {c.fix}")
    if not report["ok"]:
        failed = sum(c.status == FAIL for c in checks)
        if not as_json:
            click.secho(f"{failed} check(s) failed", fg="red", err=True)
        raise SystemExit(1)
