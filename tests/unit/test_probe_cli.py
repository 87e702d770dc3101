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
