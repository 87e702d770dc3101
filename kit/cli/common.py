"""What every command shares: preset arguments, the JSON envelope, output helpers.

Imported by every command module, and by completion: it must stay light (no pydantic, docker or jinja2 here;
those load when a command runs).
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kit.core.errors import KitError, one_line
from kit.core.inputfiles import NUMBER_MAX
from kit.core.overrides import MalformedOverride, overridden_field, split_override

if TYPE_CHECKING:  # loaded when a command runs, not for --help
    from kit.deploy.record import Resolved

# ctx.meta is shared by a context and its children: the root group reads these when a command fails.
JSON_MODE = "kit.json"
COMMAND_NAME = "kit.command"
PRESET_ARGS_METAVAR = "preset=NAME [KEY=VALUE ...]"


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange, refusing nan and inf: nan compares false, so it slips through any range check."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class PathOption(click.Path):
    """The type of every path a command takes: a directory (``folder=True``) or a file, as a ``Path``.

    The exit-code rule (docs/guide/commands.md): the shape of the command line is usage (exit 2); what a path
    names on disk is the input. So a path that does not exist where it must, or is a file where a directory goes
    (or the other way round), is a KitError naming the option and the path, exit 1, like a preset that does not
    resolve; never click's usage error.
    """

    def __init__(self, *, folder: bool, exists: bool = False):
        super().__init__(path_type=Path, exists=exists, file_okay=not folder, dir_okay=folder)

    def convert(self, value, param, ctx):
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as error:
            from kit.core.write import file_kind

            path = Path(os.fsdecode(value))
            option = "/".join(param.opts) if param is not None and param.opts else "DIR" if self.dir_okay else "FILE"
            kind = "directory" if self.dir_okay else "file"
            try:
                mode = os.stat(path).st_mode
            except FileNotFoundError:
                reason = "does not exist"
            except OSError as os_error:
                reason = os_error.strerror or error.message
            else:
                is_dir = stat.S_ISDIR(mode)
                reason = f"is {file_kind(mode)}, not a {kind}" if is_dir != self.dir_okay else error.message
            raise KitError(f"{option} {path}: {reason}",
                           hint=f"{option} takes {'an existing' if self.exists else 'a'} {kind}") from None


class VllmInteger(click.ParamType):
    """An option that mirrors a `vllm serve` integer flag takes what vLLM's converter takes (kit/config/vllmint.py:
    16k, 25.6k, 16K, 1M; auto for human_readable_int_or_auto, as -1), at least 1 and at most NUMBER_MAX otherwise."""

    name = "integer"

    def __init__(self, converter: str) -> None:
        self.converter = converter

    def convert(self, value, param, ctx):
        from kit.config.vllmint import AUTO, read_vllm_int

        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            number = read_vllm_int(str(value), self.converter)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if number == AUTO and self.converter == "human_readable_int_or_auto":
            return number
        if not 1 <= number <= NUMBER_MAX:
            self.fail(f"{value!r} is not in the range 1 to {NUMBER_MAX}", param, ctx)
        return number


def count_option_type(minimum: int = 1) -> click.IntRange:
    """A whole-number option: at least ``minimum``, at most NUMBER_MAX (a usage error otherwise)."""
    return click.IntRange(min=minimum, max=NUMBER_MAX)


def split_args(args: tuple[str, ...], preset_option: str | None, *, extra_keys: tuple[str, ...] = ()) -> tuple[
    str | None, list[str], dict[str, str]
]:
    """Split ``preset=NAME KEY=VALUE ...`` into (preset ref, overrides, extras named in ``extra_keys``).

    ``model=ID`` is taken on every command that takes a preset: it becomes the overrides that swap the model
    (kit/deploy/record.py ``model_overrides``: the id, no generated model, the id as the served name)."""
    preset = preset_option
    overrides: list[str] = []
    extras: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise click.UsageError(f"{arg!r}: expected preset=NAME or SECTION.FIELD=VALUE")
        if key == "preset":
            if preset is not None and preset != value:
                raise click.UsageError("the preset is given twice (preset= and --preset)")
            preset = value
        elif key in extra_keys:
            extras[key] = value
        elif key == "model":
            if not value:
                raise click.UsageError("model= needs a hub id or a model directory, e.g. model=Qwen/Qwen3-0.6B")
            from kit.deploy.record import model_overrides

            overrides.extend(model_overrides(value))
        else:
            try:  # a malformed KEY=VALUE is a usage error on every command; a bad VALUE is the input's (exit 1)
                split_override(arg, dotted=True)
            except MalformedOverride as exc:
                raise click.UsageError(str(exc)) from None
            overrides.append(arg)
    return preset, overrides, extras


def require_preset(preset: str | None) -> str:
    if not preset:
        raise click.UsageError("no preset: pass preset=NAME (see `kit presets`)")
    return preset


def status(message: str) -> None:
    """Status and progress go to stderr; data goes to stdout."""
    click.echo(message, err=True)


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def problem_json(where: str | None, message: str, hint: str | None) -> dict[str, str | None]:
    """One problem of the envelope: ``where`` ("presets/x.yaml: engine.dtype", a file, or a field) split in two."""
    file, field = None, None
    if where and overridden_field(where) is not None:  # a value from the command line: no file holds it
        field = overridden_field(where)
    elif where:
        head, sep, tail = where.partition(": ")
        if sep:
            file, field = head, tail
        elif "/" in where or where.endswith((".yaml", ".yml", ".json")):
            file = where
        else:
            field = where
    return {"file": file, "field": field, "message": one_line(message), "hint": one_line(hint) if hint else None}


def error_problems(error: Exception) -> list[dict[str, str | None]]:
    if isinstance(error, KitError):
        if error.problems:
            return [problem_json(p.where, p.message, p.hint or error.hint) for p in error.problems]
        return [problem_json(None, error.message, error.hint)]
    if isinstance(error, click.ClickException):
        return [problem_json(None, error.format_message(), None)]
    return [problem_json(None, f"{type(error).__name__}: {error}", "this is a bug in vllm-kit; run with -v")]


def envelope(command: str, data: Any, *, ok: bool = True, problems: list[dict[str, str | None]] | None = None,
             warnings: list[str] | None = None) -> dict[str, Any]:
    """The one shape every ``--json`` prints (docs/guide/commands.md: JSON output). ``ok`` is true exactly when the
    exit code is 0."""
    return {"ok": ok, "command": command, "data": data, "problems": problems or [],
            "warnings": [one_line(str(w)) for w in warnings or []]}


def emit_json(data: Any, *, ok: bool = True, problems: list[dict[str, str | None]] | None = None,
              warnings: list[str] | None = None) -> None:
    """Print the envelope for the running command (its name is what the root group recorded)."""
    ctx = click.get_current_context()
    print_json(envelope(ctx.meta.get(COMMAND_NAME, ctx.info_name or ""), data, ok=ok, problems=problems,
                        warnings=warnings))


def _set_json_mode(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[JSON_MODE] = True
    return value


def _set_verbose(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        root = ctx.find_root()
        root.obj = {**(root.obj or {}), "verbose": True}


def standard_options(func):
    """`--json` (the envelope; the command gets ``as_json``) and `-v` accepted after the command name too."""
    func = click.option("-v", "--verbose", is_flag=True, expose_value=False, callback=_set_verbose,
                        help="Show tracebacks and more detail (same as `kit -v`).")(func)
    func = click.option("--json", "as_json", is_flag=True, is_eager=True, callback=_set_json_mode,
                        help="Print one JSON object on stdout: {ok, command, data, problems, warnings}.")(func)
    return func


class SubGroup(click.Group):
    """A group under the root (`kit presets show`): the envelope's command names both words."""

    def resolve_command(self, ctx: click.Context, args: list[str]):  # noqa: ANN201 - click's signature
        name, command, rest = super().resolve_command(ctx, args)
        ctx.meta[COMMAND_NAME] = f"{ctx.info_name} {name}"
        return name, command, rest


