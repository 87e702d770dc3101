"""`kit warm`: fill a deployment's caches before its first user start, so the first start a user sees is warm."""

from __future__ import annotations

from pathlib import Path

import click

from kit.cli.common import deployment_options, emit_json, preset_arguments, resolve_deployment, \
    standard_options, start_options


@click.command()
@preset_arguments
@start_options("The deployment folder (rendered again from its record, or from the preset), as `kit up` takes it.")
@deployment_options
@standard_options
def warm(args: tuple[str, ...], preset_option: str | None, out_dir: Path, port: int | None, wheelhouse: Path | None,
         base_image: str | None, force: bool, allow_no_fit: bool, replace: bool, reset_overrides: bool,
         accept_preset_change: bool,
         as_json: bool) -> None:
    """Fill a deployment's caches before its first start: kit warm [preset=NAME] --out DIR.

    Renders and builds as `kit up` does, starts only the API server(s) (and the one-shot services they depend on),
    sends each one real request from inside its container (vLLM builds some kernels on the first request), then
    stops them with `docker compose stop`: the cache volumes stay, and `kit up --out DIR` starts warm. Prints the
    seconds to healthy, the request's status and the bytes in the vLLM cache volume per folder; the last line is
    the command that starts it. One-host compose stacks only, and not while the stack runs.
    """
    import shlex

    from kit.cli.common import kit_command, status
    from kit.cli.output import progress
    from kit.core.errors import KitError
    from kit.deploy.pipeline import prepare_resolved
    from kit.run.warm import warm as warm_stack

    resolved = resolve_deployment(args, preset_option, out_dir, port=port, base_image=base_image,
                                  allow_no_fit=allow_no_fit, replace=replace, reset_overrides=reset_overrides,
                                  accept_preset_change=accept_preset_change)
    prepared = prepare_resolved(resolved)
    with progress("warm") as on_line:
        result = warm_stack(prepared, out_dir, wheelhouse=wheelhouse, force=force, progress=on_line)
    next_command = f"{kit_command()} up --out {shlex.quote(str(out_dir))}"
    if not result.ok:
        failed = next(s for s in result.servers if not s.ok) if result.servers else None
        what = (f"{failed.service}: {failed.request} answered "
                f"{'nothing' if failed.status is None else f'HTTP {failed.status}'}: {failed.detail}"
                if failed else "no server answered")
        raise KitError(f"{out_dir}: the warm-up request failed ({what})",
                       hint=f"the caches may be cold; see {kit_command()} logs --out {shlex.quote(str(out_dir))}")
    servers = [{"service": s.service, "request": s.request, "status": s.status, "request_seconds": round(s.seconds, 2),
                "cache_root": s.cache_root, "cache_env": s.cache_env, "cache_bytes": s.cache_bytes}
               for s in result.servers]
    if as_json:
        emit_json({"preset": prepared.name, "out": str(out_dir), "project": result.project,
                   "services": result.services, "ready_seconds": round(result.ready_seconds, 1),
                   "servers": servers, "next": next_command})
        return
    status(f"warmed {prepared.name} in {out_dir}; stopped (volumes kept)")
    click.echo(f"healthy in {result.ready_seconds:.0f} s: {', '.join(result.services)}")
    for s in result.servers:
        click.echo(f"{s.service}: {s.request} -> {s.status} in {s.seconds:.1f} s")
        total = sum(s.cache_bytes.values())
        click.echo(f"  vLLM cache {s.cache_root}: {total:,} bytes in {len(s.cache_bytes)} folder(s)")
        width = max((len(f"{n:,}") for n in s.cache_bytes.values()), default=0)
        for folder, size in sorted(s.cache_bytes.items()):
            click.echo(f"    {size:>{width},}  {folder}")
    click.echo("start it warm with:")
    click.echo(next_command)
