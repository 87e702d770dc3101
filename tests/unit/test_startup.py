"""Issue 24: the caches a restart reuses are on the volume, the image keeps its byte-code, and a start's log is cut
into phases at vLLM's own lines (kit/run/startphases.py), on the recorded H200 starts too."""

from __future__ import annotations

import json
import lzma
import re
from pathlib import Path

import pytest

from kit.config.presetload import load_preset
from kit.core.datafiles import load_yaml
from kit.deploy.deployment import environment_for
from kit.deploy.pipeline import prepare
from kit.deploy.startcache import cache_env
from kit.run.startphases import PHASES, breakdown, docker_lines, harness_lines, unix_time

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "kit" / "data" / "startup" / "h200-vllm-0.33.0"
VOLUME = "/home/vllm/.cache/vllm"


def test_every_cache_lands_below_the_cache_volume_for_gpu_presets():
    _name, _path, preset = load_preset("rtx4090-awq", [])
    env = environment_for(preset)
    for name in load_yaml("startcache.yaml")["caches"]:
        assert env[name] == VOLUME or env[name].startswith(VOLUME + "/"), name
    assert env["TRITON_CACHE_DIR"] == f"{VOLUME}/triton" and env["CUDA_CACHE_PATH"] == f"{VOLUME}/nv-compute-cache"
    assert env["VLLM_ENABLE_STARTUP_PLAN"] == "1"


def test_cpu_gets_only_the_caches_its_backend_has_and_no_startup_plan():
    _name, _path, preset = load_preset("cpu", [])
    env = environment_for(preset)
    assert env["TORCHINDUCTOR_CACHE_DIR"] == f"{VOLUME}/inductor"
    assert not {"TRITON_CACHE_DIR", "CUDA_CACHE_PATH", "VLLM_ENABLE_STARTUP_PLAN"} & set(env)


def test_the_startup_plan_needs_the_release_that_has_it():
    # vllm/v1/worker/startup_plan.py is in 0.33.0; orin pins 0.16, which has no such switch.
    assert "VLLM_ENABLE_STARTUP_PLAN" not in cache_env(VOLUME, gpu=True, vllm_version="0.26.0")
    _name, _path, orin = load_preset("orin", [])
    assert "VLLM_ENABLE_STARTUP_PLAN" not in environment_for(orin)


def test_runtime_startup_plan_false_leaves_it_off_and_runtime_env_may_not_set_a_cache():
    _name, _path, preset = load_preset("rtx4090-awq", ["runtime.startup_plan=false"])
    assert "VLLM_ENABLE_STARTUP_PLAN" not in environment_for(preset)
    switches = load_yaml("switches.yaml")["kit_env"]
    assert switches["VLLM_ENABLE_STARTUP_PLAN"] == "set from runtime.startup_plan"
    for name in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH"):
        assert name in switches  # runtime.env naming one is refused (tests/unit/test_switches.py)


def test_rendered_compose_and_k8s_carry_the_cache_folders():
    compose = prepare("rtx4090-awq").files["compose.yaml"]
    k8s = prepare("rtx4090-awq", target="k8s").files["k8s/deployment.yaml"]
    for text in (compose, k8s):
        assert f"{VOLUME}/triton" in text and f"{VOLUME}/inductor" in text and "VLLM_ENABLE_STARTUP_PLAN" in text


def test_the_image_compiles_byte_code_reproducibly_instead_of_deleting_it():
    dockerfile = prepare("cpu").files["Dockerfile"]
    step = dockerfile[dockerfile.index("RUN python3 -m venv"):]
    step = step[:step.index("\n\n")]
    assert step.index("-name '__pycache__'") < step.index("compileall")
    # one process per package, one hash seed, hash-based: two builds write the same bytes (test_registry_lock.py)
    assert "PYTHONHASHSEED=0 xargs -0 -n 1" in step and "compileall -q --invalidation-mode unchecked-hash" in step
    # Once: pip's own byte-code would only be deleted by the step, so every pip install in it skips compiling.
    installs = re.findall(r"pip install [^;\\]*", step)
    assert len(installs) == 2 and all("--no-compile" in line for line in installs), installs


HARNESS_LOG = """\
[+4.0] W1202 torch warning
[+9.5] (APIServer pid=1) INFO 12-02 03:06:17 [startup.py:38]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.33.0
[+9.6] (APIServer pid=1) INFO 12-02 03:06:30 [model.py:744] Resolved architecture: Qwen3ForCausalLM
[+20.0] (EngineCore pid=2) INFO 12-02 [core.py:139] Initializing a V1 LLM engine (v0.33.0) with config: x
[+22.0] (EngineCore pid=2) INFO [model_runner.py:399] Loading model from scratch...
[+30.0] (EngineCore pid=2) INFO [model_runner.py:428] Model loading took 15.27 GiB memory and 7.0 seconds
[+31.0] (EngineCore pid=2) INFO [gpu_worker.py:676] reserved 107.92 GiB memory for KV Cache and skipped memory profiling.
[+31.5] (EngineCore pid=2) INFO [kv_cache_utils.py:1147] GPU KV cache size: 785,824 tokens
[+32.0] 2026-12-02 03:07:35,729 - INFO - core.py:594 - flashinfer.jit: Building JIT module sampling
[+40.0] (EngineCore pid=2) INFO [model_runner.py:1163] Graph capturing finished in 11 secs, took 0.55 GiB
[+41.0] (EngineCore pid=2) INFO [core.py:405] init engine (profile, create kv cache, warmup model) took 14.79 s
[+42.0] INFO:     Application startup complete.
"""


