"""`kit validate`: exit 0, or 1 with every problem listed."""

from __future__ import annotations

import click

from kit.cli.common import emit_json, preset_arguments, require_preset, split_args, standard_options


@click.command()
@preset_arguments
@standard_options
def validate(args: tuple[str, ...], preset_option: str | None, as_json: bool) -> None:
    """Check a preset: kit validate preset=NAME [KEY=VALUE ...]."""
    from kit.deploy.pipeline import load_and_check

    ref, overrides, _ = split_args(args, preset_option)
    # Invalid presets raise KitError: the root group prints every problem (with --json, in the envelope).
    name, path, _, report = load_and_check(require_preset(ref), overrides)
    if as_json:
        emit_json({"preset": name, "file": str(path)}, warnings=[str(w) for w in report.warnings])
        return
    for warning in report.warnings:
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    click.echo(f"{path}: ok")
