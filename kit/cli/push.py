"""`kit push preset=NAME --registry HOST`: push the built image and record the digest it got."""

from __future__ import annotations

import json
from pathlib import Path

import click

from kit.cli.common import PathOption, emit_json, preset_arguments, resolve_deployment, standard_options, status

PUSH_RECORD = "vllm-kit.push.json"


@click.command()
@preset_arguments
@click.option("--registry", required=True, metavar="HOST[:PORT]", help="Registry to push to, e.g. 127.0.0.1:5000.")
@click.option("--out", "out_dir", type=PathOption(folder=True), default=Path("."), show_default=True,
              help="The deployment folder (its record says which image); the push record goes there.")
@click.option("--base-image", metavar="REF", help="The base the image was built on (same as for `kit build`).")
@standard_options
def push(args: tuple[str, ...], preset_option: str | None, registry: str, out_dir: Path, base_image: str | None,
         as_json: bool) -> None:
    """Push a built image: kit push preset=NAME --registry HOST; prints the digest to pin compose to."""
    import shlex

    from kit.config.preset_files import preset_ref_for
    from kit.deploy.pipeline import prepare_resolved
    from kit.deploy.record import read_record
    from kit.image.registry import push_image

    resolved = resolve_deployment(args, preset_option, out_dir, base_image=base_image)
    prepared = prepare_resolved(resolved)
    source = prepared.image_ref
    tag = source.rsplit(":", 1)[1]
    status(f"pushing {source} to {registry}")
    pushed = push_image(source, registry, prepared.deployment.image.image_repository, tag, progress=status)
    repository = pushed.ref.rsplit(":", 1)[0]
    pin = [f"image.repository={repository}", f"image.pin_digest={pushed.digest}"]
    record = {"source": source, "pushed": pushed.ref, "digest": pushed.digest, "pinned": pushed.pinned,
              "image_id": pushed.image_id, "render_overrides": pin}
    if out_dir.is_dir():
        (out_dir / PUSH_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    if as_json:
        emit_json(record)
        return
    click.echo(f"pushed  {pushed.ref}")
    click.echo(f"digest  {pushed.digest}")
    # The next step as it works from here: the folder's record carries the preset and its overrides; else preset= as
    # it finds this preset again, by name or by its file's path (kit/config/preset_files.py preset_ref_for).
    folder = out_dir.is_dir() and read_record(out_dir) is not None
    ref = preset_ref_for(prepared.name, prepared.path)
    source_args = [] if folder else [f"preset={ref}", *resolved.overrides]
    if resolved.base_image and not folder:
        source_args += ["--base-image", resolved.base_image]
    from kit.cli.common import kit_command

    command = f"{kit_command()} {shlex.join(['render', *source_args, *pin, '--out', str(out_dir)])}"
    click.echo(f"pin     {command}  (compose runs {pushed.pinned})")
