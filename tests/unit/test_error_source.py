"""Errors name their source (issue 36): a value from the command line is named as `override FIELD`, never as the
shipped preset's file (a path a wheel user does not have), with `field` set in --json; a problem in the user's own
preset file names that file as the user gave it, and the field."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.datafiles import PRESETS_DIR

pytestmark = pytest.mark.unit


def validate(*args: str):
    return CliRunner().invoke(cli, ["validate", *args])


@pytest.mark.parametrize(("override", "field"), [
    ("engine.max_model_len=50000", "engine.max_model_len"),  # the planner's refusal: more than the model's length
    ("image.cuda=11.0", "image.cuda"),  # a check across sections (Preset._consistent)
    ("hardware.gpu=zzzz", "hardware.gpu"),
])
def test_an_overrides_problem_names_the_override_and_sets_the_field(override, field):
    text = validate("preset=rtx4090-awq", override)
    assert text.exit_code == 1, text.output
    assert text.stderr.startswith(f"override {field}: "), text.stderr
    assert "presets/" not in text.stderr, text.stderr
    [problem] = json.loads(validate("preset=rtx4090-awq", override, "--json").stdout)["problems"]
    assert (problem["file"], problem["field"]) == (None, field), problem


def test_a_preset_files_problem_names_the_file_as_given_and_the_field(tmp_path):
    text = (PRESETS_DIR / "rtx4090-awq.yaml").read_text()
    mine = tmp_path / "mine.yaml"
    mine.write_text(text.replace("max_model_len: 8192", "max_model_len: 50000"))
    assert "max_model_len: 50000" in mine.read_text()
    (tmp_path / "sub").mkdir()
    with contextlib.chdir(tmp_path / "sub"):
        result = validate("preset=../mine.yaml")
        data = json.loads(validate("preset=../mine.yaml", "--json").stdout)
    assert result.exit_code == 1
    assert result.stderr.startswith("../mine.yaml: engine.max_model_len: User-specified max_model_len (50000)"), \
        result.stderr
    [problem] = data["problems"]
    assert (problem["file"], problem["field"]) == ("../mine.yaml", "engine.max_model_len"), problem
    assert Path(tmp_path / "sub" / problem["file"]).resolve() == mine.resolve()
