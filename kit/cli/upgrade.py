"""`kit upgrade --to VERSION`: what moving a deployment to another vLLM release changes, and (--apply) the move."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import click

from kit.cli.common import PathOption, emit_json, kit_command, preset_arguments, problem_json, relock_command, \
    repin_commands, repin_steps, split_args, standard_options, status


def _release(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:  # noqa: ARG001
    """--to takes a release as a preset pins one (X.Y.Z): anything else is the option's grammar (exit 2)."""
    import re

    from kit.core.versions import VERSION_RE

    if value is not None and not re.match(VERSION_RE, value):
        raise click.BadParameter(f"{value!r} is not a vLLM release X.Y.Z (e.g. 0.33.0)")
    return value


def plan_rows(upgrade) -> list[tuple[str, str, str]]:  # noqa: ANN001 - kit.deploy.upgrade.Upgrade
    """(quantity, at the current release, at the target) for the side-by-side plan."""
    before, after = upgrade.before.plan, upgrade.after.plan

    def cell(plan, text) -> str:  # noqa: ANN001
        return "-" if plan is None else text(plan)

    rows = [
        # the CPU backend sizes its KV cache from VLLM_CPU_KVCACHE_SPACE, not from a GPU fraction
        ("gpu_memory_utilization",
         lambda p: "-" if p.inputs.get("device") == "cpu" else f"{p.inputs.get('gpu_memory_utilization')}"),
        ("max_model_len", lambda p: f"{p.inputs['max_model_len']:,}"),
        ("max_num_seqs", lambda p: f"{p.inputs['max_num_seqs']:,}"),
        ("max_num_batched_tokens", lambda p: f"{p.inputs['max_num_batched_tokens']:,}"),
        ("CUDA graphs charged to KV", lambda p: "yes" if p.inputs.get("cuda_graph_charged") else "no"),
        ("weights GiB", lambda p: f"{p.weights_gib:.2f}"),
        ("activation GiB", lambda p: f"{p.activation_gib:.2f}"),
        ("non-torch GiB", lambda p: f"{p.non_torch_gib:.2f}"),
        ("CUDA graphs GiB", lambda p: f"{p.cuda_graph_gib:.2f}"),
        ("KV sizing margin GiB", lambda p: f"{p.kv_reserve_gib:.2f}" if p.inputs.get("extensible_kv_cache") else "-"),
        ("KV cache GiB", lambda p: f"{p.kv_cache_gib:.2f}"),
        ("KV cache tokens", lambda p: f"{p.kv_cache_tokens:,}"),
        ("max concurrency", lambda p: f"{p.max_concurrency:.2f}x"),
        ("fits", lambda p: "yes" if p.fits else "no"),
    ]
    return [(name, cell(before, text), cell(after, text)) for name, text in rows]


