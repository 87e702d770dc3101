"""The CLI's contract: exit codes, one line per problem, no traceback, nothing written on failure."""

import json

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.config.preset_files import preset_names


@pytest.fixture
def run():
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(cli, list(args), catch_exceptions=False)

    return invoke


def test_render_writes_the_stack(run, tmp_path):
    result = run("render", "preset=cpu", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    for name in ("Dockerfile", "compose.yaml", ".env.example", "requirements.txt", ".dockerignore"):
        assert (tmp_path / name).is_file()
    again = run("render", "--preset", "cpu", "--out", str(tmp_path), "--json")
    assert set(json.loads(again.stdout)["data"]["files"].values()) == {"identical"}


def test_render_override_and_dry_run(run, tmp_path):
    result = run("render", "preset=a100x8", "engine.max_model_len=16384", "--out", str(tmp_path), "--dry-run")
    assert result.exit_code == 0
    assert not any(tmp_path.iterdir())


def test_render_keeps_user_edits_unless_forced(run, tmp_path):
    run("render", "preset=cpu", "--out", str(tmp_path))
    (tmp_path / "compose.yaml").write_text("# mine\n")
    result = run("render", "preset=cpu", "engine.max_num_seqs=4", "--out", str(tmp_path))
    assert result.exit_code == 1
    assert "compose.yaml" in result.stderr and "--force" in result.stderr
    assert (tmp_path / "compose.yaml").read_text() == "# mine\n"
    assert run("render", "preset=cpu", "--out", str(tmp_path), "--force").exit_code == 0
    assert (tmp_path / "compose.yaml").read_text().startswith("# Rendered by vllm-kit")


def test_unknown_preset_exit_1_with_suggestion(run, tmp_path):
    result = run("render", "preset=a100x9", "--out", str(tmp_path))
    assert result.exit_code == 1
    assert "a100x8" in result.stderr and "Traceback" not in result.stderr
    assert not any(tmp_path.iterdir())


def test_bad_override_names_the_override_not_the_file(run, tmp_path):
    # The value came from the command line: the file (which may not hold the field at all) is not blamed.
    result = run("render", "preset=cpu", "engine.gpu_memory_utilization=2", "--out", str(tmp_path))
    assert result.exit_code == 1
    assert result.stderr.startswith("override engine.gpu_memory_utilization: Input should be less than or equal")
    assert "presets/cpu.yaml" not in result.stderr
    assert not any(tmp_path.iterdir())


def test_usage_errors_exit_2(run):
    assert run("render").exit_code == 2
    assert run("render", "preset=cpu", "bogus").exit_code == 2
    assert run("render", "preset=cpu", "port=9000").exit_code == 2
    assert run("render", "preset=cpu", "--preset", "a100x8").exit_code == 2


def test_validate(run):
    assert run("validate", "preset=rtx4090-awq").exit_code == 0
    result = run("validate", "preset=rtx4090-awq", "engine.max_model_len=0", "engine.tensor_parallel_size=0")
    assert result.exit_code == 1
    # Both values came from the command line: each line names its override, none blames the file.
    assert result.stderr.count("override engine.") == 2 and "presets/rtx4090-awq.yaml" not in result.stderr
    result = run("validate", "preset=cpu", "engine.dtype=float8", "--json")
    assert result.exit_code == 1 and json.loads(result.stdout)["ok"] is False
    assert json.loads(result.stdout)["problems"][0]["field"] == "engine.dtype"


def test_presets_list_and_show(run):
    result = run("presets")
    assert result.exit_code == 0
    assert len(result.stdout.strip().splitlines()) == len(preset_names()) + 2  # a header and its rule
    shown = run("presets", "show", "preset=a100x8", "engine.max_num_seqs=64")
    assert "max_num_seqs: 64" in shown.stdout


def test_gpus_lists_catalog(run):
    result = run("gpus")
    assert "rtx4090" in result.stdout and "a100-80gb" in result.stdout


def test_no_docker_engine_is_one_line_saying_how_to_start_one(tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no-such.sock")
    result = subprocess.run([sys.executable, "-m", "kit.cli.main", "build", "preset=cpu", "--out", str(tmp_path / "out")],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("no Docker engine answers"), result.stderr
    assert "setup-host.sh" in result.stderr and "Traceback" not in result.stderr


def test_render_refuses_a_preset_that_cannot_fit_unless_allowed(run, tmp_path):
    tight = ["engine.gpu_memory_utilization=0.3"]
    result = run("render", "preset=rtx4090-awq", *tight, "--out", str(tmp_path))
    assert result.exit_code == 1
    assert "presets/rtx4090-awq.yaml: engine: does not fit in memory" in result.stderr
    assert not any(tmp_path.iterdir())
    assert "--allow-no-fit" in result.stderr
    assert run("render", "preset=rtx4090-awq", *tight, "--out", str(tmp_path), "--force").exit_code == 1
    forced = run("render", "preset=rtx4090-awq", *tight, "--out", str(tmp_path), "--allow-no-fit")
    assert forced.exit_code == 0 and "warning:" in forced.stderr
    assert "# Plan: weights" in (tmp_path / "compose.yaml").read_text()
