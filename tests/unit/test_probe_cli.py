"""`kit probe --native` end to end, with a stand-in `vllm` package that replays a committed H200 start-up log and
answers /health (or exits like the real failed start). What is under test is the kit's plumbing: the command it
starts, the wait, the parse, the plan for the same GPU and version, the table and the exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.cli.main import cli

pytestmark = pytest.mark.unit

LOGS = Path(__file__).resolve().parents[2] / "kit" / "data" / "calibration" / "h200-vllm-0.26.0"
REPLAY = Path(__file__).parent / "fixtures" / "replay_vllm_server.py"
WITHOUT_VLLM = Path(__file__).parent / "fixtures" / "without_vllm"  # a sitecustomize that hides vLLM


@pytest.fixture
def stand_in_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # both ways a preset starts the server: `vllm serve` (its CLI module) and the CPU build's API server module
    entrypoints = tmp_path / "site" / "vllm" / "entrypoints"
    for folder in (entrypoints.parent, entrypoints, entrypoints / "openai", entrypoints / "cli"):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
    (entrypoints / "openai" / "api_server.py").write_text(REPLAY.read_text())
    (entrypoints / "cli" / "main.py").write_text(REPLAY.read_text())
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the default server log goes there
    return tmp_path


# the rtx4090-awq preset as it ran on the H200 (utilization scaled to a 24 GiB card; a 4090's batch default)
AS_RUN = ["preset=rtx4090-awq", "engine.gpu_memory_utilization=0.1522", "engine.max_num_batched_tokens=2048"]


def test_probe_prints_measured_beside_planned(stand_in_vllm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIT_TEST_REPLAY_LOG", str(LOGS / "rtx4090-awq-preset.log.xz"))
    result = CliRunner().invoke(cli, ["probe", *AS_RUN, "--native", "--json", "--timeout", "60"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["data"]
    assert report["ready"] and report["measured"]["vllm_version"] == "0.26.0"
    assert any("RTX 4090" in n for n in report["notes"]) and any("pins 0.33.0" in n for n in report["notes"])
    assert not any("defaults differ" in n for n in report["notes"])  # the batch sizes were set
    assert report["plan"]["inputs"]["vllm_version"] == "0.26.0"  # planned for the vLLM that ran ...
    assert report["plan"]["inputs"]["gpu_memory_gib"] == report["measured"]["total_gib"]  # ... on that GPU
    rows = {r["metric"]: r for r in report["rows"]}
    tokens = rows["kv_cache_tokens"]
    assert tokens["measured"] == report["measured"]["kv_cache_tokens"]
    assert abs(tokens["difference_pct"]) <= 3
    command = report["command"]
    assert command[command.index("--quantization") + 1] == "awq_marlin"
    assert command[command.index("--load-format") + 1] == "dummy" and "--skip-tokenizer-init" in command


def test_probe_table_and_failed_start(stand_in_vllm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIT_TEST_REPLAY_LOG", str(LOGS / "q8-16g-oom.log.xz"))
    monkeypatch.setenv("KIT_TEST_REPLAY_EXIT", "1")
    result = CliRunner().invoke(cli, ["probe", "preset=rtx4090-awq", "--native", "--timeout", "60"])
    assert result.exit_code == 1
    assert "KV cache tokens" in result.stdout
    assert "vLLM did not start: ValueError: No available memory for the cache blocks" in result.stderr


def test_native_probe_without_vllm_reports_its_error_and_leaves_no_temporary_folder(tmp_path: Path) -> None:
    # The real thing: `kit probe --native` in a child process on this Python, with vLLM hidden from it and from the
    # server it starts (WITHOUT_VLLM), so the test runs whether or not this Python has vLLM installed.
    import subprocess
    import sys

    temp, cache = tmp_path / "tmp", tmp_path / "cache"
    temp.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": str(temp), "XDG_CACHE_HOME": str(cache),
           "PYTHONPATH": f"{WITHOUT_VLLM}:{Path(__file__).resolve().parents[2]}"}
    hidden = subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True, text=True, env=env, check=False)
    assert hidden.returncode == 1 and "ModuleNotFoundError: No module named 'vllm'" in hidden.stderr, hidden.stderr

    def probe(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kit.cli.main", "probe", *args, "--native", "--timeout", "60"],
                              capture_output=True, text=True, env=env, timeout=120, check=False)

    result = probe("preset=rtx4090-awq", "--json")
    assert result.returncode == 1, result.stderr
    envelope = json.loads(result.stdout)
    message = envelope["problems"][0]["message"]
    assert message == "vLLM did not start: ModuleNotFoundError: No module named 'vllm'", message
    log = Path(envelope["data"]["log"])
    assert log == cache / "vllm-kit" / "probe" / "rtx4090-awq.log"
    assert "No module named 'vllm'" in log.read_text()
    assert list(temp.iterdir()) == []  # the dummy model's folder is gone

    text = probe("preset=rtx4090-awq")
    assert text.returncode == 1 and "no error logged" not in text.stderr
    assert "vLLM did not start: ModuleNotFoundError: No module named 'vllm'" in text.stderr
    assert f"the whole log: {log}" in text.stderr
    # a probe refused before the engine starts (a model the catalog lacks) leaves nothing behind either
    refused = probe("preset=cpu")
    assert refused.returncode == 1 and "not in the kit's catalog" in refused.stderr
    assert list(temp.iterdir()) == []