def test_phases_from_a_harness_log():
    b = breakdown(harness_lines(HARNESS_LOG))
    got = {p.name: p.seconds for p in b.phases}
    assert got == {"import": 9.5, "model config": 0.1, "engine process": 10.4, "engine setup": 2.0, "weights": 8.0,
                   "compile": 0.0, "memory profile": 1.0, "kv cache": 0.5, "graph capture": 8.5, "engine ready": 1.0,
                   "api start": 1.0}
    assert b.jit_s == 8.0 and b.ends_at == 42.0 and [p.name for p in b.phases] == [n for n, *_rest in PHASES]


def test_docker_timestamps_count_from_the_container_start():
    text = ("2026-12-02T03:10:19.500000000Z (APIServer pid=1) INFO [startup.py:38] version 0.32.0\n"
            "2026-12-02T03:10:21.250000000Z INFO:     Application startup complete.\n")
    lines = docker_lines(text, "2026-12-02T03:10:10.000000000Z")
    assert lines == [(9.5, "(APIServer pid=1) INFO [startup.py:38] version 0.32.0"),
                     (11.25, "INFO:     Application startup complete.")]
    assert unix_time("2026-12-02T03:10:10.5Z") - unix_time("2026-12-02T03:10:10Z") == 0.5
    with pytest.raises(ValueError, match="RFC 3339"):
        unix_time("yesterday")


@pytest.mark.parametrize("name", sorted(p.name[:-len(".log.xz")] for p in GPU.glob("*.log.xz")))
def test_recorded_h200_starts_cut_into_ordered_phases(name):
    with lzma.open(GPU / f"{name}.log.xz", "rt", errors="replace") as fh:
        b = breakdown(harness_lines(fh.read()))
    results = json.loads((GPU / "results.json").read_text())[name]
    assert all(p.seconds >= 0 for p in b.phases)
    assert [p.start for p in b.phases] == sorted(p.start for p in b.phases)
    weights = next(p for p in b.phases if p.name == "weights")
    assert weights.seconds > 1  # real-size weights were read
    if results.get("ready_s"):
        assert b.ends_at <= results["ready_s"] and results["completion"]["status"] == 200


def test_the_engine_core_is_forked_on_gpu_presets_unless_the_preset_says_not():
    # `vllm serve` sets spawn unless the environment names a method (vllm/entrypoints/common/startup.py, 0.33.0 and
    # 0.34.0); fork let a 0.34 restart skip 12 s of imports in the engine core (kit/data/startup/h200-vllm-0.34.0).
    _name, _path, preset = load_preset("rtx4090-awq", [])
    assert environment_for(preset)["VLLM_WORKER_MULTIPROC_METHOD"] == "fork"
    _name, _path, spawned = load_preset("rtx4090-awq", ["runtime.fork_engine=false"])
    assert "VLLM_WORKER_MULTIPROC_METHOD" not in environment_for(spawned)
    _name, _path, cpu = load_preset("cpu", [])
    assert "VLLM_WORKER_MULTIPROC_METHOD" not in environment_for(cpu)
    assert "VLLM_WORKER_MULTIPROC_METHOD" not in cache_env(VOLUME, gpu=True, vllm_version="0.26.0")
    assert 'VLLM_WORKER_MULTIPROC_METHOD: fork' in prepare("rtx4090-awq").files["compose.yaml"]


def test_recorded_034_restart_forked_reaches_the_first_token_sooner_than_spawned():
    data = ROOT / "kit" / "data" / "startup" / "h200-vllm-0.34.0"
    results = json.loads((data / "results.json").read_text())
    assert results["q8-restart-fork"]["case"]["env"] == {"VLLM_WORKER_MULTIPROC_METHOD": "fork"}
    phases = {}
    for name in ("q8-restart", "q8-restart-fork"):
        with lzma.open(data / f"{name}.log.xz", "rt", errors="replace") as fh:
            phases[name] = {p.name: p.seconds for p in breakdown(harness_lines(fh.read())).phases}
    assert phases["q8-restart-fork"]["engine process"] < 1 < phases["q8-restart"]["engine process"]
    token = {n: results[n]["completion"]["first_token_at"] for n in phases}
    assert token["q8-restart-fork"] < token["q8-restart"]


@pytest.mark.parametrize("folder", ["h200-vllm-0.33.0-fork", "h200-vllm-0.34.0-r2"])
def test_recorded_first_starts_as_rendered_fork_the_engine_and_build_no_kernel(folder):
    # The second GPU session (2026-12-04): first starts and restarts as the kit renders GPU presets (the engine core
    # forked, FlashInfer's sampler compiled ahead of time), each with a spawned start beside it on the same machine.
    # The figures are benchmarks (make bench-start); this checks what the recordings are: the environment each case
    # ran with, no FlashInfer build in any start, and the fork's one effect, the engine process's imports gone.
    data = ROOT / "kit" / "data" / "startup" / folder
    results = json.loads((data / "results.json").read_text())
    forked = [n for n in results if n != "setup" and n.endswith("-fork")]
    spawned = [n for n in results if n != "setup" and not n.endswith("-fork")]
    assert {"q8-first-fork", "q8-restart-fork", "awq-first-fork", "awq-restart-fork"} <= set(forked) and spawned
    assert "sampling.so" in (data / "flashinfer-aot.log").read_text()
    for name in forked + spawned:
        env = results[name]["env"]
        assert env.get("VLLM_WORKER_MULTIPROC_METHOD") == ("fork" if name in forked else None), name
        assert results[name]["completion"]["status"] == 200, name
        with lzma.open(data / f"{name}.log.xz", "rt", errors="replace") as fh:
            text = fh.read()
        assert "Building JIT module" not in text, name
        b = breakdown(harness_lines(text))
        assert b.jit_s == 0, name
        engine = next(p.seconds for p in b.phases if p.name == "engine process")
        assert (engine < 2.5) if name in forked else (engine > 5), (name, engine)
