"""`kit up` / `kit down`: the main job behind `make run` / `make down`."""

from __future__ import annotations

from pathlib import Path

import click

from kit.cli.common import PathOption, deployment_options, emit_json, preset_arguments, resolve_deployment, \
    standard_options, start_options


@click.command()
@preset_arguments
@start_options("The deployment folder (rendered again from its record, or from the preset).")
@deployment_options
@standard_options
def up(args: tuple[str, ...], preset_option: str | None, out_dir: Path, port: int | None, wheelhouse: Path | None,
       base_image: str | None, force: bool, allow_no_fit: bool, replace: bool, reset_overrides: bool,
       as_json: bool) -> None:
    """Render, build, start detached and wait until it answers: kit up preset=NAME --out DIR."""
    from kit.deploy.pipeline import prepare_resolved
    from kit.run.workflow import up as stack_up

    resolved = resolve_deployment(args, preset_option, out_dir, port=port, base_image=base_image,
                                  allow_no_fit=allow_no_fit, replace=replace, reset_overrides=reset_overrides)
    prepared = prepare_resolved(resolved)
    from kit.deploy.service_env import unread_env_warnings

    for warning in unread_env_warnings(prepared.files, out_dir / ".env"):
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    from kit.cli.output import progress

    with progress("up") as on_line:  # the image build's steps drive the bar; the other lines print above it
        ready = stack_up(prepared, out_dir, wheelhouse=wheelhouse, force=force, progress=on_line)
    rt, name = prepared.preset.runtime, prepared.deployment.serve.served_model_name
    if as_json:
        emit_json({"preset": prepared.name, "out": str(out_dir), "served_model_name": name,
                   "url": f"http://{rt.bind_address}:{rt.port}", "ready_seconds": round(ready, 1)})
        return
    import shlex

    host = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(rt.bind_address, rt.bind_address)
    url = f"http://{host}:{rt.port}"
    auth = ' -H "Authorization: Bearer $VLLM_API_KEY"' if _has_api_key(out_dir) else ""
    click.echo(f"ready in {ready:.0f} s: {prepared.name} serves {name} on {url}")
    if auth:
        click.echo(f"  (the server wants the key in {out_dir / '.env'}: export VLLM_API_KEY from there first)")
    click.echo(f"  curl -s {url}/v1/models{auth}")
    body = shlex.quote(f'{{"model": "{name}", "prompt": "Hello", "max_tokens": 16}}')
    click.echo(f"  curl -s {url}/v1/completions -H 'Content-Type: application/json'{auth} -d {body}")
    from kit.cli.common import kit_command

    click.echo(f"stop it with: {kit_command()} down --out {shlex.quote(str(out_dir))}")


def _has_api_key(out_dir: Path) -> bool:
    try:
        lines = (out_dir / ".env").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    return any(line.partition("=")[0].strip() == "VLLM_API_KEY" and line.partition("=")[2].strip() for line in lines)


@click.command()
# Required, unlike the read-only ps/logs/status (default: here): stopping is never done by accident.
@click.option("--out", "out_dir", type=PathOption(folder=True), required=True,
              help="The stack's directory (the --out given to `kit up` or `kit render`).")
@click.option("--volumes", is_flag=True, help="Also remove the cache volumes (models downloaded, compile cache).")
@standard_options
def down(out_dir: Path, volumes: bool, as_json: bool) -> None:
    """Stop a stack started by `kit up` and remove its containers.

    Every compose project started from DIR is stopped: one node's compose.yaml, or a cluster's head and worker
    (compose.head.yaml, compose.worker.yaml) started on this host, whatever project names they were given.
    DIR must be a deployment the kit rendered (its compose files listed in DIR/.vllm-kit.json, exit 1 otherwise);
    with nothing running from it, it says so (exit 0).
    """
    from kit.run.ops import down as stack_down

    stopped = stack_down(out_dir, volumes=volumes)
    if as_json:
        emit_json({"out": str(out_dir), "containers_removed": [c for p in stopped for c in p["containers"]],
                   "volumes_removed": [v for p in stopped for v in p["volumes"]], "projects": stopped})
        return
    if not any(p["containers"] for p in stopped):
        click.echo(f"nothing was running from {out_dir}" + ("; no volume of it is left" if volumes and not stopped
                                                             else ""))
    for project in stopped:
        volumes_text = f"volumes {', '.join(project['volumes'])}" if project["volumes"] else ""
        if project["containers"]:
            click.echo(f"stopped {project['project']} ({', '.join(project['files'])}) in {out_dir}: removed "
                       f"containers {', '.join(project['containers'])}" + (f"; {volumes_text}" if volumes_text else ""))
        else:
            click.echo(f"removed {project['project']}'s {volumes_text}")
