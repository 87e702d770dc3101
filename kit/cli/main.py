"""Root group: global options, the error policy, and the explicit list of commands (imported when they run)."""

from __future__ import annotations

import errno
import importlib
import os
import sys

import click

from kit import __version__
from kit.cli.common import COMMAND_NAME, JSON_MODE, envelope, error_problems, fail, print_json
from kit.core.errors import KitError, one_line

# name -> (module:attribute, one-line help). The root group imports a command's module only when that command runs
# or completes, so `kit --help` prints from this table without loading pydantic, docker or jinja2. The help text is
# the command's own first docstring line; tests/unit/test_cli_lazy.py fails when the two drift apart.
COMMANDS: dict[str, tuple[str, str]] = {
    "render": ("kit.cli.render:render", "Write a deployment for a preset."),
    "validate": ("kit.cli.validate:validate", "Check a preset."),
    "init": ("kit.cli.init:init", "Write a preset of your own into ./presets/NAME.yaml."),
    "doctor": ("kit.cli.doctor:doctor", "Check this host."),
    "presets": ("kit.cli.presets:presets", "List the presets, one line each."),
    "gpus": ("kit.cli.presets:gpus", "List the GPU catalog."),
    "plan": ("kit.cli.plan:plan", "Predict vLLM's memory at start."),
    "wheelhouse": ("kit.cli.wheelhouse:wheelhouse", "Fill a wheelhouse for an offline build."),
    "build": ("kit.cli.build:build", "Build a preset's image."),
    "lock": ("kit.cli.lock:lock", "Pin a preset's inputs."),
    "push": ("kit.cli.push:push", "Push a built image."),
    "image-diff": ("kit.cli.imagediff:image_diff", "Compare two images' content."),
    "image-size": ("kit.cli.imagesize:image_size", "Size an image by layer, Python distribution and directory."),
    "smoke": ("kit.cli.smoke:smoke", "Prove a preset's stack answers."),
    "probe": ("kit.cli.probe:probe", "Measure a preset's real start-up."),
    "loadtest": ("kit.cli.loadtest:loadtest", "Load-test a running stack."),
    "fetch": ("kit.cli.fetch:fetch", "Download what vLLM will read into the HF cache volume."),
    "up": ("kit.cli.up:up", "Render, build, start detached and wait until it answers."),
    "warm": ("kit.cli.warm:warm", "Fill a deployment's caches before its first start."),
    "down": ("kit.cli.up:down", "Stop a stack started by `kit up` and remove its containers."),
    "ps": ("kit.cli.ops:ps", "List a stack's containers: kit ps --out DIR."),
    "logs": ("kit.cli.ops:logs", "Print a stack's logs: kit logs [-f] [SERVICE] --out DIR."),
    "status": ("kit.cli.ops:status", "Ask a running stack how it is: health, model, KV cache usage, requests running and waiting."),
    "upgrade": ("kit.cli.upgrade:upgrade", "Move a deployment to another vLLM release."),
    "completion": ("kit.cli.completion:completion", "Print the shell completion script."),
}


def load_command(name: str) -> click.Command:
    module_name, attribute = COMMANDS[name][0].split(":")
    return getattr(importlib.import_module(module_name), attribute)


class KitGroup(click.Group):
    """Loads commands lazily, and turns a KitError into one red line per problem and exit 1 (a traceback only with -v).

    Anything else that escapes a command is a bug in the kit, but the user still gets one line (and exit 1)
    rather than a page of Python: the traceback is there with -v for the bug report. With --json, every failure
    is the JSON envelope on stdout instead, with the same exit code.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:  # noqa: ARG002 - click's signature
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:  # noqa: ARG002 - click's
        return load_command(cmd_name) if cmd_name in COMMANDS else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def resolve_command(self, ctx: click.Context, args: list[str]):  # noqa: ANN201 - click's signature
        name, command, rest = super().resolve_command(ctx, args)
        ctx.meta[COMMAND_NAME] = name
        # Seen before the command parses its options, so a usage error in JSON mode is JSON as well.
        if "--json" in rest:
            ctx.meta[JSON_MODE] = True
        return name, command, rest

    def invoke(self, ctx: click.Context):  # noqa: ANN201
        def verbose() -> bool:  # read when it fails: the callbacks set ctx.obj inside super().invoke
            return bool(ctx.obj and ctx.obj.get("verbose"))

        def json_failure(error: Exception, exit_code: int) -> None:
            print_json(envelope(ctx.meta.get(COMMAND_NAME, ""), None, ok=False, problems=error_problems(error)))
            ctx.exit(exit_code)

        try:
            return super().invoke(ctx)
        except KitError as error:
            if verbose():
                raise
            if ctx.meta.get(JSON_MODE):
                json_failure(error, error.exit_code)
            fail(error)
            ctx.exit(error.exit_code)
        except click.exceptions.ClickException as error:
            if ctx.meta.get(JSON_MODE):
                json_failure(error, error.exit_code)
            raise  # usage errors (exit 2) are click's to report
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise  # deliberate exits
        except Exception as error:  # the last line of the one-line policy (re-raised as one line)
            if isinstance(error, OSError) and error.errno == errno.EPIPE:
                raise  # the reader went away (`kit plan | head`): click's main ends quietly, exit 1
            if verbose():
                raise
            if ctx.meta.get(JSON_MODE):
                json_failure(error, 1)
            click.secho(one_line(f"internal error: {type(error).__name__}: {error}"), fg="red", err=True)
            click.echo("hint: this is a bug in vllm-kit; run again with -v for the traceback and report it", err=True)
            ctx.exit(1)


@click.group(cls=KitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks and more detail (also accepted after the command).")
@click.option("--no-color", is_flag=True, help="No colour (also when NO_COLOR is set, or off a terminal).")
@click.version_option(__version__, prog_name="vllm-kit")
@click.pass_context
def cli(ctx: click.Context, verbose: bool, no_color: bool) -> None:
    """vllm-kit: presets to correct, slim, pinned vLLM deployments."""
    ctx.obj = {**(ctx.obj or {}), "verbose": verbose or bool((ctx.obj or {}).get("verbose"))}
    # https://no-color.org: any non-empty NO_COLOR turns colour off. Children inherit ctx.color.
    if no_color or os.environ.get("NO_COLOR"):
        ctx.color = False


def main() -> None:
    try:
        try:
            cli.main(prog_name="kit", standalone_mode=True)
        finally:
            sys.stdout.flush()  # what is still buffered fails here, not in the interpreter's exit
    except KeyboardInterrupt:  # pragma: no cover
        click.echo("interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        # The reader of stdout went away (`kit doctor | head -1`), which is how a pipe ends, not an error of the
        # kit: nothing more to say, and the interpreter must not flush into the closed pipe again on its way out.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    main()
