"""`kit validate`: exit 0, or 1 with every problem listed."""

from __future__ import annotations

import click

from kit.cli.common import preset_arguments, print_json, require_preset, split_args
from kit.errors import KitError
from kit.pipeline import load_and_check


@click.command()
@preset_arguments
@click.option("--json", "as_json", is_flag=True, help="Print problems as JSON.")
def validate(args: tuple[str, ...], preset_option: str | None, as_json: bool) -> None:
    """Check a preset: kit validate preset=NAME [KEY=VALUE ...]."""
    ref, overrides, _ = split_args(args, preset_option)
    try:
        name, path, _, report = load_and_check(require_preset(ref), overrides)
    except KitError as error:
        if not as_json:
            raise
        print_json({"ok": False, "problems": error.lines()})
        raise SystemExit(1) from None
    if as_json:
        print_json({"ok": True, "preset": name, "warnings": [str(w) for w in report.warnings]})
        return
    for warning in report.warnings:
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    click.echo(f"{path}: ok")
