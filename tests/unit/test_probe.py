"""kit probe: the command it runs in both modes (as data), and its run loop against a stand-in server process."""

from __future__ import annotations

import json
import lzma
import sys
from pathlib import Path

import pytest

from kit.config.presetload import load_preset
from kit.deploy.deployment import plan_deployment, serve_args_for, server_command_for
from kit.run import probe

pytestmark = pytest.mark.unit

LOGS = Path(__file__).resolve().parents[2] / "kit" / "data" / "calibration" / "h200-vllm-0.26.0"


@pytest.fixture
def awq(tmp_path: Path):
    name, _path, preset = load_preset("rtx4090-awq")
    model_dir = probe.write_dummy_model_dir(probe.catalog_config(preset.model.id), tmp_path / "Qwen3-8B-AWQ")
    return name, preset, model_dir


def test_dummy_model_dir_is_the_catalog_config_without_notes(awq) -> None:
    _name, _preset, model_dir = awq
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["quantization_config"]["quant_method"] == "awq"
    assert not any(key.startswith("_") for key in config)
    assert not probe.has_tokenizer(model_dir)
    (model_dir / "tokenizer.json").write_text("{}")
    assert probe.has_tokenizer(model_dir)


def test_dummy_serve_args_swap_the_model_and_ask_for_dummy_weights() -> None:
    args = ["--model", "Qwen/X", "--load-format", "safetensors", "--max-model-len", "8192", "--tokenizer=tok"]
    out = probe.dummy_serve_args(args, "/m", tokenizer=False)
    assert out == ["--model", "/m", "--max-model-len", "8192", "--load-format", "dummy", "--skip-tokenizer-init"]
    assert probe.dummy_serve_args(["--max-num-seqs", "4"], "/m", tokenizer=True) == [
        "--model", "/m", "--max-num-seqs", "4", "--load-format", "dummy"]
    # `vllm serve MODEL`: the positional model is swapped in place, never doubled by a --model
    assert probe.dummy_serve_args(["Qwen/X", "--max-num-seqs", "4", "--load-format", "pt"], "/m",
                                  tokenizer=True, positional=True) == [
        "/m", "--max-num-seqs", "4", "--load-format", "dummy"]