def fail(error: KitError) -> None:
    for line in error.lines():
        click.secho(line, fg="red", err=True)
    for line in error.detail:
        click.echo(one_line(line), err=True)
    if error.hint:
        click.echo(one_line(f"hint: {error.hint}"), err=True)


def preset_arguments(func):
    """`preset=NAME KEY=VALUE ...` positional arguments plus --preset, completed from the presets and their schema."""
    from kit.cli.completion import complete_preset_args, complete_preset_name

    func = click.argument("args", nargs=-1, metavar=PRESET_ARGS_METAVAR, shell_complete=complete_preset_args)(func)
    func = click.option("--preset", "preset_option", metavar="NAME", shell_complete=complete_preset_name,
                        help="Preset name or path (same as preset=NAME).")(func)
    return func


def kit_command() -> str:
    """How to run this kit again from the user's shell, for the commands it prints: ``kit`` when that is what PATH
    finds, else the console script as it was invoked (``.venv/bin/kit`` under `make run`), else the module."""
    import os
    import shlex
    import shutil
    import sys

    if os.environ.get("VLLM_KIT_PROG"):  # the wrapper that ran us says how its user runs the kit (`make run`)
        return os.environ["VLLM_KIT_PROG"]
    invoked = sys.argv[0] if sys.argv else ""
    on_path = shutil.which("kit")
    if Path(invoked).name == "kit":
        if on_path and os.path.realpath(on_path) == os.path.realpath(invoked):
            return "kit"
        return shlex.quote(invoked)
    if on_path and Path(on_path).parent == Path(sys.executable).parent:
        return "kit"
    return f"{shlex.quote(sys.executable)} -m kit.cli.main"


