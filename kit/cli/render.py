"""`kit render`: preset -> Dockerfile, compose.yaml, .env.example in a directory."""

from __future__ import annotations

from pathlib import Path

import click

from kit.cli.common import emit_json, preset_arguments, require_preset, split_args, standard_options, status
from kit.cli.completion import complete_preset_name

STATUS_COLOURS = {"create": "green", "changed": "yellow", "forced": "red", "identical": None}


def _profiles_from_data(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """--with NAME: the names kit/data/profiles.yaml lists (read only when the option is given: a fast --help)."""
    if not value:
        return value
    from kit.deploy.profiles import profile_help

    known = profile_help()
    for name in value:
        if name not in known:
            raise click.BadParameter(f"{name!r} is not a profile (choose from {', '.join(sorted(known))})")
    return value


def _complete_profile(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    from kit.deploy.profiles import profile_help

    return [name for name in sorted(profile_help()) if name.startswith(incomplete)]


@click.command()
@preset_arguments
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("."), show_default=True,
              help="Directory to write into.")
@click.option("--force", is_flag=True, help="Overwrite files you edited since the kit wrote them; render a preset that does not fit.")
@click.option("--dry-run", is_flag=True, help="Say what would be written; write nothing.")
@click.option("--base-image", metavar="REF", help="Build on this base instead of the table's (a hardened or local image).")
@click.option("--target", type=click.Choice(["compose", "k8s"]), default="compose", show_default=True,
              help="compose: compose files (a head and a worker stack for several nodes); k8s: Kubernetes manifests in k8s/.")
@click.option("--with-preset", "with_presets", metavar="NAME", multiple=True, shell_complete=complete_preset_name,
              help="Run this preset's server beside the main one in the same compose stack (repeatable), "
                   "e.g. an embedding server beside a chat server: its own port, volumes and healthcheck, the same image.")
@click.option("--with", "with_profiles", metavar="PROFILE", multiple=True, callback=_profiles_from_data,
              shell_complete=_complete_profile,
              help="Add a profile's services to the compose stack (repeatable; kit/data/profiles.yaml lists them), "
                   "e.g. monitoring: Prometheus and Grafana with the kit's vLLM dashboard, on 127.0.0.1.")
@standard_options
def render(args: tuple[str, ...], preset_option: str | None, out_dir: Path, force: bool, dry_run: bool,
           base_image: str | None, target: str, with_presets: tuple[str, ...], with_profiles: tuple[str, ...],
           as_json: bool) -> None:
    """Write a deployment for a preset: kit render preset=NAME [KEY=VALUE ...] [--with-preset NAME] [--with PROFILE]."""
    from kit.core.write import write_files
    from kit.deploy.pipeline import prepare

    ref, overrides, _ = split_args(args, preset_option)
    prepared = prepare(require_preset(ref), overrides, base_image=base_image, force=force, target=target,
                       with_presets=list(with_presets), with_profiles=list(with_profiles))
    results = write_files(prepared.files, out_dir, force=force, dry_run=dry_run, notify=status)
    for warning in prepared.report.warnings:
        status(click.style(f"warning: {warning}", fg="yellow"))
    if as_json:
        emit_json({
            "preset": prepared.name,
            "target": target,
            "out": str(out_dir),
            "dry_run": dry_run,
            "image": prepared.image_ref,
            "profiles": list(dict.fromkeys(with_profiles)),
            "files": {r.path: r.status for r in results},
        }, warnings=[str(w) for w in prepared.report.warnings])
        return
    for r in results:
        label = click.style(f"{r.status:>9}", fg=STATUS_COLOURS.get(r.status)) if not dry_run else f"{'would ' + r.status:>15}"
        click.echo(f"{label}  {out_dir / r.path}")
    if dry_run:
        return
    if target == "k8s":
        status(f"next: see {out_dir / 'k8s' / 'kustomization.yaml'} (push the image, create the Secret, kubectl apply -k)")
    elif prepared.deployment.cluster is not None:
        status(f"next: {out_dir / 'CLUSTER.md'} says what to run on which host")
    else:
        status(f"next: cd {out_dir} && docker compose up -d --wait")