def _report(upgrade) -> None:  # noqa: ANN001 - kit.deploy.upgrade.Upgrade
    from kit.cli.output import table

    where = f", folder {upgrade.out_dir}" if upgrade.out_dir is not None else ""
    click.echo(f"{upgrade.preset}: vLLM {upgrade.current} -> {upgrade.target}{where}")
    click.echo(f"overrides at {upgrade.target}: {' '.join(upgrade.overrides)}")
    click.echo("")
    if upgrade.flags:
        click.echo(f"flags that touch this deployment (kit/data/flags/vllm-{upgrade.current}.json -> "
                   f"vllm-{upgrade.target}.json):")
        table(("change", "flag", "set by", "what", "do"),
              [(f.change, f.flag, f.source, f.message, f.hint or "") for f in upgrade.flags],
              styles={"change": "bold"})
    else:
        click.echo("flags: none of this deployment's flags changed")
    click.echo("")
    problems = upgrade.after.problems
    click.echo(f"checks at {upgrade.target} (as `kit validate`): " + ("ok" if not problems else
                                                                     f"{len(problems)} problem(s)"))
    for problem in problems:
        click.echo(f"  problem: {problem}")
    for warning in upgrade.new_warnings:
        click.echo(f"  new warning: {warning}")
    if upgrade.before.problems and upgrade.current != upgrade.target:
        click.echo(f"  before the upgrade, at {upgrade.current}, the checks already find {len(upgrade.before.problems)} "
                   f"problem(s): `kit validate` or `kit render --out DIR --diff` at that release lists them")
    click.echo("")
    click.echo("memory plan per rank:")
    table(("quantity", upgrade.current, upgrade.target), plan_rows(upgrade), right=(upgrade.current, upgrade.target))
    for side in (upgrade.before, upgrade.after):
        if side.plan is None and side.plan_note:
            click.echo(f"  {side.version}: {side.plan_note}")
        elif side.plan is not None and side.plan.approximate.get("value"):
            click.echo(f"  {side.version}: approximate: {side.plan.approximate.get('reason')}")
    if upgrade.after.plan is not None and not upgrade.after.plan.fits:
        click.echo(f"  {upgrade.target}: vLLM would refuse to start: {upgrade.after.plan.error}")
    click.echo("")
    if upgrade.diff is None:
        click.echo(f"files: no render at {upgrade.target} (the problems above refuse it)")
    else:
        against = (f"`kit render --out {upgrade.out_dir} image.vllm_version={upgrade.target} --diff`"
                   if upgrade.diff_against == "folder" else f"a render at {upgrade.current} against one at "
                                                             f"{upgrade.target}")
        if upgrade.diff:
            click.echo(f"files ({against}):")
            click.echo(upgrade.diff, nl=False)
        else:
            click.echo(f"files ({against}): nothing changes")


@click.command()
@preset_arguments
@click.option("--to", "to", metavar="VERSION", required=True, callback=_release,
              help="The vLLM release to move to (X.Y.Z; the kit needs its flag snapshot and row: its own, or the "
                   "user's in $XDG_CONFIG_HOME/vllm-kit/).")
@click.option("--out", "out_dir", type=PathOption(folder=True), default=None,
              help="The deployment folder (its vllm-kit.yaml says what it is); the diff is against its files. "
                   "Without it, the preset at its release is compared with the same at VERSION.")
@click.option("--apply", "apply", is_flag=True,
              help="Render the upgrade into --out, the override recorded in its vllm-kit.yaml (only without problems; "
                   "a recorded image.pin_digest is dropped, the pinned image being the old release's).")
@click.option("--force", is_flag=True, help="With --apply: overwrite files you edited since the kit wrote them.")
@standard_options
def upgrade(args: tuple[str, ...], preset_option: str | None, to: str, out_dir: Path | None, apply: bool,
            force: bool, as_json: bool) -> None:
    """Move a deployment to another vLLM release: kit upgrade --to VERSION [--out DIR] [preset=NAME ...].

    Lists the flags the move touches (removed, renamed, refused values, deprecations, new spellings, changed
    defaults the command relies on), the checks of `kit validate` at VERSION, the memory plan before and after,
    and the diff of the render. Writes nothing unless --apply. Exit 0 when the upgrade has no problems, 1 when it
    has. A deployment pinned by digest (image.pin_digest) is not clean even then: the pinned image is the old
    release's, so --apply drops the pin and the steps after it are build, push and the new pin.
    """
    from kit.deploy.record import Request
    from kit.deploy.upgrade import plan_upgrade

    if apply and out_dir is None:
        raise click.UsageError("--apply writes the upgrade into a deployment folder: give --out DIR")
    if force and not apply:
        raise click.UsageError("--force goes with --apply (it overwrites your edits when writing)")
    ref, overrides, _ = split_args(args, preset_option)
    from kit.core.userdata import shadowed_user_files

    for note in shadowed_user_files([to]):
        status(f"note: {note}")
    result = plan_upgrade(Request(preset=ref, overrides=tuple(overrides)), out_dir, to)
    folder_image = _folder_image(out_dir) if apply and out_dir is not None else None  # read before --apply writes
    applied = _apply(result, out_dir, force) if apply else None
    given = (*(("--preset", preset_option) if preset_option else ()), *args)
    steps = next_steps(result, out_dir, applied, given, folder_image=folder_image) if result.writable else NextSteps()
    if as_json:
        data = result.as_data()
        data["applied"] = None if applied is None else {r.path: r.status for r in applied}
        data["next"] = list(steps.commands)
        emit_json(data, ok=result.writable,
                  problems=[problem_json(p.where, p.message, p.hint) for p in result.problems],
                  warnings=[str(w) for w in result.new_warnings])
    else:
        _print_outcome(result, applied, steps, apply=apply)
    if not result.writable:
        raise SystemExit(1)


