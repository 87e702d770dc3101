"""`kit presets` (one line each), `kit presets show NAME` (resolved YAML), `kit gpus` (the catalog)."""

from __future__ import annotations

from pathlib import Path

import click

from kit.cli.common import PRESET_ARGS_METAVAR, SubGroup, emit_json, split_args, standard_options, status
from kit.cli.completion import complete_preset_args


@click.group(cls=SubGroup, invoke_without_command=True)
@standard_options
@click.pass_context
def presets(ctx: click.Context, as_json: bool) -> None:
    """List the presets, one line each.

    Every preset `preset=NAME` finds, with where it is (``origin``): ``project`` (./presets), ``user``
    ($XDG_CONFIG_HOME/vllm-kit/presets, else ~/.config/vllm-kit/presets) or ``shipped``, looked up in that order.
    A user's preset that shadows another of the same name says so; one that does not load says why.
    """
    if ctx.invoked_subcommand is not None:
        return
    from kit.config.preset_files import display_path
    from kit.config.presetload import load_preset
    from kit.config.preset_files import all_presets
    from kit.core.errors import KitError

    rows = []
    for entry in all_presets():
        row = {"name": entry.name, "origin": entry.origin, "file": str(entry.path),
               "shadows": list(entry.shadows), "hardware": None, "model": None, "vllm": None, "description": None,
               "error": None}
        try:
            _, _, preset = load_preset(str(entry.path))
        except KitError as error:  # a user's preset being written: listed, with its first problem
            row["error"] = error.lines()[0]
        else:
            hw = preset.hardware
            row.update(hardware=f"{hw.count}x {hw.gpu}" if hw.gpu else "cpu", model=preset.model.id,
                       vllm=preset.image.vllm_version, description=preset.description)
        rows.append(row)
    if as_json:
        emit_json(rows)
        return
    from kit.cli.output import table

    def origin(row: dict) -> str:
        return row["origin"] + (f" (shadows {', '.join(row['shadows'])})" if row["shadows"] else "")

    table(("preset", "origin", "hardware", "vLLM", "model"),
          [(r["name"], origin(r), r["hardware"] or "-", r["vllm"] or "-", r["model"] or f"invalid: {r['error']}")
           for r in rows],
          styles={"preset": "bold"})
    for r in rows:
        if r["shadows"]:
            status(f"note: preset={r['name']} is {display_path(Path(str(r['file'])))} ({r['origin']}), not the "
                   f"{' or '.join(r['shadows'])} preset of that name")


@presets.command()
@click.argument("args", nargs=-1, metavar=PRESET_ARGS_METAVAR, shell_complete=complete_preset_args)
@standard_options
def show(args: tuple[str, ...], as_json: bool) -> None:
    """Print a preset resolved: defaults filled in, overrides applied: kit presets show preset=NAME [KEY=VALUE ...]."""

    from kit.config.presetload import load_preset

    # A bare first word is the preset name, as this command took it before preset=NAME: kept working, with a
    # warning, so every command spells the preset the same way.
    warnings = []
    if args and "=" not in args[0]:
        warnings.append(f"`kit presets show {args[0]}` is deprecated: use `kit presets show preset={args[0]}`")
        if not as_json:
            click.secho(f"warning: {warnings[-1]}", fg="yellow", err=True)
        args = (f"preset={args[0]}", *args[1:])
    ref, overrides, _ = split_args(args, None)
    if not ref:
        raise click.UsageError("no preset: kit presets show preset=NAME")
    _, path, preset = load_preset(ref, overrides)
    data = preset.model_dump(mode="json", exclude_none=True)
    if as_json:
        emit_json({"preset": ref, "file": str(path), "resolved": data}, warnings=warnings)
        return
    from kit.core.yamlwrite import yaml_text

    click.echo(yaml_text(data), nl=False)


@click.command()
@standard_options
def gpus(as_json: bool) -> None:
    """List the GPU catalog: memory as CUDA reports it, compute capability."""
    from kit.core.datafiles import gpu_catalog

    catalog = gpu_catalog()
    if as_json:
        emit_json(catalog)
        return
    from kit.cli.output import table

    table(("gpu", "memory GiB", "cc", "name"),
          [(key, f"{g['memory_gib']:.2f}", g["compute_capability"], g["name"]) for key, g in catalog.items()],
          right=("memory GiB",), styles={"gpu": "bold"})
