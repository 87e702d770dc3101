"""`kit doctor [preset=NAME] [--json]`: is this host ready to run a preset?"""

from __future__ import annotations

import click

from kit.cli.common import emit_json, preset_arguments, problem_json, split_args, standard_options

STATUS_COLOURS = {"pass": "green", "warn": "yellow", "fail": "red"}


@click.command()
@preset_arguments
@standard_options
def doctor(args: tuple[str, ...], preset_option: str | None, as_json: bool) -> None:
    """Check this host: Docker, Compose, the NVIDIA runtime and driver, GPUs, shm, disk, HF cache."""
    from kit.config.preset import display_path, load_preset
    from kit.host.doctor import FAIL, diagnose, report_json

    ref, overrides, _ = split_args(args, preset_option)
    preset, where = None, "preset"
    if ref:
        _, path, preset = load_preset(ref, overrides)
        where = display_path(path)
    checks = diagnose(preset, where)
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
