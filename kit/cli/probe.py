"""`kit probe`: start a preset's engine on this host's GPU with dummy weights; print what vLLM measured beside the plan."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from kit.cli.common import (
    PathOption,
    emit_json,
    preset_arguments,
    problem_json,
    require_preset,
    split_args,
    standard_options,
    status,
)


@click.command()
@preset_arguments
@click.option("--native", is_flag=True, help="Run the vLLM installed in this Python instead of the preset's image.")
@click.option("--model-dir", type=PathOption(folder=True, exists=True),
              help="config.json (and tokenizer files) of the model; default: the catalog's config, no tokenizer.")
@click.option("--timeout", type=float, default=900, show_default=True, help="Seconds to wait for /health.")
@click.option("--port", type=int, help="Port on 127.0.0.1 (default: a free one).")
@click.option("--image", metavar="REF", help="Image to run (default: the preset's repository:version).")
@click.option("--log", "log_path", type=PathOption(folder=False), help="Write the server log here (default: vllm-kit/probe/PRESET.log in the user's cache folder).")
@standard_options
def probe(args: tuple[str, ...], preset_option: str | None, native: bool, model_dir: Path | None, timeout: float,
          port: int | None, image: str | None, log_path: Path | None, as_json: bool) -> None:
    """Measure a preset's real start-up: kit probe preset=NAME [KEY=VALUE ...] [--native]."""
    from kit.config.presetload import load_preset
    from kit.run import probe as probing

    if native and image:
        raise click.UsageError("--image names the image a Docker probe runs; --native runs this Python's vLLM: "
                               "give one")
    ref, overrides, _ = split_args(args, preset_option)
    name, _path, preset = load_preset(require_preset(ref), overrides)
    log_path = log_path or probing.default_log_path(name)
    # The dummy model directory lives only as long as the probe: removed on every way out (a failure, Ctrl-C).
    with tempfile.TemporaryDirectory(prefix="kit-probe-") as work:
        if model_dir is None:
            model_dir = probing.write_dummy_model_dir(probing.catalog_config(preset.model.id), Path(work) / "model")
        command = probing.prepare(name, preset, model_dir, mode="native" if native else "docker", port=port,
                                  image=image)
        if not command.tokenizer:
            status("no tokenizer files in the model directory: the engine starts with --skip-tokenizer-init")
        status(f"server log: {log_path}")
        result = probing.run(command, timeout=timeout, log_path=log_path, progress=status)
        report = {**probing.report(name, preset, result), "log": str(log_path)}
    for note in report["notes"]:
        status(f"note: {note}")
    failure = None if result.ready else f"vLLM did not start: {probing.failure_reason(result)}"
    if as_json:
        emit_json(report, ok=result.ready, warnings=report["notes"],
                  problems=None if failure is None else [problem_json(None, failure, f"the whole log: {log_path}")])
    else:
        click.echo(report["table"])
        if result.seconds_to_ready is not None:
            click.echo(f"ready in {result.seconds_to_ready:.0f} s (model runner {result.log.model_runner or '?'}, "
                       f"vLLM {result.log.vllm_version or '?'})")
    if failure is not None:
        click.secho(failure, fg="red", err=True)
        for suggestion in report["plan"].get("suggestions", []):
            click.echo(f"  fix: {suggestion['message']}", err=True)
        click.echo(f"the whole log: {log_path}", err=True)
        raise SystemExit(1)
