"""Output people read: rich tables and progress, colour only on a terminal and never with NO_COLOR or --no-color;
one argument style; fixes spelled as preset overrides."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.cli.output import parse_progress

pytestmark = pytest.mark.unit

ESC = "\x1b["


def on_a_terminal(argv: list[str], env: dict[str, str] | None = None) -> str:
    """Run ``argv`` with stdout and stderr on a pseudo-terminal (what a user's shell gives it); return its output."""
    leader, follower = pty.openpty()
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    child = subprocess.Popen(argv, stdout=follower, stderr=follower, stdin=subprocess.DEVNULL,
                             env={**environ, "TERM": "xterm-256color", "COLUMNS": "160", **(env or {})})
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert child.wait(timeout=60) == 0
    return b"".join(chunks).decode("utf-8", errors="replace")


KIT = [sys.executable, "-m", "kit.cli.main"]


def test_tables_are_coloured_on_a_terminal_only():
    assert ESC in on_a_terminal([*KIT, "gpus"])
    assert ESC not in on_a_terminal([*KIT, "gpus"], {"NO_COLOR": "1"})
    assert ESC not in on_a_terminal([*KIT, "--no-color", "gpus"])
    piped = CliRunner().invoke(cli, ["gpus"], color=True)
    assert piped.exit_code == 0 and ESC not in piped.stdout


def test_tables_off_a_terminal_keep_whole_rows():
    result = CliRunner().invoke(cli, ["presets"])
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["preset", "origin", "hardware", "vLLM", "model"]
    row = next(line for line in lines if line.startswith("rtx4090-awq"))
    assert row.split() == ["rtx4090-awq", "shipped", "1x", "rtx4090", "0.33.0", "Qwen/Qwen3-8B-AWQ"]


def test_tables_off_a_terminal_end_their_lines_without_padding():
    """A plan with a long note (an unmeasured architecture's CUDA graphs) made rich pad every row to 240 columns
    in a pipe; the rows end where their text does."""
    result = CliRunner().invoke(cli, ["plan", "--model", "google/gemma-2-9b-it", "--gpu", "rtx4090",
                                      "--max-model-len", "4096"])
    lines = result.stdout.splitlines()
    assert result.exit_code == 0 and any(line.startswith("approximate") for line in lines)
    assert [line for line in lines if line != line.rstrip()] == []
    assert len(next(line for line in lines if line.startswith("weights"))) < 40


def test_plan_table_keeps_its_rows():
    result = CliRunner().invoke(cli, ["plan", "preset=cpu"])
    rows = {line.split("  ")[0]: line for line in result.stdout.splitlines()}
    assert result.exit_code == 0 and "2,097,152" in rows["KV cache tokens"] and rows["fits"].split()[-1] == "yes"


def test_progress_lines_are_parsed_as_steps_or_bytes():
    assert parse_progress("step 3/9: RUN pip install") == (3, 9, "steps")
    assert parse_progress("  [2/5] model.safetensors 10.0 MiB (20.0 MiB of 50.0 MiB, 5.0 MiB/s)") == (
        20 * 2**20, 50 * 2**20, "bytes")
    assert parse_progress("    pip: Installing collected packages") is None
    assert parse_progress("model ready: tiny") is None


PROGRESS_SCRIPT = """
from kit.cli.output import progress
with progress("build") as say:
    say("step 1/3: FROM base")
    say("    pip: Installing collected packages")
    say("step 3/3: CMD serve")
"""


def test_progress_is_a_bar_on_a_terminal_and_lines_elsewhere():
    shown = on_a_terminal([sys.executable, "-c", PROGRESS_SCRIPT])
    assert "3/3" in shown and "pip: Installing collected packages" in shown and ESC in shown
    piped = subprocess.run([sys.executable, "-c", PROGRESS_SCRIPT], capture_output=True, text=True, timeout=60)
    assert piped.stderr.splitlines() == ["step 1/3: FROM base", "    pip: Installing collected packages",
                                         "step 3/3: CMD serve"]


def test_presets_show_bare_name_still_works_with_a_warning():
    result = CliRunner().invoke(cli, ["presets", "show", "cpu"])
    assert result.exit_code == 0 and "deprecated" in result.stderr and "preset=cpu" in result.stderr
    assert "hardware:" in result.stdout
    assert "deprecated" not in CliRunner().invoke(cli, ["presets", "show", "preset=cpu"]).stderr


def test_wheelhouse_takes_its_own_option_and_refuses_two_directories(tmp_path):
    both = CliRunner().invoke(cli, ["wheelhouse", "preset=cpu", "wh", "--wheelhouse", str(tmp_path)])
    assert both.exit_code == 2 and "--wheelhouse DIR" in both.stderr
    old = CliRunner().invoke(cli, ["wheelhouse", "preset=nope", "wh"])
    assert old.exit_code == 1 and "use --wheelhouse wh" in old.stderr


def test_fixes_are_preset_overrides_when_planning_a_preset():
    result = CliRunner().invoke(cli, ["plan", "preset=rtx4090-awq", "engine.max_model_len=40960",
                                      "engine.gpu_memory_utilization=0.5", "--json"])
    messages = [s["message"] for s in json.loads(result.stdout)["data"]["suggestions"]]
    assert result.exit_code == 1 and messages
    assert messages[0].startswith("engine.max_model_len=") and not any(m.startswith("--") for m in messages)
    assert any(m.startswith("engine.tensor_parallel_size=2 hardware.count=2") for m in messages)
    # a Jetson module is one GPU per host: no fix offers more of them
    jetson = CliRunner().invoke(cli, ["plan", "preset=orin", "model=Qwen/Qwen3-32B-AWQ",
                                      "hardware.gpu=jetson-agx-orin-32gb", "--json"])
    fixes = json.loads(jetson.stdout)["data"]["suggestions"]
    assert jetson.exit_code == 1 and fixes and not any("tensor_parallel_size" in s["change"] for s in fixes)
    # Standalone `kit plan --model ...` is a command line: its fixes stay vLLM flags.
    standalone = CliRunner().invoke(cli, ["plan", "--model", "Qwen/Qwen3-32B", "--gpu", "rtx4090", "--json"])
    assert json.loads(standalone.stdout)["data"]["suggestions"][0]["message"].startswith("--")


def test_render_refusal_hints_are_overrides():
    result = CliRunner().invoke(cli, ["render", "preset=rtx4090-awq", "engine.max_model_len=40960",
                                      "engine.gpu_memory_utilization=0.5", "--dry-run", "--out", "unused"])
    assert result.exit_code == 1 and "hint: engine.max_model_len=" in result.stderr


def test_too_long_context_hint_is_an_override():
    result = CliRunner().invoke(cli, ["plan", "preset=rtx4090-awq", "engine.max_model_len=400000"])
    assert result.exit_code == 1 and "engine.max_model_len=40960 or less" in result.stderr


def test_doctor_fixes_on_a_small_gpu_are_overrides():
    from kit.config.presetload import load_preset
    from kit.host.doctor import _plan_on

    _, _, preset = load_preset("rtx4090-awq", ["engine.max_model_len=40960"])
    result = _plan_on(preset, 12.0)  # a card smaller than the preset's: the plan does not fit
    assert not result.fits and result.suggestions
    assert all(not s["message"].startswith("--") for s in result.suggestions)
    assert result.suggestions[0]["message"].startswith("engine.max_model_len=")


def test_deprecation_is_a_warning_of_the_envelope_in_json_mode():
    result = CliRunner().invoke(cli, ["presets", "show", "cpu", "--json"])
    env = json.loads(result.stdout)
    assert result.exit_code == 0 and env["ok"] and "preset=cpu" in env["warnings"][0] and result.stderr == ""
