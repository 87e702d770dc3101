"""`kit fetch`: put the model into the stack's HF cache volume ahead of time (the model-fetch service)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import click

from kit.cli.common import (
    PathOption,
    deployment_options,
    emit_json,
    preset_arguments,
    problem_json,
    resolve_deployment,
    standard_options,
    status,
)


@click.command()
@preset_arguments
@click.option("--out", "out_dir", type=PathOption(folder=True), default=Path("."), show_default=True,
              help="The deployment folder (rendered again from its record, or from the preset).")
@click.option("--wheelhouse", type=PathOption(folder=True), help="Offline build from this wheelhouse if the image is missing.")
@click.option("--base-image", metavar="REF", help="Build on this base instead of the table's.")
@click.option("--force", is_flag=True, help="Overwrite render files you edited.")
@deployment_options
@standard_options
def fetch(args: tuple[str, ...], preset_option: str | None, out_dir: Path, wheelhouse: Path | None,
          base_image: str | None, force: bool, replace: bool, reset_overrides: bool,
          accept_preset_change: bool, as_json: bool) -> None:
    """Download what vLLM will read into the HF cache volume: the model's weights in the format vLLM loads, its
    config and tokenizer, and the LoRA adapters, draft model and tokenizer the engine flags name
    (HF_ENDPOINT, HF_TOKEN from .env): kit fetch preset=NAME."""
    from kit.deploy.pipeline import prepare_resolved
    from kit.run.stack import Stack
    from kit.run.workflow import ensure_image, ensure_model, fill_env, make_generated_model, project_for, render_into

    resolved = resolve_deployment(args, preset_option, out_dir, base_image=base_image, replace=replace,
                                  reset_overrides=reset_overrides,
                                  accept_preset_change=accept_preset_change)
    prepared = prepare_resolved(resolved)
    render_into(prepared, out_dir, force=force, remove_stale=True, progress=status)
    ensure_image(prepared, out_dir, wheelhouse=wheelhouse, progress=status)
    ensure_model(prepared, out_dir, status)
    fill_env(prepared, out_dir, status)  # compose reads the whole file, the server's required key too
    stack = Stack(out_dir, project_for(out_dir))
    make_generated_model(prepared, stack, status)  # model-fetch checks it is there
    # -T: no TTY. The script's progress (stderr, a line per file with the bytes so far) drives a progress bar on a
    # terminal and passes through as lines elsewhere; its verdict (the last stdout line) is kept.
    argv = stack.argv("run", "--rm", "--no-deps", "-T", "model-fetch")
    status(f"fetching into the stack's HF cache volume: {shlex.join(argv)}")
    from kit.cli.output import progress

    with progress("fetch") as on_line, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                        text=True, cwd=stack.directory) as child:
        assert child.stderr is not None and child.stdout is not None
        for line in child.stderr:
            on_line(line.rstrip("\n"))
        stdout = child.stdout.read()
        returncode = child.wait()
    result = subprocess.CompletedProcess(argv, returncode, stdout, None)
    lines = result.stdout.strip().splitlines()
    verdict = lines[-1] if lines else "(no output)"
    if as_json:
        failed = result.returncode != 0
        emit_json({"out": str(out_dir), "command": argv, "returncode": result.returncode, "verdict": verdict},
                  ok=not failed, problems=[problem_json(None, verdict, None)] if failed else None)
    else:
        click.echo(verdict)
    if result.returncode != 0:
        raise SystemExit(1)
