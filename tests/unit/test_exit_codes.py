"""One exit code per kind of mistake, on every command (docs/guide/commands.md: Errors and exit codes).

2: the command line's own grammar: an unknown or missing option, an option value that is not of its type (a
number, one of the kit's fixed words), a positional that is not preset=NAME or SECTION.FIELD=VALUE, options that
do not go together. 1: what the command line names or sets: a preset, a field and its value, a catalog entry, an
image, and every path: one that does not exist where it must, or a file where a directory goes (or the other way
round). The commands' path options are found by walking the CLI, so a new one is covered (and must use
PathOption) without editing this file.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from kit.cli.common import PathOption
from kit.cli.main import COMMANDS, cli, load_command

pytestmark = pytest.mark.unit


def walk(command: click.Command, names: tuple[str, ...]):
    if isinstance(command, click.Group):
        for name in command.list_commands(click.Context(command)):
            yield from walk(command.get_command(click.Context(command), name), (*names, name))
    else:
        yield names, command


COMMAND_LIST = [entry for name in sorted(COMMANDS) for entry in walk(load_command(name), (name,))]
PATH_PARAMS = [(names, param) for names, command in COMMAND_LIST for param in command.params
               if isinstance(param.type, click.Path)]


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_the_walk_finds_the_path_options():
    found = {(" ".join(names), param.opts[0]) for names, param in PATH_PARAMS}
    assert {("down", "--out"), ("build", "--wheelhouse"), ("build", "--lock"), ("probe", "--model-dir"),
            ("loadtest", "--dataset"), ("render", "--out"), ("wheelhouse", "--out")} <= found
    assert all(isinstance(param, click.Option) for _, param in PATH_PARAMS)  # a positional path needs its own row


@pytest.mark.parametrize(("names", "param"), PATH_PARAMS, ids=[f"{' '.join(n)} {p.opts[0]}" for n, p in PATH_PARAMS])
def test_every_path_option_is_a_kit_path_and_what_is_on_disk_exits_1(names, param, tmp_path):
    assert isinstance(param.type, PathOption), f"kit {' '.join(names)} {param.opts[0]}: use kit.cli.common.PathOption"
    assert param.type.file_okay != param.type.dir_okay  # each names a folder or a file, never "either"
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    wrong_kind = a_file if param.type.dir_okay else tmp_path
    cases = [wrong_kind] + ([tmp_path / "missing"] if param.type.exists else [])
    for value in cases:
        result = invoke(*names, param.opts[0], str(value), "--json")
        assert result.exit_code == 1, (value, result.output)
        problem = json.loads(result.stdout)["problems"][0]
        kind = "directory" if param.type.dir_okay else "file"
        reason = "does not exist" if value.name == "missing" else (
            f"is a regular file, not a {kind}" if value == a_file else f"is a directory, not a {kind}")
        assert problem["message"] == f"{param.opts[0]} {value}: {reason}"
        assert problem["hint"] == f"{param.opts[0]} takes {'an existing' if param.type.exists else 'a'} {kind}"
        text = invoke(*names, param.opts[0], str(value))
        assert text.exit_code == 1 and "Usage:" not in text.stderr, text.stderr


def test_a_path_that_may_be_created_is_not_required_to_exist():
    # --out and --wheelhouse are written into (created when missing); --log and --report are written.
    optional = {(" ".join(n), p.opts[0]) for n, p in PATH_PARAMS if not p.type.exists}
    assert {("render", "--out"), ("up", "--wheelhouse"), ("probe", "--log"), ("loadtest", "--report")} <= optional


def test_wheelhouse_positional_dir_follows_the_same_rule(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    result = invoke("wheelhouse", "preset=cpu", str(a_file))
    assert result.exit_code == 1 and f"DIR {a_file}: is a regular file, not a directory" in result.stderr


USAGE = [  # exit 2: the command line's grammar
    ("down",),  # a required option missing
    ("up", "preset=cpu"),
    ("push", "preset=cpu"),
    ("render", "preset=cpu", "--out"),  # an option without its value
    ("render", "preset=cpu", "--target", "swarm"),  # not one of the option's words
    ("render", "preset=cpu", "--with", "no-such-profile"),
    ("up", "preset=cpu", "--out", "d", "--port", "eighty"),  # not of the option's type
    ("probe", "preset=cpu", "--timeout", "soon"),
    ("render", "preset=cpu", "--no-such-option"),
    ("validate", "preset=cpu", "=3"),  # a positional that is not preset=NAME or SECTION.FIELD=VALUE
    ("validate", "preset=cpu", "engine=3"),
    ("validate", "preset=cpu", "engine.=3"),
    ("validate", "preset=cpu", ".dtype=half"),
    ("validate", "preset=cpu", "engine..dtype=half"),
    ("validate", "cpu-without-equals"),
    ("validate", "preset=cpu", "--preset", "rtx4090-awq"),  # the preset given twice
    ("validate",),  # no preset
    ("build", "preset=cpu", "--offline"),  # options that go together only
    ("image-diff", "only-one-image"),
]

INPUT = [  # exit 1: what the command line names or sets
    ("validate", "preset=no-such-preset"),
    ("render", "preset=no-such-preset", "--dry-run"),
    ("validate", "preset=presets/no-such-file.yaml"),
    ("validate", "preset=cpu", "engine.no_such_field=3"),  # the same mistake in a preset file exits 1 too
    ("validate", "preset=cpu", "engine.max_model_len=many"),
    ("plan", "--model", "Qwen/Qwen3-8B", "--gpu", "no-such-gpu"),
]


@pytest.mark.parametrize("args", USAGE, ids=[" ".join(a) for a in USAGE])
def test_usage_errors_exit_2(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke(args[0], "--json", *args[1:])  # before the rest: `--out` last must lack its value
    assert result.exit_code == 2, result.output
    assert json.loads(result.stdout)["ok"] is False


@pytest.mark.parametrize("args", INPUT, ids=[" ".join(a) for a in INPUT])
def test_problems_in_the_input_exit_1(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke(*args, "--json")
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["ok"] is False


def test_a_missing_wheelhouse_is_the_inputs_problem_and_a_missing_out_is_usage(tmp_path: Path):
    # The pair: both follow the rule (a path that is not there: 1; an option that is not given: 2).
    wheelhouse = invoke("build", "preset=cpu", "--out", str(tmp_path / "d"), "--wheelhouse", str(tmp_path / "none"))
    assert wheelhouse.exit_code == 1 and "--wheelhouse" in wheelhouse.stderr
    assert invoke("up", "preset=cpu").exit_code == 2