def _apply(result, out_dir: Path | None, force: bool) -> list | None:  # noqa: ANN001 - kit.deploy.upgrade.Upgrade
    """--apply: the render at the target into the folder, only when the upgrade has no problems (None otherwise)."""
    if not result.writable:
        return None
    from kit.core.write import write_files

    assert out_dir is not None and result.files is not None  # --apply needs --out
    return write_files(result.files, out_dir, force=force, notify=status, remove_stale=True)


@dataclass(frozen=True)
class NextSteps:
    """What to run after the upgrade, worked out once for both outputs: ``commands`` exactly as printed (the JSON's
    ``next``), ``lines`` the status lines that print them (text mode)."""

    commands: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()


def next_steps(upgrade, out_dir: Path | None, applied: list | None,  # noqa: ANN001 - Upgrade
               given: tuple[str, ...] = (), *, folder_image: str | None = None) -> NextSteps:
    """The steps after a writable upgrade. A locked folder (kit lock wrote its lock) that the render at the target no
    longer matches: the locked build refuses until `kit lock` runs again, so that is the first step. ``given`` is
    what the user typed after the command (--preset, preset=, overrides): the clean step repeats it, so what it
    writes is what was just shown. ``folder_image``: the image the folder's files built before --apply wrote
    (_folder_image)."""
    to = upgrade.target
    kit = kit_command()
    relock = (relock_command(out_dir, upgrade.after.prepared)
              if out_dir is not None and upgrade.after.prepared is not None else None)
    if upgrade.dropped_pin is not None:
        return _repin_next(upgrade, out_dir, applied, relock)
    commands: list[str] = []
    lines: list[str] = []
    build = f"{kit} build --out {shlex.quote(str(out_dir))}"
    if upgrade.current == to and applied is not None and _image_changed(upgrade, folder_image):
        # the same release, another image (an override given with it): built before compose runs it
        commands = [*([relock] if relock else []), build]
        first = f"`{relock}` (the folder's lock no longer matches), then " if relock else ""
        lines.append(f"already at vLLM {to}; the image changed: next: {first}`{build}`")
    elif upgrade.current == to:
        lines.append(f"already at vLLM {to}")
    elif applied is not None:
        commands = [*([relock] if relock else []), build]
        first = f"`{relock}` (the folder's lock no longer matches), then " if relock else ""
        lines.append(f"upgraded to vLLM {to}: {out_dir}/vllm-kit.yaml records image.vllm_version={to}; next: "
                     f"{first}`{commands[-1]}`")
    if applied is not None or (upgrade.new_warnings and upgrade.current != to):
        return NextSteps(tuple(commands), tuple(lines))  # the warnings come first (_print_outcome's note)
    if out_dir is not None:
        commands.append(shlex.join([*shlex.split(kit), "upgrade", "--to", to, "--out", str(out_dir), *given,
                                    "--apply"]))
        lines.append(f"clean: `{commands[-1]}` writes it")
    else:
        named = "--preset" in given or any(arg.startswith("preset=") for arg in given)
        commands.append(shlex.join([*shlex.split(kit), "render", *(() if named else (f"preset={upgrade.preset}",)),
                                    *given, f"image.vllm_version={to}"]))
        lines.append(f"clean: `{commands[-1]}` renders it")
    return NextSteps(tuple(commands), tuple(lines))