def test_native_module_argv_runs_the_same_server_in_this_python() -> None:
    assert probe.native_module_argv(["/opt/venv/bin/vllm", "serve"]) == ["-m", "vllm.entrypoints.cli.main", "serve"]
    assert probe.native_module_argv(["vllm", "serve"]) == ["-m", "vllm.entrypoints.cli.main", "serve"]
    module = ["/opt/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert probe.native_module_argv(module) == module[1:]


def test_native_command_is_the_presets_serve_command_in_this_python(awq) -> None:
    name, preset, model_dir = awq
    command = probe.prepare(name, preset, model_dir, mode="native", port=18123)
    deployment = plan_deployment(name, preset)
    assert command.argv[0] == sys.executable
    # compose starts `vllm serve MODEL`: here the same CLI as a module of this interpreter
    assert deployment.serve.entrypoint[1:] == ["serve"]
    assert command.argv[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"]
    server = server_command_for(preset)
    expected = serve_args_for(preset, deployment.serve.served_model_name, str(model_dir), server,
                              listen=("127.0.0.1", 18123))
    assert command.argv[4:] == expected + ["--load-format", "dummy", "--skip-tokenizer-init"]
    assert command.env["HF_HUB_OFFLINE"] == "1" and command.port == 18123
    for flag in ("--quantization", "--max-model-len", "--gpu-memory-utilization", "--dtype"):
        assert flag in command.argv  # the preset's engine flags travel unchanged


def test_docker_command_uses_the_image_gpu_request_and_loopback_port(awq) -> None:
    name, preset, model_dir = awq
    command = probe.prepare(name, preset, model_dir, mode="docker", port=18124)
    deployment = plan_deployment(name, preset)
    run = command.docker
    assert run["image"] == f"{deployment.image.image_repository}:{deployment.image.vllm_version}"
    assert run["entrypoint"] == deployment.serve.entrypoint
    assert run["ports"] == {"8000/tcp": ("127.0.0.1", 18124)}
    assert run["volumes"] == {str(model_dir.resolve()): {"bind": "/models/Qwen3-8B-AWQ", "mode": "ro"}}
    # the same request compose makes: deploy.resources.reservations.devices
    assert deployment.runtime.gpu_devices == {"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}
    assert run["device_requests"] == [{"driver": "nvidia", "count": 1, "capabilities": [["gpu"]]}]
    assert run["shm_size"] == deployment.runtime.shm.shm_size and run["detach"] is True
    assert run["command"][0] == "/models/Qwen3-8B-AWQ" and "--model" not in run["command"]  # positional
    assert run["command"][-3:] == ["--load-format", "dummy", "--skip-tokenizer-init"]
    assert run["environment"] == deployment.serve.environment
    assert probe.prepare(name, preset, model_dir, mode="docker", image="site/vllm:1").docker["image"] == "site/vllm:1"


def test_docker_command_keeps_device_ids(tmp_path: Path) -> None:
    name, _path, preset = load_preset("rtx3090x2-fp16", ["hardware.device_ids=[\"0\",\"1\"]"])
    model_dir = probe.write_dummy_model_dir(probe.catalog_config(preset.model.id), tmp_path / "m")
    request = probe.prepare(name, preset, model_dir, mode="docker").docker["device_requests"]
    assert request == [{"driver": "nvidia", "device_ids": ["0", "1"], "capabilities": [["gpu"]]}]


def test_eight_gpu_ray_preset_probes_with_its_own_parallel_flags(tmp_path: Path) -> None:
    """The a100x8 run the 8-GPU issue needs: TP 8 on the Ray executor, the budget scaled by an override."""
    name, _path, preset = load_preset("a100x8", ["engine.gpu_memory_utilization=0.5"])
    model_dir = probe.write_dummy_model_dir(probe.catalog_config(preset.model.id), tmp_path / "m")
    argv = probe.prepare(name, preset, model_dir, mode="native", port=18125).argv
    assert argv[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"] and argv[4] == str(model_dir)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.5"
    assert argv[-2:] == ["--load-format", "dummy"] or argv[-3:-1] == ["--load-format", "dummy"]
    run = probe.prepare(name, preset, model_dir, mode="docker").docker
    assert run["device_requests"] == [{"driver": "nvidia", "count": 8, "capabilities": [["gpu"]]}]
    assert run["shm_size"] == plan_deployment(name, preset).runtime.shm.shm_size  # Ray's object store included


REPLAY = Path(__file__).parent / "fixtures" / "replay_vllm_server.py"


def _stand_in(log: str, code: int) -> probe.ProbeCommand:
    """A process that prints a real vLLM log and then serves /health (or exits with ``code``)."""
    port = probe.free_port()
    env = {"KIT_TEST_REPLAY_LOG": str(LOGS / log), "KIT_TEST_REPLAY_EXIT": str(code) if code else ""}
    return probe.ProbeCommand("native", [sys.executable, str(REPLAY), "--port", str(port)], env, port, "m",
                              LOGS, False)


def test_run_waits_for_health_parses_the_log_and_stops_the_server(tmp_path: Path) -> None:
    messages: list[str] = []
    result = probe.run(_stand_in("q8-bf16-eager.log.xz", 0), timeout=60, log_path=tmp_path / "s.log",
                       progress=messages.append, poll_s=0.2)
    assert result.ready and not result.timed_out and result.seconds_to_ready < 60
    assert result.log.kv_cache_tokens and result.log.model_runner == "V2"
    assert any("KV cache sized" in m for m in messages) and any("ready" in m for m in messages)
    assert not probe._health(result.command.port)  # stopped: nothing answers on its port any more


def test_run_reports_a_failed_start_with_vllms_error(tmp_path: Path) -> None:
    result = probe.run(_stand_in("q8-16g-oom.log.xz", 1), timeout=60, log_path=tmp_path / "s.log",
                       poll_s=0.2)
    assert not result.ready and result.exit_code == 1 and not result.timed_out
    assert result.log.fatal.startswith("ValueError: No available memory for the cache blocks")


def test_compare_rows_put_the_plan_beside_the_log() -> None:
    with lzma.open(LOGS / "moe-q30a3b-graphs.log.xz", "rt") as handle:
        log = probe.vllmlog.parse(handle.read())
    rows = {r["metric"]: r for r in probe.compare({"kv_cache_tokens": 700000, "cuda_graph_gib": 0.4}, log)}
    assert rows["kv_cache_tokens"]["measured"] == log.kv_cache_tokens
    assert rows["kv_cache_tokens"]["difference"] == 700000 - log.kv_cache_tokens
    assert rows["cuda_graph_gib"]["measured"] == log.cuda_graph_estimate_gib  # V1 runner: the charged estimate
    assert rows["weights_gib"]["planned"] is None and rows["weights_gib"]["difference"] is None
    assert "KV cache tokens" in probe.format_rows(list(rows.values()))


def test_a_0_34_log_compares_the_pool_as_captured_and_what_was_kept_for_transients() -> None:
    # vLLM 0.34's extensible KV cache charges no estimate: the pool as captured comes off, and the margin it keeps
    # is sized from the larger of the warm-up's peak and torch's growth (kit/data/vllm.yaml kv_sizing)
    pid = "(EngineCore pid=7) INFO 12-03 10:00:0{} [x.py:1] "
    text = "\n".join([
        pid.format(1) + "Available KV cache memory: 121.97 GiB",
        pid.format(2) + "Free memory on device (139.28/139.81 GiB) on startup. Desired GPU memory utilization is "
                        "(1.0, 139.81 GiB). Actual usage is 15.98 GiB for consumed memory (weights + non-torch), "
                        "2.11 GiB for peak activation, and 0.45 GiB for CUDAGraph memory.",
        pid.format(3) + "Memory after warmup: 121.30 GiB free, 0.01 GiB committed to the KV cache, 2.30 GiB kept for "
                        "transient activations (2.30 GiB allocated at peak, 1.90 GiB of torch reservation growth); "
                        "8421 KV cache blocks (117.00 GiB) fit within the requested 139.81 GiB.",
        pid.format(4) + "Extended KV cache to 8421 blocks (117.04 GiB).",
    ])
    log = probe.vllmlog.parse(text)
    rows = {r["metric"]: r for r in probe.compare({"cuda_graph_gib": 0.5, "activation_gib": 2.0}, log)}
    assert rows["cuda_graph_gib"]["measured"] == 0.45
    assert rows["kv_cache_gib"]["measured"] == 117.04
    assert (rows["kept_for_transients_gib"]["planned"], rows["kept_for_transients_gib"]["measured"]) == (2.0, 2.30)


def test_a_start_that_compiles_flashinfer_just_in_time_is_named_in_the_probes_notes() -> None:
    # Real H200 logs (bench/start_timing.py): vLLM 0.33's first start before the image compiled the sampler ahead of
    # time built FlashInfer's `sampling` at start (115.7 s); the same first start as the kit renders now built none.
    startup = LOGS.parent.parent / "startup"
    _name, _path, preset = load_preset("rtx4090-awq")
    found = {}
    for key, path in (("jit", startup / "h200-vllm-0.33.0" / "q8-first.log.xz"),
                      ("aot", startup / "h200-vllm-0.33.0-fork" / "q8-first-fork.log.xz")):
        with lzma.open(path, "rt", errors="replace") as handle:
            text = handle.read()
        log = probe.vllmlog.parse(text)
        result = probe.ProbeResult(command=None, log=log, log_text=text, ready=True,
                                   seconds_to_ready=1.0, exit_code=None, timed_out=False)
        found[key] = (log.jit_modules, [n for n in probe.probe_notes(preset, result) if "just in time" in n])
    modules, notes = found["jit"]
    assert modules == ["sampling"] and len(notes) == 1, found
    assert "sampling just in time" in notes[0] and "(vLLM 0.33.0) compiles sampling while it is built" in notes[0]
    assert found["aot"] == ([], []), found
    assert probe.vllmlog.parse(text).to_json()["jit_modules"] == []
