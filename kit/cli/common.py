"""What every command shares: preset arguments, output helpers."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import click

from kit.errors import KitError, one_line
from kit.inputfiles import NUMBER_MAX


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange, refusing nan and inf: nan compares false, so it slips through any range check."""

    def convert(self, value, param, ctx):  # noqa: ANN001, ANN201 - click's signature
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def count_option_type(minimum: int = 1) -> click.IntRange:
    """A whole-number option: at least ``minimum``, at most NUMBER_MAX (a usage error otherwise)."""
    return click.IntRange(min=minimum, max=NUMBER_MAX)


def split_args(args: tuple[str, ...], preset_option: str | None, *, extra_keys: tuple[str, ...] = ()) -> tuple[
    str | None, list[str], dict[str, str]
]:
    """Split ``preset=NAME KEY=VALUE ...`` into (preset ref, overrides, extras like model=...)."""
    preset = preset_option
    overrides: list[str] = []
    extras: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise click.UsageError(f"{arg!r}: expected preset=NAME or SECTION.FIELD=VALUE")
        if key == "preset":
            if preset is not None and preset != value:
                raise click.UsageError("the preset is given twice (preset= and --preset)")
            preset = value
        elif key in extra_keys:
            extras[key] = value
        elif "." not in key:
            raise click.UsageError(
                f"{arg!r}: overrides name a field by its dotted path, e.g. engine.max_model_len=16384"
            )
        else:
            overrides.append(arg)
    return preset, overrides, extras


def require_preset(preset: str | None) -> str:
    if not preset:
        raise click.UsageError("no preset: pass preset=NAME (see `kit presets`)")
    return preset


def status(message: str) -> None:
    """Status and progress go to stderr; data goes to stdout."""
    click.echo(message, err=True)


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def fail(error: KitError) -> None:
    for line in error.lines():
        click.secho(line, fg="red", err=True)
    if error.hint:
        click.echo(one_line(f"hint: {error.hint}"), err=True)


def preset_arguments(func):  # noqa: ANN001 - click decorator
    """`preset=NAME KEY=VALUE ...` positional arguments plus --preset."""
    func = click.argument("args", nargs=-1)(func)
    func = click.option("--preset", "preset_option", metavar="NAME", help="Preset name or path (same as preset=NAME).")(func)
    return func


def stdout_is_tty() -> bool:
    return sys.stdout.isatty()
