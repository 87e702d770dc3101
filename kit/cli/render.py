"""`kit render`: preset -> Dockerfile, compose.yaml, .env.example in a directory (and the folder's record)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from kit.cli.common import PathOption, deployment_options, emit_json, preset_arguments, resolve_deployment, \
    standard_options, status
from kit.cli.completion import complete_preset_name
from kit.core import docker_engine

STATUS_COLOURS = {"create": "green", "changed": "yellow", "forced": "red", "identical": None, "removed": "cyan",
                  "kept": "magenta"}
# How a status reads on the terminal, done and in a dry run; the JSON keeps the bare status word.
STATUS_LABELS = {"kept": "kept (edited)"}
DRY_RUN_LABELS = {"removed": "would remove", "kept": "would keep (edited)"}


def _profiles_from_data(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:  # noqa: ARG001
    """--with NAME: the names kit/data/profiles.yaml lists (read only when the option is given: a fast --help)."""
    if not value:
        return value
    from kit.deploy.profiles import profile_help

    known = profile_help()
    for name in value:
        if name not in known:
            raise click.BadParameter(f"{name!r} is not a profile (choose from {', '.join(sorted(known))})")
    return value


def _complete_profile(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:  # noqa: ARG001
    from kit.deploy.profiles import profile_help

    return [name for name in sorted(profile_help()) if name.startswith(incomplete)]


def refuse_target_switch(resolved, out_dir: Path) -> None:  # noqa: ANN001 - kit.deploy.record.Resolved
    """A folder whose compose stack runs is not switched to --target k8s (the switch removes compose.yaml). Docker
    is asked only for such a switch; when no engine answers, nothing of this host can be running from it."""
    from kit.core.errors import DockerUnavailable, KitError
    from kit.deploy.record import target_switch_refusal

    recorded = resolved.recorded
    if recorded is None or recorded.target != "compose" or resolved.target == "compose":
        return
    from kit.run.ops import running_services

    from docker.errors import DockerException

    try:
        running = running_services(out_dir)
    except DockerUnavailable:
        running = []
    except (KitError, DockerException, OSError) as error:  # OSError: requests' connection errors are IOErrors
        reason = error.message if isinstance(error, KitError) else f"{type(error).__name__}: {error}"
        status(click.style(f"warning: cannot tell whether the compose stack of {out_dir} runs ({reason}); "
                           "switching anyway", fg="yellow"))
        running = []
    refusal = target_switch_refusal(out_dir, recorded, resolved.target, running)
    if refusal is not None:
        raise refusal


def compose_route(prepared) -> bool:  # noqa: ANN001 - Prepared
    """Whether the next line is the folder's `docker compose up` (not Kubernetes, a cluster or a dropped pin)."""
    files = prepared.files
    return not (prepared.dropped_pin is not None or "k8s/kustomization.yaml" in files or prepared.deployment.serve.cluster)


def next_step(prepared, out_dir: Path, env=None, *, build_first: bool = False) -> str:  # noqa: ANN001
    """The line `kit render` ends with: what to run next, exactly as it works from the current directory. ``env``
    (what the render wrote into .env, a service_env.EnvFill): a required name the kit cannot make is named first, as
    the thing to set. ``build_first``: this engine lacks an image of the kit's (compose never pulls those), so the
    line starts with the `kit build` that makes it."""
    import shlex

    from kit.cli.common import kit_command, relock_step, repin_steps

    where = shlex.quote(str(out_dir))
    if prepared.dropped_pin is not None:
        return (f"next: the image changed under the dropped pin {prepared.dropped_pin}: "
                f"{repin_steps(out_dir, prepared.preset.image.repository, relock_step(out_dir, prepared))}")
    first = ""
    if env is not None and env.missing:
        env_file = out_dir / ".env"
        first = (f"set {', '.join(env.missing)} in {env_file} (.env.example says what each is), then: "
                 if env.not_read is None else
                 f"make sure {env_file} sets {', '.join(env.missing)} (the kit left it alone: {env.not_read}), then: ")
    if "k8s/kustomization.yaml" in prepared.files:
        return (f"next: {first}see {out_dir / 'k8s' / 'kustomization.yaml'} (push the image, create the Secret, "
                f"kubectl apply -k {shlex.quote(str(out_dir / 'k8s'))})")
    if prepared.deployment.serve.cluster is not None and "CLUSTER.md" in prepared.files:
        return f"next: {first}{out_dir / 'CLUSTER.md'} says what to run on which host"
    from kit.run.workflow import project_for

    # --remove-orphans: the services of an add-on or a preset beside that this render took out (--without) stop too.
    build = f"{kit_command()} build --out {where} && " if build_first else ""
    return (f"next: {first}{build}cd {where} && docker compose -p {project_for(out_dir)} up -d --wait "
            "--remove-orphans")


