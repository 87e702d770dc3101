"""`kit wheelhouse preset=NAME --wheelhouse DIR`: download every Python package the image needs, on the host."""

from __future__ import annotations

from pathlib import Path

import click

from kit.cli.common import PathOption, emit_json, preset_arguments, resolve_deployment, standard_options, status


@click.command()
@preset_arguments
@click.option("--base-image", metavar="REF", help="Build on this base instead of the table's; its Python and glibc are read from it.")
@click.option("--python-version", metavar="X.Y", help="The image's Python (default: the base's own where this engine has it, else the table's).")
@click.option("--wheelhouse", "wheelhouse_dir", type=PathOption(folder=True), metavar="DIR",
              help="The wheelhouse directory (created if missing).")
@click.option("--out", "out_dir", type=PathOption(folder=True), metavar="DIR",
              help="A deployment folder: fill the wheelhouse for the deployment it records (no preset needed).")
@standard_options
def wheelhouse(args: tuple[str, ...], preset_option: str | None, base_image: str | None,
               python_version: str | None, wheelhouse_dir: Path | None, out_dir: Path | None, as_json: bool) -> None:
    """Fill a wheelhouse for an offline build: kit wheelhouse preset=NAME --wheelhouse DIR (wheels there are reused)."""
    from kit.deploy.pipeline import prepare_resolved
    from kit.image.wheelhouse import base_target, build_wheelhouse

    # --out is the deployment folder on every command; the wheelhouse has its own option. A positional DIR (this
    # command's first form) still names the wheelhouse.
    positional = [a for a in args if "=" not in a]
    if len(positional) > 1 or (positional and wheelhouse_dir is not None) or not (positional or wheelhouse_dir):
        raise click.UsageError("give one wheelhouse directory: kit wheelhouse preset=NAME --wheelhouse DIR")
    warnings = [f"a positional DIR is deprecated: use --wheelhouse {positional[0]}"] if positional else []
    if warnings and not as_json:
        click.secho(f"warning: {warnings[0]}", fg="yellow", err=True)
    directory = wheelhouse_dir or PathOption(folder=True).convert(positional[0], None, None)
    resolved = resolve_deployment(tuple(a for a in args if "=" in a), preset_option, out_dir, base_image=base_image)
    prepared = prepare_resolved(resolved)
    from kit.deploy.compat import release_rows

    for _, _, message, hint in release_rows(prepared.preset):  # a release's own packages may not resolve
        status(f"warning: {message} (hint: {hint})")
    # the Python and glibc the wheels are resolved for: the base's own where this engine has it
    python_version, glibc, said = base_target(prepared.deployment.image.base_image, python_version)
    status(said)
    result = build_wheelhouse(prepared.deployment, directory, python_version=python_version, glibc=glibc, progress=status)
    if as_json:
        emit_json({"dir": str(result.directory), "lock": str(result.lock_path), "packages": result.packages,
                    "excluded": result.excluded, "bytes": result.total_bytes, "seconds": round(result.seconds, 1)},
                  warnings=warnings)
        return
    click.echo(f"{result.directory}: {len(result.packages)} wheels, {result.total_bytes / 2**20:.0f} MiB, "
               f"lock {result.lock_path.name}; left out: {', '.join(result.excluded) or 'nothing'} "
               f"({result.seconds:.0f} s)")
    if out_dir is not None:  # the offline route render's note names: the wheels, then the build from them
        import shlex

        from kit.cli.common import kit_command

        status(f"next: {kit_command()} build --out {shlex.quote(str(out_dir))} --wheelhouse "
               f"{shlex.quote(str(result.directory))}")
