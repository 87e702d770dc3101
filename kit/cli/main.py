"""Root group: global options, the error policy, and the explicit list of commands."""

from __future__ import annotations

import sys

import click

from kit import __version__
from kit.cli.common import fail
from kit.errors import KitError


class KitGroup(click.Group):
    """Turns a KitError into one red line per problem and exit 1; a traceback only with -v."""

    def invoke(self, ctx: click.Context):  # noqa: ANN201
        try:
            return super().invoke(ctx)
        except KitError as error:
            if ctx.obj and ctx.obj.get("verbose"):
                raise
            fail(error)
            ctx.exit(error.exit_code)


@click.group(cls=KitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks and more detail.")
@click.version_option(__version__, prog_name="vllm-kit")
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """vllm-kit: presets to correct, slim, pinned vLLM deployments."""
    ctx.obj = {"verbose": verbose}


def _add_commands() -> None:
    from kit.cli import (build, doctor, fetch, imagediff, lock, plan, presets, push, render, smoke, up, validate,
                         wheelhouse)
    from kit.cli import loadtest

    cli.add_command(render.render)
    cli.add_command(validate.validate)
    cli.add_command(doctor.doctor)
    cli.add_command(presets.presets)
    cli.add_command(presets.gpus)
    cli.add_command(plan.plan)
    cli.add_command(wheelhouse.wheelhouse)
    cli.add_command(build.build)
    cli.add_command(lock.lock)
    cli.add_command(push.push)
    cli.add_command(imagediff.image_diff)
    cli.add_command(smoke.smoke)
    cli.add_command(fetch.fetch)
    cli.add_command(up.up)
    cli.add_command(up.down)
    cli.add_command(loadtest.loadtest)


_add_commands()


def main() -> None:
    try:
        cli.main(prog_name="kit", standalone_mode=True)
    except KeyboardInterrupt:  # pragma: no cover
        click.echo("interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