def compose_values(out_dir: Path) -> dict[str, str]:
    """What compose interpolates in the folder: its .env under this shell's environment."""
    from kit.core.envfile import EnvFileError, read_env_file

    try:
        values = {k: v for k, v in read_env_file(out_dir / ".env").items() if v is not None}
    except EnvFileError:
        values = {}
    values.update({k: v for k, v in os.environ.items() if v})  # compose: the shell's value over .env's
    return values


def images_to_build(prepared, out_dir: Path) -> list[str]:  # noqa: ANN001 - Prepared
    """The kit's images of the folder's compose stack that this engine lacks: `kit build` makes them (compose never
    pulls them: pull_policy never)."""
    if not compose_route(prepared):
        return []
    from kit.deploy.stack_images import stack_images

    return [i.ref for i in stack_images(prepared.files, compose_values(out_dir))
            if i.built and not docker_engine.image_on_engine(i.ref)]


def try_step(prepared, out_dir: Path) -> list[str]:  # noqa: ANN001 - Prepared
    """After the compose route's next line (which leaves the shell in the folder): how to reach the server from there,
    the key read from ./.env by the lines themselves (never printed, never in a rendered file)."""
    if not compose_route(prepared):
        return []
    from kit.cli.up import _has_api_key, try_lines

    keyed = _has_api_key(out_dir)
    head = (f"then try it from {out_dir}, where that line leaves you"
            + (" (the key is VLLM_API_KEY in its .env; these lines read it from there):" if keyed else ":"))
    return [head, *(f"  {line}" for line in try_lines(prepared, Path(".env") if keyed else None))]


def offline_step(prepared, out_dir: Path, built: tuple[str, ...] = ()) -> list[str]:  # noqa: ANN001 - Prepared
    """The notes after a `docker compose up` next line: what compose would pull that this engine lacks (and what
    stands in for it without a registry), and for a render made for a host without a registry (a --base-image, or a
    site image such as VLLM_KIT_DOOR_IMAGE in .env or this shell) the build from wheels. ``built``: images the
    command just built (`kit build`), here whatever the engine says."""
    from kit.cli.common import kit_command
    from kit.deploy.stack_images import offline_note

    if not compose_route(prepared):
        return []
    base_given = prepared.resolved is not None and prepared.resolved.base_image is not None
    return offline_note(prepared.files, compose_values(out_dir), base_image=prepared.deployment.image.base_image,
                        base_given=base_given, out_dir=out_dir, kit=kit_command(),
                        on_engine=lambda ref: ref in built or docker_engine.image_on_engine(ref))


@click.command()
@preset_arguments
@click.option("--out", "out_dir", type=PathOption(folder=True), default=Path("."), show_default=True,
              help="The deployment folder (its vllm-kit.yaml records what it was rendered from).")
@click.option("--force", is_flag=True, help="Overwrite files you edited since the kit wrote them.")
@click.option("--allow-no-fit", is_flag=True, help="Render although the memory plan says vLLM would not start.")
@click.option("--dry-run", is_flag=True, help="Say what would be written; write nothing.")
@click.option("--diff", "show_diff", is_flag=True, help="Print what a render would change, as a unified diff; write nothing.")
@click.option("--base-image", metavar="REF", help="Build on this base instead of the table's (a hardened or local image).")
@click.option("--target", type=click.Choice(["compose", "k8s"]), default=None,
              help="compose (default): compose files (a head and a worker stack for several nodes); "
                   "k8s: Kubernetes manifests in k8s/.")
@click.option("--with-preset", "with_presets", metavar="NAME", multiple=True, shell_complete=complete_preset_name,
              help="Run this preset's server beside the main one in the same compose stack (repeatable), "
                   "e.g. an embedding server beside a chat server: its own port, volumes and healthcheck, the same image.")
