"""`kit fetch`: put the model into the stack's HF cache volume ahead of time (the model-fetch service)."""

from __future__ import annotations

from pathlib import Path

import click

from kit.cli.common import preset_arguments, require_preset, split_args, status
from kit.pipeline import prepare
from kit.stack import Stack
from kit.workflow import ensure_image, ensure_model, model_overrides, project_for, render_into


@click.command()
@preset_arguments
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("."), show_default=True)
@click.option("--wheelhouse", type=click.Path(path_type=Path), help="Offline build from this wheelhouse if the image is missing.")
@click.option("--base-image", metavar="REF")
def fetch(args: tuple[str, ...], preset_option: str | None, out_dir: Path, wheelhouse: Path | None,
          base_image: str | None) -> None:
    """Download the model into the HF cache volume (HF_ENDPOINT, HF_TOKEN from .env): kit fetch preset=NAME."""
    ref, overrides, extras = split_args(args, preset_option, extra_keys=("model",))
    prepared = prepare(require_preset(ref), overrides + model_overrides(extras.get("model")), base_image=base_image)
    render_into(prepared, out_dir)
    ensure_image(prepared, out_dir, wheelhouse=wheelhouse, progress=status)
    ensure_model(prepared, out_dir, status)
    stack = Stack(out_dir, project_for(out_dir))
    result = stack.run("run", "--rm", "--no-deps", "model-fetch", check=False, timeout=24 * 3600)
    click.echo(result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "(no output)")
    if result.returncode != 0:
        raise SystemExit(1)
