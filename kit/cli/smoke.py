"""`kit smoke`: start the stack with a small model, check it answers, remove everything it started."""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

import click

from kit.cli.common import (
    FiniteFloatRange,
    PathOption,
    deployment_options,
    emit_json,
    preset_arguments,
    problem_json,
    resolve_deployment,
    standard_options,
    status,
)
from kit.core.errors import SmokeError


@click.command()
@preset_arguments
@click.option("--out", "out_dir", type=PathOption(folder=True),
              help="The deployment folder to render into and prove (default: a temporary directory).")
@click.option("--port", type=click.IntRange(1, 65535), help="Host port on 127.0.0.1 (default: the preset's).")
@click.option("--wheelhouse", type=PathOption(folder=True), help="Build offline from this wheelhouse if the image is missing.")
@click.option("--base-image", metavar="REF", help="Build on this base instead of the table's.")
@click.option("--timeout", type=FiniteFloatRange(0, 86400, min_open=True), help="Seconds to wait for /health (default: the healthcheck's start period + 120).")
@click.option("--keep", is_flag=True, help="Leave the stack running.")
@click.option("--force", is_flag=True, help="Overwrite render files you edited.")
@deployment_options
@standard_options
def smoke(args: tuple[str, ...], preset_option: str | None, out_dir: Path | None, port: int | None,
          wheelhouse: Path | None, base_image: str | None, timeout: float | None, keep: bool, force: bool,
          replace: bool, reset_overrides: bool, accept_preset_change: bool, as_json: bool) -> None:
    """Prove a preset's stack answers: kit smoke preset=NAME [model=ID|PATH] [--keep]."""
    # testinfra is an extra (pyproject.toml: smoke): the rest of the CLI runs without it. Checked before
    # anything is built or started, so a missing extra costs nothing.
    if importlib.util.find_spec("testinfra") is None:
        raise SmokeError("kit smoke needs pytest-testinfra, which is not installed: pip install 'pytest-testinfra>=10' "
                         "in the kit's environment (from a checkout: pip install '.[smoke]'; "
                         "with pipx: pipx inject vllm-kit pytest-testinfra)")
    from kit.deploy.pipeline import prepare_resolved
    from kit.run.smoke import format_table
    from kit.run.workflow import smoke as run_smoke

    resolved = resolve_deployment(args, preset_option, out_dir, port=port, base_image=base_image, replace=replace,
                                  reset_overrides=reset_overrides,
                                  accept_preset_change=accept_preset_change)
    prepared = prepare_resolved(resolved)
    out = out_dir or Path(tempfile.mkdtemp(prefix="kit-smoke-"))
    result = run_smoke(prepared, out, wheelhouse=wheelhouse, keep=keep, timeout=timeout, force=force, progress=status)
    if as_json:
        emit_json({"ok": result.ok, "ready_seconds": round(result.ready_seconds, 1),
                   "total_seconds": round(result.total_seconds, 1),
                   "checks": [{"name": c.name, "ok": c.ok, "skipped": c.skipped, "detail": c.detail}
                              for c in result.checks]},
                  ok=result.ok, problems=[problem_json(None, f"{c.name}: {c.detail}", None)
                                          for c in result.checks if not c.ok])
    else:
        click.echo(format_table(result.checks))
        click.echo(f"ready in {result.ready_seconds:.0f} s, smoke took {result.total_seconds:.0f} s")
    if not result.ok:
        failing = next(c for c in result.checks if not c.ok)
        click.secho(f"failed: {failing.name}: {failing.detail}", fg="red", err=True)
        click.echo("--- last log lines ---\n" + result.logs_tail, err=True)
    if keep:
        status(f"kept running: compose project {result.project} in {result.out_dir}")
    raise SystemExit(0 if result.ok else 1)