@click.option("--with", "with_profiles", metavar="PROFILE", multiple=True, callback=_profiles_from_data,
              shell_complete=_complete_profile,
              help="Add a profile's services to the compose stack (repeatable; kit/data/profiles.yaml lists them), "
                   "e.g. monitoring: Prometheus and Grafana with the kit's vLLM dashboard, on 127.0.0.1.")
@click.option("--without", metavar="NAME", multiple=True,
              help="Take an add-on (--with) or a preset beside (--with-preset) out of the deployment (repeatable).")
@deployment_options
@standard_options
def render(args: tuple[str, ...], preset_option: str | None, out_dir: Path, force: bool, allow_no_fit: bool,
           dry_run: bool, show_diff: bool, base_image: str | None, target: str | None, with_presets: tuple[str, ...],
           with_profiles: tuple[str, ...], without: tuple[str, ...], replace: bool, reset_overrides: bool,
           accept_preset_change: bool,
           as_json: bool) -> None:
    """Write a deployment for a preset: kit render preset=NAME [KEY=VALUE ...] [--with-preset NAME] [--with PROFILE]."""
    from kit.core.write import write_files
    from kit.deploy.pipeline import prepare_resolved

    if dry_run and show_diff:
        raise click.UsageError("--dry-run and --diff both write nothing: pick one")
    resolved = resolve_deployment(args, preset_option, out_dir, target=target, base_image=base_image,
                                  with_profiles=with_profiles, without=without, with_presets=with_presets,
                                  allow_no_fit=allow_no_fit, replace=replace, reset_overrides=reset_overrides,
                                  accept_preset_change=accept_preset_change or show_diff or dry_run)
    if not (dry_run or show_diff):
        refuse_target_switch(resolved, out_dir)
    prepared = prepare_resolved(resolved)
    if show_diff:
        from kit.core.filediff import diff_files

        text = diff_files(prepared.files, out_dir)
        if as_json:
            emit_json({"preset": prepared.name, "out": str(out_dir), "diff": text})
            return
        click.echo(text, nl=False)
        if not text:
            status(f"{out_dir}: a render would change nothing")
        return
    # What an earlier render wrote and this one does not goes when unedited, stays when edited (kit/core/write.py:
    # stale files); every command that renders the folder does the same (kit/run/workflow.py render_into).
    results = write_files(prepared.files, out_dir, force=force, dry_run=dry_run, notify=status, remove_stale=True)
    from kit.deploy.service_env import fill_stack_env, unread_env_warnings

    # The .env values the stack requires and the kit makes (the API key, an add-on's passwords), never in a
    # rendered file; a dry run writes none.
    env = None if dry_run else fill_stack_env(prepared.files, prepared.preset, out_dir / ".env", os.environ)

    prepared.report.warnings.extend(unread_env_warnings(prepared.files, out_dir / ".env"))
    for warning in prepared.report.warnings:
        status(click.style(f"warning: {warning}", fg="yellow"))
    if as_json:
        emit_json({
            "preset": prepared.name,
            "target": resolved.target,
            "out": str(out_dir),
            "dry_run": dry_run,
            "image": prepared.image_ref,
            "profiles": resolved.with_profiles,
            "overrides": prepared.resolved.overrides if prepared.resolved else resolved.overrides,
            "dropped_pin": prepared.dropped_pin,
            "files": {r.path: r.status for r in results},
            "env": None if env is None else {"written": env.written, "missing": env.missing},
        }, warnings=[str(w) for w in prepared.report.warnings])
        return
    labels = [DRY_RUN_LABELS.get(r.status, f"would {r.status}") if dry_run else STATUS_LABELS.get(r.status, r.status)
              for r in results]
    width = max([15 if dry_run else 9, *map(len, labels)])
    for r, label in zip(results, labels, strict=True):
        click.echo(f"{click.style(label.rjust(width), fg=None if dry_run else STATUS_COLOURS.get(r.status))}  "
                   f"{out_dir / r.path}")
    kept = [r.path for r in results if r.status == "kept"]
    if kept:
        status(f"note: {'this render' if not dry_run else 'the render'} no longer writes {len(kept)} file(s) you "
               "edited; they stay, and the kit no longer tracks them (delete them when you are done with them)")
    if dry_run or env is None:
        return
    for line in env.lines():
        status(line)
    status(next_step(prepared, out_dir, env, build_first=bool(images_to_build(prepared, out_dir))))
    for line in [*offline_step(prepared, out_dir), *try_step(prepared, out_dir)]:
        status(line)