# ctx.meta keys of the record options every deployment command takes (deployment_options), read by
# resolve_deployment: the commands pass them on without naming them.
UNSET = "kit.unset"
FIT_RECORD = "kit.fit_record"


def _unset(ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> None:
    if value:
        ctx.meta[UNSET] = value


def _fit_record(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        if ctx.meta.get(FIT_RECORD) not in (None, param.name):
            raise click.UsageError("--check-fit and --always-allow-no-fit: the fit check is either on or off")
        ctx.meta[FIT_RECORD] = param.name


def deployment_options(func):
    """How a command's preset meets the record of its --out folder (kit/deploy/record.py)."""
    func = click.option("--check-fit", is_flag=True, expose_value=False, callback=_fit_record,
                        help="Turn the memory fit check back on for this folder (drops a recorded "
                             "--always-allow-no-fit).")(func)
    func = click.option("--always-allow-no-fit", is_flag=True, expose_value=False, callback=_fit_record,
                        help="Allow a plan that does not fit in this folder from now on (recorded; --allow-no-fit "
                             "is for one command).")(func)
    func = click.option("--unset", metavar="KEY", multiple=True, expose_value=False, callback=_unset,
                        help="Drop one recorded override (KEY of its KEY=VALUE), or the recorded --base-image "
                             "(base_image); repeatable.")(func)
    func = click.option("--reset-overrides", is_flag=True,
                        help="Drop the overrides recorded in the --out folder before applying this command's.")(func)
    func = click.option("--accept-preset-change", is_flag=True,
                        help="Render from the recorded preset although it changed since the folder was rendered "
                             "(the change is shown without it).")(func)
    func = click.option("--replace", is_flag=True,
                        help="Render another preset into a folder that holds a deployment (nothing recorded carries "
                             "over).")(func)
    return func


def start_options(out_help: str):  # noqa: ANN201 - a click decorator
    """What a command that builds and starts a stack takes (kit up, kit warm): the folder, the port, the build's
    inputs, and the overrides of the write and the fit checks."""
    def decorate(func):
        for option in reversed([
            click.option("--out", "out_dir", type=PathOption(folder=True), required=True, help=out_help),
            click.option("--port", type=click.IntRange(1, 65535),
                         help="Host port (default: the preset's); recorded as runtime.port."),
            click.option("--wheelhouse", type=PathOption(folder=True),
                         help="Offline build from this wheelhouse (filled if empty)."),
            click.option("--base-image", metavar="REF", help="Build on this base instead of the table's."),
            click.option("--force", is_flag=True, help="Overwrite render files you edited."),
            click.option("--allow-no-fit", is_flag=True,
                         help="Start although the memory plan says vLLM would not start."),
        ]):
            func = option(func)
        return func
    return decorate


def resolve_deployment(args: tuple[str, ...], preset_option: str | None, out_dir: Path | None, *,
                       port: int | None = None, target: str | None = None, base_image: str | None = None,
                       with_profiles: tuple[str, ...] = (), without: tuple[str, ...] = (),
                       with_presets: tuple[str, ...] = (), allow_no_fit: bool = False, replace: bool = False,
                       reset_overrides: bool = False, accept_preset_change: bool = False) -> Resolved:
    """The inputs of a command that renders into ``out_dir``: its arguments over the folder's record."""
    from kit.deploy.record import Request, resolve

    ref, overrides, _ = split_args(args, preset_option)
    derived = (f"runtime.port={port}",) if port else ()
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    fit = meta.get(FIT_RECORD)
    return resolve(Request(preset=ref, overrides=tuple(overrides), with_profiles=tuple(with_profiles),
                           without=tuple(without), with_presets=tuple(with_presets), target=target,
                           base_image=base_image, allow_no_fit=allow_no_fit,
                           record_allow_no_fit=None if fit is None else fit == "always_allow_no_fit",
                           unset=tuple(meta.get(UNSET, ())), replace=replace, reset_overrides=reset_overrides,
                           accept_preset_change=accept_preset_change, derived=derived), out_dir)


def relock_command(out_dir: Path, prepared) -> str | None:  # noqa: ANN001 - kit.deploy.pipeline.Prepared
    """`kit lock --out DIR ...`, quoted for a shell, when ``out_dir`` is locked and ``prepared`` (what was just rendered
    there) no longer matches its lock: the locked build refuses until it runs. None otherwise.

    The options are the ones the lock was made with, as far as it records them: --offline when it was made offline
    (its ``offline``), or when it pinned a never-pushed local base by image ID (which only `kit lock --offline` pins
    again; a lock older than the ``offline`` field says so only that way). The wheelhouse is not recorded anywhere,
    so it is WHEELHOUSE (as the offline note names it), given when the render installs wheels."""
    import shlex

    from kit.image.lock import stale_lock

    stale = stale_lock(out_dir, prepared)
    if stale is None:
        return None
    options = " --wheelhouse WHEELHOUSE" if prepared.deployment.image.requirements else ""
    options += " --offline" if stale.offline else ""
    return f"{kit_command()} lock --out {shlex.quote(str(out_dir))}{options}"


def relock_step(out_dir: Path, prepared) -> str | None:  # noqa: ANN001 - kit.deploy.pipeline.Prepared
    """relock_command in backquotes, for the printed steps."""
    command = relock_command(out_dir, prepared)
    return None if command is None else f"`{command}`"


def repin_commands(out_dir: Path, repository: str | None) -> list[str]:
    """The commands after a render dropped an image.pin_digest: build the image the folder now describes, push it
    (then the pin kit push prints, which is a line it prints, not a command known here)."""
    import shlex

    from kit.image.registry import split_registry

    host = split_registry(repository)[0] if repository else None
    folder = shlex.quote(str(out_dir))
    kit = kit_command()
    return [f"{kit} build --out {folder}", f"{kit} push --out {folder} --registry {host or 'HOST[:PORT]'}"]


def repin_steps(out_dir: Path, repository: str | None, relock: str | None = None) -> str:
    """What to run after a render dropped an image.pin_digest (kit/deploy/pipeline.py follow_pin): lock again when
    the folder is locked (``relock``, from relock_step), build the image the folder now describes, push it, and render
    the pin kit push prints."""
    first = f"{relock} (the folder's lock no longer matches), " if relock else ""
    build, push = (f"`{command}`" for command in repin_commands(out_dir, repository))
    return f"{first}{build}, {push}, then the `kit render ... image.pin_digest=...` line it prints"
