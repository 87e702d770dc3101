"""The CLI starts fast: `import kit.cli.main`, `--help`, `CMD --help` and completion load no pydantic, docker or jinja2."""

import subprocess
import sys

import click
import pytest

from kit.cli.main import COMMANDS, cli, load_command

pytestmark = pytest.mark.unit

HEAVY = ("pydantic", "docker", "jinja2", "rich")

# Runs the CLI in a fresh interpreter (sys.modules of this one already holds everything), then names what loaded.
PROBE = """
import os, sys
import click
from kit.cli.main import cli
try:
    cli.main(sys.argv[1:], prog_name="kit", standalone_mode=False)
except (SystemExit, click.ClickException):  # `kit` alone: help, then a usage error
    pass
loaded = sorted({m.split(".")[0] for m in sys.modules} & %r)
print("LOADED", ",".join(loaded))
"""


def heavy_modules_after(args: list[str], env: dict[str, str] | None = None) -> tuple[list[str], str]:
    import os

    done = subprocess.run([sys.executable, "-c", PROBE % (set(HEAVY),), *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})
    line = next(line for line in done.stdout.splitlines() if line.startswith("LOADED"))
    return [m for m in line.split(" ", 1)[1].split(",") if m], done.stdout


@pytest.mark.parametrize("args", [[], ["--help"], ["render", "--help"], ["plan", "--help"], ["presets", "show", "--help"],
                                  ["completion", "bash"]], ids=" ".join)
def test_help_loads_no_heavy_module(args):
    loaded, output = heavy_modules_after(args)
    assert loaded == [], output
    if args:
        assert "Usage: kit" in output or "complete" in output


def test_completion_of_keys_loads_no_heavy_module():
    env = {"_KIT_COMPLETE": "bash_complete", "COMP_WORDS": "kit render preset=cpu engine.dt", "COMP_CWORD": "3"}
    loaded, output = heavy_modules_after([], env)
    assert loaded == [] and "plain,engine.dtype=" in output, output


def test_a_command_that_runs_does_load_them():
    # The probe above can tell: running a render does import pydantic (the preset model) and jinja2.
    loaded, output = heavy_modules_after(["render", "preset=cpu", "--dry-run", "--out", "/nonexistent-kit-dir"])
    assert "pydantic" in loaded and "jinja2" in loaded, output


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_table_help_is_the_command_own(name):
    command = load_command(name)
    assert isinstance(command, click.Command)
    assert command.help.startswith(COMMANDS[name][1].rstrip(".")), (name, command.help)


def test_every_command_is_in_the_table():
    # A command module whose command is missing from COMMANDS would be unreachable.
    from pathlib import Path

    modules = {p.stem for p in (Path(__file__).resolve().parents[2] / "kit" / "cli").glob("*.py")}
    registered = {COMMANDS[name][0].split(":")[0].rsplit(".", 1)[1] for name in COMMANDS}
    assert modules - registered == {"__init__", "common", "main", "output"}
    assert cli.list_commands(click.Context(cli)) == sorted(COMMANDS)


def test_usage_line_names_the_preset_arguments():
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, ["render", "--help"], prog_name="kit")
    assert "Usage: kit render [OPTIONS] preset=NAME [KEY=VALUE ...]" in result.output