def _folder_image(out_dir: Path) -> str | None:
    """The image the folder's rendered files build, as they are now (_image_of); None where a file the tag hashes is
    missing or a compose file does not read."""
    from kit.core.write import _read_regular
    from kit.deploy.deployment import BUILD_FILES
    from kit.deploy.render import TAGGED_FILES

    names = (*TAGGED_FILES, *BUILD_FILES, *(path.name for path in sorted(out_dir.glob("compose*.yaml"))))
    texts = {name: data.decode("utf-8", errors="replace") for name in names
             if (data := _read_regular(out_dir / name)) is not None}
    return _image_of(texts)


def _image_of(files: dict[str, str]) -> str | None:
    """The image rendered ``files`` build, as one string: its content tag (kit/deploy/render.py image_tag) and the
    references the compose files run their local builds by (kit/deploy/stack_images.py; a repository given with the
    command, image.repository, moves these and not the tag). None without the tag's files or with a compose file
    that does not read."""
    import yaml

    from kit.deploy.render import image_tag
    from kit.deploy.stack_images import stack_images

    tag = image_tag(files)
    try:
        built = sorted(image.ref for image in stack_images(files, {}) if image.built)
    except yaml.YAMLError:
        return None
    return None if tag is None else " ".join([tag, *built])


def _image_changed(upgrade, folder_image: str | None) -> bool:  # noqa: ANN001 - kit.deploy.upgrade.Upgrade
    """Whether --apply moved the folder to another image: what its files built before (``folder_image``,
    _folder_image) is not what the render it wrote builds (at the same release: its vLLM part is the same). Files
    outside those (.dockerignore) change no image."""
    return folder_image is None or folder_image != _image_of(dict(upgrade.after.files))


def _repin_next(upgrade, out_dir: Path | None, applied: list | None, relock: str | None) -> NextSteps:  # noqa: ANN001
    """Not clean: the running image is pinned by digest, and what is written is another image (vLLM VERSION, or an
    override given with it), to build and push first."""
    to = upgrade.target
    folder = out_dir if out_dir is not None else Path("DIR")
    commands = (*([relock] if relock else []), *repin_commands(folder, upgrade.after_repository))
    steps = repin_steps(folder, upgrade.after_repository, f"`{relock}`" if relock else None)
    moved = f"upgraded to vLLM {to}" if upgrade.current != to else f"written at vLLM {to}"
    pinned = f"the image at {upgrade.current}" if upgrade.current != to else "the image before this change"
    if applied is not None:
        line = (f"{moved}, and the pin {upgrade.dropped_pin} dropped: it is {pinned}, which compose would go on "
                f"running; next: {steps}")
    else:
        line = (f"not clean: the deployment is pinned to {upgrade.dropped_pin}, {pinned}; --apply drops the pin "
                f"(compose builds the new image here), then: {steps}")
    return NextSteps(commands, (line,))


def _print_outcome(upgrade, applied: list | None, steps: NextSteps, *, apply: bool) -> None:  # noqa: ANN001
    """Text mode: the report, what --apply wrote, and the problems or the next steps."""
    out_dir, to = upgrade.out_dir, upgrade.target
    _report(upgrade)
    for r in applied or []:
        click.echo(f"{r.status:>9}  {out_dir / r.path}")
    if upgrade.stale:
        status(f"note: {out_dir} differs from a render at {upgrade.current} too (the preset or the kit changed since "
               f"it was rendered), and the diff includes that: `{kit_command()} render --out {shlex.quote(str(out_dir))} --diff` shows that part")
    if not upgrade.writable:
        click.secho(f"the upgrade to {to} has {len(upgrade.problems)} problem(s):", fg="red", err=True)
        for problem in upgrade.problems:
            click.secho(f"  {problem}", fg="red", err=True)
        if apply:
            status("nothing written")
        return
    for line in steps.lines:
        status(line)
    if upgrade.new_warnings and upgrade.current != to:
        # a warning of the new release may be about the build itself (kit/data/compat.yaml release_warnings)
        status(f"note: read the {len(upgrade.new_warnings)} new warning(s) at {to} above before building: they may "
               "stop `kit build`")
