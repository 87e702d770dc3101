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
       accept_preset_change: bool,
       as_json: bool) -> None:
    """Render, build, start detached and wait until it answers: kit up preset=NAME --out DIR.

    A stack of DIR that already runs is not restarted: healthy and unchanged, it is left as it is (and said);
    otherwise only the services whose configuration, image or mounted files changed are recreated.
    """
    from kit.deploy.pipeline import prepare_resolved
    from kit.run.workflow import up as stack_up

    resolved = resolve_deployment(args, preset_option, out_dir, port=port, base_image=base_image,
                                  allow_no_fit=allow_no_fit, replace=replace, reset_overrides=reset_overrides,
                                  accept_preset_change=accept_preset_change)
    prepared = prepare_resolved(resolved)
    from kit.deploy.service_env import unread_env_warnings

    warnings = [*prepared.report.warnings, *unread_env_warnings(prepared.files, out_dir / ".env")]
    for warning in warnings:
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    from kit.cli.output import progress

    with progress("up") as on_line:  # the image build's steps drive the bar; the other lines print above it
        done = stack_up(prepared, out_dir, wheelhouse=wheelhouse, force=force, progress=on_line)
    rt, name = prepared.preset.runtime, prepared.deployment.serve.served_model_name
    keyed = _has_api_key(out_dir)
    from kit.deploy.door import client_host

    url = f"http://{client_host(rt.bind_address)}:{rt.port}"  # one the front door answers to, never 0.0.0.0
    if as_json:
        emit_json({"preset": prepared.name, "out": str(out_dir), "served_model_name": name,
                   "url": url, "ready_seconds": round(done.ready_seconds, 1), "unchanged": done.unchanged,
                   "updated": list(done.updated),
                   "api_key_in": str(out_dir / ".env") if keyed else None},
                  warnings=[str(w) for w in warnings])
        return
    import shlex

    if done.unchanged:
        click.echo(f"unchanged: {prepared.name} serves {name} on {url}, running and healthy (nothing it runs changed: "
                   "left as it was)")
    else:
        updated = f" (updated {', '.join(done.updated)}; the rest kept running)" if done.updated else ""
        click.echo(f"ready in {done.ready_seconds:.0f} s: {prepared.name} serves {name} on {url}{updated}")
    if keyed:
        click.echo(f"  (the key is VLLM_API_KEY in {out_dir / '.env'}; these lines read it from there)")
    for line in try_lines(prepared, out_dir / ".env" if keyed else None):
        click.echo(f"  {line}")
    from kit.cli.common import kit_command

    click.echo(f"stop it with: {kit_command()} down --out {shlex.quote(str(out_dir))}")


def _has_api_key(out_dir: Path) -> bool:
    from kit.core.envfile import env_value

    return env_value(out_dir / ".env", "VLLM_API_KEY") is not None


def try_lines(prepared, env_file: Path | None) -> list[str]:  # noqa: ANN001 - Prepared
    """The curl lines that try a started stack through its front door: the model list, then one request of what the
    server runs (a completion, or an embedding for a pooling server). ``env_file``: the .env that holds the key, as
    a path from where the lines run (None: the stack needs no key)."""
    import shlex

    from kit.deploy.door import client_host, door_routes

    rt, name = prepared.preset.runtime, prepared.deployment.serve.served_model_name
    url = f"http://{client_host(rt.bind_address)}:{rt.port}"  # one the front door answers to, never 0.0.0.0
    auth = env_auth_option(env_file) if env_file is not None else ""
    lines = [f"curl -s {url}/v1/models{auth}"]
    paths = {route.path for route in door_routes(prepared.preset)}
    if "/v1/completions" in paths:
        path, body = "/v1/completions", {"model": name, "prompt": "Hello", "max_tokens": 16}
    elif "/v1/embeddings" in paths:
        path, body = "/v1/embeddings", {"model": name, "input": "Hello"}
    else:
        return lines
    import json

    lines.append(f"curl -s {url}{path} -H 'Content-Type: application/json'{auth} -d {shlex.quote(json.dumps(body))}")
    return lines


def auth_header_option(out_dir: Path) -> str:
    """A curl header option that sends the folder's key as printed, in any POSIX shell in the current directory."""
    return env_auth_option(out_dir / ".env")


def env_auth_option(env_path: Path) -> str:
    """A curl header option that sends the key in ``env_path`` (a folder's .env, as a path from where the line runs):
    the .env is read by a subshell (never this process's output: the key's value is not printed), as compose reads
    it for the simple NAME=value lines the kit writes."""
    import shlex

    env_file = str(env_path)
    if "/" not in env_file:  # `. .env` would search PATH first
        env_file = f"./{env_file}"
    return f' -H "Authorization: Bearer $(. {shlex.quote(env_file)} && echo "$VLLM_API_KEY")"'


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
