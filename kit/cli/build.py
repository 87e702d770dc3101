"""`kit build`: render (or reuse a render) and build the image with the Docker SDK."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from kit.cli.common import PathOption, deployment_options, emit_json, preset_arguments, resolve_deployment, \
    standard_options, status


@click.command()
@preset_arguments
@click.option("--out", "out_dir", type=PathOption(folder=True), default=Path("."), show_default=True,
              help="The deployment folder (rendered again from its record, or from the preset); the build log and "
                   "command go in DIR/.kit/.")
@click.option("--base-image", metavar="REF", help="Build on this base instead of the table's.")
@click.option("--wheelhouse", type=PathOption(folder=True), help="Install only from this wheelhouse (no network).")
@click.option("--tag", "tags", multiple=True, metavar="REF", help="Extra tag (repeatable).")
@click.option("--no-cache", is_flag=True, help="Build every layer again.")
@click.option("--locked", is_flag=True,
              help="Build only from DIR/vllm-kit.lock.json: base by digest, wheels by sha256; fail on drift.")
@click.option("--lock", "lock_path", type=PathOption(folder=False), help="Lock file (default: DIR/vllm-kit.lock.json).")
@click.option("--offline", is_flag=True, help="With --locked: the base must be on this engine (no pull).")
@click.option("--force", is_flag=True, help="Overwrite render files you edited.")
@click.option("--allow-no-fit", is_flag=True, help="Build although the memory plan says vLLM would not start.")
@deployment_options
@standard_options
def build(args: tuple[str, ...], preset_option: str | None, out_dir: Path, base_image: str | None,
          wheelhouse: Path | None, tags: tuple[str, ...], no_cache: bool, locked: bool, lock_path: Path | None,
          offline: bool, force: bool, allow_no_fit: bool, replace: bool, reset_overrides: bool,
          accept_preset_change: bool,
          as_json: bool) -> None:
    """Build a preset's image: kit build preset=NAME [--wheelhouse DIR] [--base-image REF] [--locked]."""
    from kit.cli.output import progress
    from kit.deploy.pipeline import prepare_resolved
    from kit.run.workflow import render_into

    if (lock_path or offline) and not locked:
        raise click.UsageError("--lock and --offline go with --locked")
    resolved = resolve_deployment(args, preset_option, out_dir, base_image=base_image, allow_no_fit=allow_no_fit,
                                  replace=replace, reset_overrides=reset_overrides,
                                  accept_preset_change=accept_preset_change)
    prepared = prepare_resolved(resolved)
    render_into(prepared, out_dir, force=force, remove_stale=True, progress=status)
    with progress("build") as on_line:
        result = _build(prepared, out_dir, locked=locked, lock_path=lock_path, wheelhouse=wheelhouse, offline=offline,
                        no_cache=no_cache, tags=tags, progress=on_line)
    router_ref = None
    if prepared.preset.runtime.replicas > 1:  # the router in front of the replicas has its own small image
        from kit.deploy.router import router_image_ref
        from kit.run.workflow import ensure_router_image

        ensure_router_image(prepared, out_dir, wheelhouse=wheelhouse, progress=status)
        router_ref = router_image_ref(prepared.deployment, prepared.files)
    data = {"image_id": result.image_id, "tags": result.tags, "size_bytes": result.size_bytes,
            "labels": result.labels, "seconds": round(result.seconds, 1), "cached_steps": result.cached_steps,
            "total_steps": result.total_steps, "log": str(result.log_path), "command": str(result.script_path)}
    if router_ref:
        data["router_image"] = router_ref
    # What `docker compose up` of the folder reads beside the image (the API key): written as `kit render` writes it,
    # so the next line printed below works as printed after a build of a folder never rendered.
    import os

    from kit.deploy.service_env import fill_stack_env

    env = fill_stack_env(prepared.files, prepared.preset, out_dir / ".env", os.environ)
    from kit.cli.render import next_step

    step = next_step(prepared, out_dir, env)  # the line `kit render` ends with: the build was the step before it
    if as_json:
        emit_json({**data, "next": step.removeprefix("next: ")})
        return
    from kit.cli.output import key_values

    key_values([("image", result.image_id), ("tags", ", ".join(result.tags)),
                ("size", f"{result.size_bytes / 2**30:.2f} GiB"),
                ("time", f"{result.seconds:.0f} s ({result.cached_steps}/{result.total_steps} steps cached)"),
                *(("label", f"{key}={value}") for key, value in sorted(result.labels.items())),
                ("log", f"{result.log_path} (command: {result.script_path})"),
                *((("router", router_ref),) if router_ref else ())])
    for line in env.lines():
        status(line)
    status(step)
    from kit.cli.render import offline_step, try_step

    for line in [*offline_step(prepared, out_dir, built=(*result.tags, *((router_ref,) if router_ref else ()))),
                 *try_step(prepared, out_dir)]:
        status(line)


def _build(prepared, out_dir: Path, *, locked: bool, lock_path: Path | None, wheelhouse: Path | None,  # noqa: ANN001, ANN202
           offline: bool, no_cache: bool, tags: tuple[str, ...], progress):  # noqa: ANN001
    from kit.run.workflow import build as build_stack

    if locked:
        from kit.image.lock import LOCK_FILE, build_locked

        built = build_locked(prepared, out_dir, lock_path=lock_path or out_dir / LOCK_FILE, wheelhouse=wheelhouse,
                             offline=offline, no_cache=no_cache, extra_tags=list(tags), progress=progress)
        return dataclasses.replace(built.result, image_id=built.image_id, tags=built.tags)
    return build_stack(prepared, out_dir, wheelhouse=wheelhouse, extra_tags=list(tags), no_cache=no_cache,
                       progress=progress)

