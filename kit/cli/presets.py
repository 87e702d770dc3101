"""`kit presets` (one line each), `kit presets show NAME` (resolved YAML), `kit gpus` (the catalog)."""

from __future__ import annotations

import click
import yaml

from kit.cli.common import print_json
from kit.datafiles import gpu_catalog
from kit.preset import load_preset, preset_names


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.pass_context
def presets(ctx: click.Context, as_json: bool) -> None:
    """List the presets, one line each."""
    if ctx.invoked_subcommand is not None:
        return
    rows = []
    for name in preset_names():
        _, _, preset = load_preset(name)
        hw = preset.hardware
        hardware = f"{hw.count}x {hw.gpu}" if hw.gpu else "cpu"
        rows.append({"name": name, "hardware": hardware, "model": preset.model.id,
                     "vllm": preset.image.vllm_version, "description": preset.description})
    if as_json:
        print_json(rows)
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        click.echo(f"{r['name']:<{width}}  {r['hardware']:<16} vLLM {r['vllm']:<8} {r['model']}")


@presets.command()
@click.argument("name")
@click.argument("overrides", nargs=-1)
def show(name: str, overrides: tuple[str, ...]) -> None:
    """Print a preset resolved: defaults filled in, overrides applied."""
    _, _, preset = load_preset(name, list(overrides))
    data = preset.model_dump(mode="json", exclude_none=True)
    click.echo(yaml.safe_dump(data, sort_keys=False), nl=False)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def gpus(as_json: bool) -> None:
    """List the GPU catalog: memory as CUDA reports it, compute capability."""
    catalog = gpu_catalog()
    if as_json:
        print_json(catalog)
        return
    for key, g in catalog.items():
        click.echo(f"{key:<22} {g['memory_gib']:>7.2f} GiB  cc {g['compute_capability']:<4} {g['name']}")
