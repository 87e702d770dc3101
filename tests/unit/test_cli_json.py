"""One JSON envelope for every command: {ok, command, data, problems: [{file, field, message, hint}], warnings}.

Errors in JSON mode are the envelope too, on stdout, with the exit code of the text mode (1 for the user's
problems, 2 for usage errors).
"""

import json

import click
import pytest
from click.testing import CliRunner

from kit.cli.main import COMMANDS, cli, load_command

pytestmark = pytest.mark.unit

KEYS = {"ok", "command", "data", "problems", "warnings"}
PROBLEM_KEYS = {"file", "field", "message", "hint"}


def run_json(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    envelope = json.loads(result.stdout)  # nothing else on stdout: one parseable object
    assert set(envelope) == KEYS, envelope
    assert envelope["ok"] is (result.exit_code == 0)
    assert isinstance(envelope["warnings"], list) and all(isinstance(w, str) for w in envelope["warnings"])
    for problem in envelope["problems"]:
        assert set(problem) == PROBLEM_KEYS and problem["message"]
    return result.exit_code, envelope


def every_command() -> list[tuple[str, click.Command]]:
    commands = []
    for name in sorted(COMMANDS):
        command = load_command(name)
        commands.append((name, command))
        if isinstance(command, click.Group):
            commands += [(f"{name} {sub}", c) for sub, c in command.commands.items()]
    return commands


@pytest.mark.parametrize("name, command", every_command(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_command_has_json_and_verbose(name, command):
    options = {opt for p in command.params for opt in p.opts}
    assert {"--json", "-v"} <= options, name
    assert "JSON" in next(p.help for p in command.params if "--json" in p.opts)


def test_render_envelope(tmp_path):
    code, env = run_json("render", "preset=cpu", "--out", str(tmp_path))
    assert code == 0 and env["command"] == "render" and env["problems"] == []
    assert env["data"]["preset"] == "cpu" and env["data"]["files"]["compose.yaml"] == "create"


def test_validate_envelope_ok_and_problems():
    code, env = run_json("validate", "preset=cpu")
    assert code == 0 and env["data"]["preset"] == "cpu"
    code, env = run_json("validate", "preset=cpu", "engine.max_model_len=0", "engine.tensor_parallel_size=0")
    assert code == 1 and env["ok"] is False and env["data"] is None
    assert {p["field"] for p in env["problems"]} == {"engine.max_model_len", "engine.tensor_parallel_size"}
    assert {p["file"] for p in env["problems"]} == {None}  # the values came from the command line, not the file


def test_presets_gpus_show_plan_completion_envelopes():
    code, env = run_json("presets")
    assert code == 0 and env["command"] == "presets" and {r["name"] for r in env["data"]} >= {"cpu", "a100x8"}
    code, env = run_json("presets", "show", "preset=cpu", "engine.max_num_seqs=3")
    assert code == 0 and env["command"] == "presets show" and env["data"]["resolved"]["engine"]["max_num_seqs"] == 3
    code, env = run_json("gpus")
    assert code == 0 and "rtx4090" in env["data"]
    code, env = run_json("plan", "preset=rtx4090-awq")
    assert code == 0 and env["data"]["fits"] is True and env["data"]["kv_cache_tokens"] > 0
    code, env = run_json("completion", "zsh")
    assert code == 0 and "#compdef kit" in env["data"]["script"]


def test_plan_that_does_not_fit_is_ok_false_with_the_plan_as_data():
    code, env = run_json("plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "rtx4090")
    assert code == 1 and env["ok"] is False and env["data"]["fits"] is False
    assert "To serve at least one request" in env["problems"][0]["message"]


def test_plan_text_says_by_how_much_it_does_not_fit():
    result = CliRunner().invoke(cli, ["plan", "--model", "Qwen/Qwen3-32B", "--gpu", "rtx4090"])
    assert result.exit_code == 1
    assert "does not fit by" in result.stdout and "-" not in result.stdout.split("KV cache", 1)[1].splitlines()[0]


# Commands that need Docker or a GPU to succeed: their failure before any of that is still the envelope.
@pytest.mark.parametrize("args", [
    ["build", "preset=nope"], ["lock", "preset=nope"], ["push", "preset=nope", "--registry", "127.0.0.1:1"],
    ["smoke", "preset=nope"], ["probe", "preset=nope"], ["fetch", "preset=nope"], ["up", "preset=nope", "--out", "x"],
    ["warm", "preset=nope", "--out", "x"], ["wheelhouse", "preset=nope", "wh"], ["doctor", "preset=nope"], ["render", "preset=nope"],
], ids=lambda a: a[0])
def test_user_errors_are_the_envelope_with_exit_1(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, env = run_json(*args)
    assert code == 1 and env["command"] == args[0] and env["data"] is None
    assert "nope" in env["problems"][0]["message"]


@pytest.mark.parametrize("args", [["render"], ["render", "preset=cpu", "bogus"], ["plan", "--tp", "0"],
                                  ["completion", "tcsh"], ["down"], ["image-diff", "only-one"]],
                         ids=lambda a: " ".join(a))
def test_usage_errors_are_the_envelope_with_exit_2(args):
    code, env = run_json(*args)
    assert code == 2 and env["ok"] is False and env["command"] == args[0] and env["problems"][0]["message"]


def test_text_mode_unchanged_by_the_envelope():
    result = CliRunner().invoke(cli, ["validate", "preset=cpu", "engine.max_model_len=0"])
    assert result.exit_code == 1 and result.stdout == "" and "override engine.max_model_len: " in result.stderr


def test_verbose_accepted_after_the_command(monkeypatch):
    import kit.deploy.pipeline

    def broken(*_args, **_kwargs):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(kit.deploy.pipeline, "load_and_check", broken)  # stands in for a kit bug
    assert CliRunner().invoke(cli, ["validate", "preset=cpu"]).exit_code == 1
    late = CliRunner().invoke(cli, ["validate", "preset=cpu", "-v"])
    assert isinstance(late.exception, ZeroDivisionError)


def test_no_color(tmp_path, monkeypatch):
    coloured = CliRunner().invoke(cli, ["render", "preset=cpu", "--out", str(tmp_path / "a")], color=True)
    assert "\x1b[" in coloured.stdout
    plain = CliRunner().invoke(cli, ["--no-color", "render", "preset=cpu", "--out", str(tmp_path / "b")], color=True)
    assert "\x1b[" not in plain.output and "create" in plain.stdout
    monkeypatch.setenv("NO_COLOR", "1")
    plain = CliRunner().invoke(cli, ["render", "preset=cpu", "--out", str(tmp_path / "c")], color=True)
    assert "\x1b[" not in plain.output
