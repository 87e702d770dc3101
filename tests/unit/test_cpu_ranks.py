"""The CPU backend with more than one rank (issue 34): what the server's environment says and what `kit validate`
refuses before vLLM's CPU build would at start. tests/integration/test_cpu_tensor_parallel.py serves it for real."""

from __future__ import annotations

import pytest

from kit.core.errors import PresetError
from kit.deploy.pipeline import prepare


def server_env(*overrides: str, preset: str = "cpu") -> dict[str, str]:
    return prepare(preset, list(overrides)).deployment.serve.environment


def problems(*overrides: str) -> list[str]:
    try:
        prepare("cpu", list(overrides))
    except PresetError as exc:
        return [str(p) for p in exc.problems]
    return []


def test_one_rank_keeps_vllms_own_binding_and_runs_compiled_helpers_eagerly():
    env = server_env()
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "auto" and "VLLM_CPU_SIM_MULTI_NUMA" not in env
    # a request for logprobs calls vllm/v1/sample/ops/logprobs.py's torch.compile'd count: no compiler in the image
    assert env["TORCH_COMPILE_DISABLE"] == "1"


@pytest.mark.parametrize("parallel", [["engine.tensor_parallel_size=2"], ["engine.pipeline_parallel_size=2"]])
def test_two_ranks_split_the_containers_cpus_and_run_compiled_helpers_eagerly(parallel):
    # vLLM's auto binding wants a NUMA node per rank; the kit cannot know the host's nodes when it renders.
    env = server_env(*parallel)
    assert (env["VLLM_CPU_OMP_THREADS_BIND"], env["VLLM_CPU_SIM_MULTI_NUMA"]) == ("auto", "1")
    # the slim image has no C++ compiler for inductor (vocab_parallel_embedding's torch.compile'd helper)
    assert env["TORCH_COMPILE_DISABLE"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"  # per rank: each worker reserves it


@pytest.mark.parametrize("bind", ["auto", "0|1", "nobind"])
def test_a_binding_asked_for_is_vllms_own(bind):
    env = server_env("engine.tensor_parallel_size=2", f"runtime.cpu_omp_threads_bind={bind}")
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == bind and "VLLM_CPU_SIM_MULTI_NUMA" not in env


def test_the_ranks_of_several_nodes_count_per_node():
    # pipeline parallel 2 over 2 nodes (the Ray cluster's layout): one rank on each node
    prepared = prepare("cpu", ["hardware.nodes=2", "cluster.network=bridge"])
    assert prepared.preset.engine.tp * prepared.preset.engine.pp == 2
    env = prepared.deployment.serve.environment
    assert "VLLM_CPU_SIM_MULTI_NUMA" not in env and env["TORCH_COMPILE_DISABLE"] == "1"


@pytest.mark.parametrize(("overrides", "field", "text"), [
    (["engine.tensor_parallel_size=2", "runtime.cpu_omp_threads_bind=0-1"], "runtime.cpu_omp_threads_bind",
     "1 core list(s) for 2 rank(s)"),
    (["runtime.cpu_omp_threads_bind=0|1"], "runtime.cpu_omp_threads_bind", "2 core list(s) for 1 rank(s)"),
    (["runtime.cpu_omp_threads_bind=all"], "runtime.cpu_omp_threads_bind", "not auto, nobind or core lists"),
    (["runtime.cpu_kvcache_space_gib=1.5"], "runtime.cpu_kvcache_space_gib", "a whole number of GiB"),
])
def test_what_vllms_cpu_build_refuses_at_start_is_refused_by_validate(overrides, field, text):
    found = problems(*overrides)
    assert any(field in p and text in p for p in found), found


@pytest.mark.parametrize("overrides", [["engine.tensor_parallel_size=2", "runtime.cpu_omp_threads_bind=0,2-3|1,4"],
                                       ["runtime.cpu_omp_threads_bind=0-3"], ["runtime.cpu_kvcache_space_gib=2"]])
def test_what_it_accepts_passes(overrides):
    assert problems(*overrides) == []
