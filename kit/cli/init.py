"""`kit init NAME [--from PRESET]`: start a preset of your own in ./presets, as commented as the one it copies."""

from __future__ import annotations

import click

from kit.cli.common import emit_json, kit_command, standard_options, status
from kit.cli.completion import complete_preset_name


def _preset_name(ctx: click.Context, param: click.Parameter, value: str) -> str:  # noqa: ARG001 - click's
    from kit.config.preset_files import name_problem

    problem = name_problem(value)
    if problem:
        raise click.BadParameter(f"{value!r} {problem}")
    return value


@click.command()
@click.argument("name", callback=_preset_name)
@click.option("--from", "source", metavar="PRESET", default=None, shell_complete=complete_preset_name,
              help="The preset to start from: a name (kit presets) or a preset file; its comments come along "
                   "[default: the preset NAME finds now (a shipped one of that name), else cpu].")
@standard_options
def init(name: str, source: str | None, as_json: bool) -> None:
    """Write a preset of your own into ./presets/NAME.yaml: kit init NAME [--from PRESET].

    Without --from, NAME's own preset when the kit has one (`kit init rtx4090-awq` starts from the shipped
    rtx4090-awq, so preset=rtx4090-awq in this folder stays that deployment until you edit it), else cpu.
    A copy of the --from preset's text, comments and all, with its editor schema pointer aimed at
    ./presets/schema.json (written beside it: the JSON Schema of this kit's presets). `preset=NAME` then finds it
    from this folder: ./presets comes first, then your config folder ($XDG_CONFIG_HOME/vllm-kit/presets, else
    ~/.config/vllm-kit/presets), then the shipped presets. An existing ./presets/NAME.yaml is never overwritten.
    """
    from kit.config.init import init_preset

    made = init_preset(name, source)
    if as_json:
        emit_json({"preset": made.name, "file": str(made.path), "from": made.source, "schema": str(made.schema_path),
                   "schema_status": made.schema_status, "shadows": list(made.shadows)},
                  warnings=made.warnings)
        return
    click.echo(f"{click.style('create', fg='green')}  {made.path}")
    if made.schema_status != "identical":
        click.echo(f"{click.style(made.schema_status, fg='green' if made.schema_status == 'create' else 'yellow')}  "
                   f"{made.schema_path}")
    for warning in made.warnings:
        status(click.style(f"warning: {warning}", fg="yellow"))
    kit = kit_command()
    status(f"next: edit {made.path}, then `{kit} validate preset={made.name}` and "
           f"`{kit} render preset={made.name} --out DIR` (from this folder)")
