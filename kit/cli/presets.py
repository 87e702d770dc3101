"""`kit presets` (one line each), `kit presets show NAME` (resolved YAML), `kit gpus` (the catalog)."""

from __future__ import annotations

import click

from kit.cli.common import PRESET_ARGS_METAVAR, SubGroup, emit_json, split_args, standard_options
from kit.cli.completion import complete_preset_args


@click.group(cls=SubGroup, invoke_without_command=True)
@standard_options
@click.pass_context
def presets(ctx: click.Context, as_json: bool) -> None:
    """List the presets, one line each."""
    if ctx.invoked_subcommand is not None:
        return
    from kit.config.preset import load_preset, preset_names

    rows = []
    for name in preset_names():
        _, _, preset = load_preset(name)
        hw = preset.hardware
        hardware = f"{hw.count}x {hw.gpu}" if hw.gpu else "cpu"
        rows.append({"name": name, "hardware": hardware, "model": preset.model.id,
                     "vllm": preset.image.vllm_version, "description": preset.description})
    if as_json:
        emit_json(rows)
        return
    from kit.cli.output import table

    table(("preset", "hardware", "vLLM", "model"), [(r["name"], r["hardware"], r["vllm"], r["model"]) for r in rows],
          styles={"preset": "bold"})


@presets.command()
@click.argument("args", nargs=-1, metavar=PRESET_ARGS_METAVAR, shell_complete=complete_preset_args)
@standard_options
def show(args: tuple[str, ...], as_json: bool) -> None:
    """Print a preset resolved: defaults filled in, overrides applied: kit presets show preset=NAME [KEY=VALUE ...]."""
    import yaml

    from kit.config.preset import load_preset

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
    click.echo(yaml.safe_dump(data, sort_keys=False), nl=False)


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
