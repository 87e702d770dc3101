"""`kit completion SHELL` and what TAB offers: preset names, KEY= paths of the preset model, enum values."""

import pytest
from click.shell_completion import ShellComplete
from click.testing import CliRunner

from kit.cli.completion import preset_fields
from kit.cli.main import cli
from kit.config.preset import Preset
from kit.config.preset_files import preset_names

pytestmark = pytest.mark.unit


def completions(line: str) -> list[str]:
    """What TAB offers after ``line`` (words split as a shell does; a trailing space starts a new word)."""
    words = line.split()
    args, incomplete = (words[1:], "") if line.endswith(" ") else (words[1:-1], words[-1])
    return [item.value for item in ShellComplete(cli, {}, "kit", "_KIT_COMPLETE").get_completions(args, incomplete)]


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o nosort -F"), ("zsh", "#compdef kit"),
                                           ("fish", "complete --no-files --command kit")])
def test_completion_prints_the_script(shell, marker):
    result = CliRunner().invoke(cli, ["completion", shell], prog_name="kit")
    assert result.exit_code == 0 and marker in result.stdout and "_KIT_COMPLETE" in result.stdout


def test_completion_refuses_an_unknown_shell():
    assert CliRunner().invoke(cli, ["completion", "tcsh"]).exit_code == 2


def test_command_names_complete():
    assert completions("kit re") == ["render"]
    assert set(completions("kit p")) == {"plan", "presets", "probe", "ps", "push"}


def test_preset_names_complete():
    assert completions("kit render preset=") == [f"preset={name}" for name in preset_names()]
    assert completions("kit build preset=rtx") == ["preset=rtx3090x2-fp16", "preset=rtx4090-awq"]
    assert completions("kit render --preset rtx4") == ["rtx4090-awq"]
    assert completions("kit render preset=cpu --with-preset cpu-") == ["cpu-embed"]
    # bash splits the word at "=": completing "=" itself, or the value after it.
    assert completions("kit render preset =") == preset_names()
    assert completions("kit render preset = rtx4") == ["rtx4090-awq"]


def test_key_paths_come_from_the_preset_model():
    # Every section.field of the pydantic model, and nothing else (the schema file is generated from it).
    expected = {f"{section}.{name}" for section, info in Preset.model_fields.items()
                if hasattr(info.annotation, "model_fields") or hasattr(_unwrap(info.annotation), "model_fields")
                for name in _unwrap(info.annotation).model_fields}
    assert set(preset_fields()) == expected
    offered = completions("kit render preset=cpu engine.max_")
    assert "engine.max_model_len=" in offered and "engine.max_num_seqs=" in offered
    assert all(item.startswith("engine.max_") and item.endswith("=") for item in offered)
    assert "preset=" in completions("kit validate ") and "engine." in completions("kit validate ")
    assert "preset=" not in completions("kit validate preset=cpu ")


def test_enum_values_complete():
    assert set(completions("kit render preset=cpu engine.dtype=")) >= {"engine.dtype=bfloat16", "engine.dtype=float16"}
    assert completions("kit render preset=cpu cluster.network=b") == ["cluster.network=bridge"]
    assert completions("kit plan preset=cpu engine.enforce_eager=") == ["engine.enforce_eager=true",
                                                                       "engine.enforce_eager=false"]
    assert completions("kit render engine.dtype = bf") == ["bfloat16"]
    assert completions("kit render engine.no_such_field=") == []


def _unwrap(annotation):
    """``Cluster | None`` -> ``Cluster``."""
    for candidate in getattr(annotation, "__args__", ()):
        if hasattr(candidate, "model_fields"):
            return candidate
    return annotation
