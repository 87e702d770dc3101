"""`kit up` / `kit down`: the main job behind `make run` / `make down`."""

from __future__ import annotations

from pathlib import Path

import click

from kit.cli.common import emit_json, preset_arguments, require_preset, split_args, standard_options


@click.command()
@preset_arguments
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True, help="Directory to render into.")
@click.option("--port", type=int, help="Host port on 127.0.0.1 (default: the preset's).")
@click.option("--wheelhouse", type=click.Path(path_type=Path), help="Offline build from this wheelhouse (filled if empty).")
@click.option("--base-image", metavar="REF", help="Build on this base instead of the table's.")
@click.option("--force", is_flag=True, help="Overwrite render files you edited.")
@standard_options
def up(args: tuple[str, ...], preset_option: str | None, out_dir: Path, port: int | None, wheelhouse: Path | None,
       base_image: str | None, force: bool, as_json: bool) -> None:
    """Render, build, start detached and wait until it answers: kit up preset=NAME --out DIR."""
    from kit.run.workflow import model_overrides, port_overrides
    from kit.run.workflow import up as stack_up

    ref, overrides, extras = split_args(args, preset_option, extra_keys=("model",))
    overrides += model_overrides(extras.get("model")) + port_overrides(port)
    from kit.cli.output import progress

    with progress("up") as on_line:  # the image build's steps drive the bar; the other lines print above it
        prepared, ready = stack_up(require_preset(ref), overrides, out_dir, wheelhouse=wheelhouse,
                                   base_image=base_image, force=force, progress=on_line)
    rt, name = prepared.preset.runtime, prepared.deployment.served_model_name
    if as_json:
        emit_json({"preset": prepared.name, "out": str(out_dir), "served_model_name": name,
                   "url": f"http://{rt.bind_address}:{rt.port}", "ready_seconds": round(ready, 1)})
        return
    click.echo(f"ready in {ready:.0f} s: {prepared.name} serves {name} on http://{rt.bind_address}:{rt.port}")
    click.echo(f"  curl -s http://{rt.bind_address}:{rt.port}/v1/models")
    click.echo(f"  curl -s http://{rt.bind_address}:{rt.port}/v1/completions -H 'Content-Type: application/json' "
               f"-d '{{\"model\": \"{name}\", \"prompt\": \"Hello\", \"max_tokens\": 16}}'")
    click.echo(f"stop it with `make down` (or `kit down --out {out_dir}`)")


@click.command()
# Required, unlike the read-only ps/logs/status (default: here): stopping is never done by accident.
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="The stack's directory (the --out given to `kit up` or `kit render`).")
@click.option("--volumes", is_flag=True, help="Also remove the cache volumes (models downloaded, compile cache).")
@standard_options
def down(out_dir: Path, volumes: bool, as_json: bool) -> None:
    """Stop a stack started by `kit up` and remove its containers.

    Every compose project started from DIR is stopped: one node's compose.yaml, or a cluster's head and worker
    (compose.head.yaml, compose.worker.yaml) started on this host, whatever project names they were given.
    """
    from kit.run.ops import down as stack_down

    stopped = stack_down(out_dir, volumes=volumes)
    if as_json:
        emit_json({"out": str(out_dir), "volumes_removed": volumes, "projects": stopped})
        return
    for project in stopped:
        click.echo(f"stopped {project['project']} ({', '.join(project['files'])}) in {out_dir}")
