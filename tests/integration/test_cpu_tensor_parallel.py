"""The multi-process path on the CPU: the `cpu` preset at engine.tensor_parallel_size=2, from `kit render` to an
answer through the door, started by the `next:` line render prints.

vLLM's CPU build runs tensor parallel as one worker process per rank (the mp executor) that all-reduce through its
shared-memory communicator: segments in /dev/shm, one per rank. That is the same mapping the GPU tensor-parallel
presets rely on (the stack's private IPC namespace with shm_size, no `ipc: host`), which no GPU here can show. The
session's cpu image serves it (tensor parallel is no image input), and the model is the stack's tiny one: 2 attention
heads split over the 2 ranks, its 1 KV head replicated on each.
"""

from __future__ import annotations

import os
import re
import time

import yaml

from kit.deploy.record import compose_project

from .conftest import BASE_IMAGE, free_port, session_progress
from .test_journeys import COMPOSE_TIMEOUT_S, compose_down, door_status, folder_key, get_json, kit, printed, shell


def test_tensor_parallel_2_on_the_cpu_serves_through_the_door(cpu_image, docker_client, tmp_path):
    port = free_port()
    out = tmp_path / f"cpu-tp2-{os.getpid()}"
    rendered = kit("render", "preset=cpu", "engine.tensor_parallel_size=2", f"runtime.port={port}",
                   "--base-image", BASE_IMAGE, "--out", str(out))
    vllm = yaml.safe_load((out / "compose.yaml").read_text())["services"]["vllm"]
    assert vllm["image"] == cpu_image.prepared.image_ref  # the session's image: nothing built
    command = vllm["command"]
    assert command[command.index("--tensor-parallel-size") + 1] == "2"
    # The container's own /dev/shm (kit/deploy/deployment.py shm_size_for), the ranks splitting its CPUs, and
    # torch.compile'd helpers run eagerly (the slim image has no C++ compiler).
    assert vllm["shm_size"] == "4096m" and "ipc" not in vllm
    env = vllm["environment"]
    assert (env["VLLM_CPU_OMP_THREADS_BIND"], env["VLLM_CPU_SIM_MULTI_NUMA"], env["TORCH_COMPILE_DISABLE"],
            env["VLLM_CPU_KVCACHE_SPACE"]) == ("auto", "1", "1", "1")
    key = folder_key(out)
    try:
        started = time.monotonic()
        up = shell(printed(rendered.stderr, "next: "), timeout=COMPOSE_TIMEOUT_S)
        ready = time.monotonic() - started
        (container,) = docker_client.containers.list(all=True, filters={"label": [
            f"com.docker.compose.project={compose_project(out)}", "com.docker.compose.service=vllm"]})
        logs = container.logs().decode(errors="replace")
        assert up.returncode == 0, up.stderr[-2000:] + "\n--- server log ---\n" + logs[-6000:]
        session_progress(f"cpu preset at tensor parallel 2: healthy {ready:.0f} s after `up`")

        # Two ranks, each its own worker process: the line each prints as it joins the group, and each its KV cache.
        joined = re.findall(r"world_size=2 rank=(\d) local_rank=(\d) distributed_init_method=", logs)
        assert sorted(joined) == [("0", "0"), ("1", "1")], logs[-6000:]
        kv = re.findall(r"\(Worker_TP(\d) pid=\d+\) INFO .*Explicitly set \(1\.0/[\d.]+\) GiB for KV cache", logs)
        assert sorted(kv) == ["0", "1"], logs[-6000:]
        cores = re.findall(r"local_rank=(\d), core ids=\[(\d[\d, ]*)\]", logs)
        assert [rank for rank, _ in cores] == ["0", "1"] and cores[0][1] != cores[1][1], cores
        processes = container.exec_run(["ps", "-eo", "args"]).output.decode().split()
        assert sorted(p for p in processes if p.startswith("VLLM::Worker_TP")) == ["VLLM::Worker_TP0",
                                                                                   "VLLM::Worker_TP1"]
        # The shared-memory communicator is the one in use (vLLM logs when it falls back to torch.distributed),
        # with one segment per rank in the container's /dev/shm: the size compose gave it, not the host's.
        assert "CPU SHM communicator disabled" not in logs
        segments = [n for n in container.exec_run(["ls", "/dev/shm"]).output.decode().split()
                    if re.search(r"-tp:0-\[0-1\]-cpushm_[01]$", n)]
        assert sorted(n[-1] for n in segments) == ["0", "1"], segments
        assert not set(segments) & set(os.listdir("/dev/shm"))
        host_config = container.attrs["HostConfig"]
        assert host_config["IpcMode"] != "host" and host_config["ShmSize"] == 4096 * 2**20

        # Through the door on 127.0.0.1, with the key render wrote into .env.
        assert door_status(port, "/v1/models") == 401
        models = get_json(f"http://127.0.0.1:{port}/v1/models", key)
        assert [m["id"] for m in models["data"]] == ["tiny-llama"]
        for _ in range(2):  # the first request runs the vocabulary-parallel embedding's compiled helper
            completion = get_json(f"http://127.0.0.1:{port}/v1/completions", key,
                                  {"model": "tiny-llama", "prompt": "Hello", "max_tokens": 8})
            assert completion["usage"]["completion_tokens"] > 0
        chat = get_json(f"http://127.0.0.1:{port}/v1/chat/completions", key,
                        {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert chat["usage"]["completion_tokens"] > 0
        container.reload()
        assert container.attrs["RestartCount"] == 0 and container.status == "running"
    finally:
        compose_down(out)
    assert not docker_client.containers.list(all=True, filters={
        "label": f"com.docker.compose.project={compose_project(out)}"})
