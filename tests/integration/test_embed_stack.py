"""An embedding server from a side-by-side stack (`kit render preset=cpu --with-preset cpu-embed`), for real.

It runs on the session's `cpu` image (same image, another command: no second build). Only the embedding service
is started (the chat server is the session's `cpu_stack`), to keep the test to one vLLM start.
"""

from __future__ import annotations

import json
import os
import time

import yaml

from kit.core.datafiles import PRESETS_DIR
from kit.deploy.pipeline import prepare
from kit.run.smoke import CHAT, COMPLETION, EMBEDDINGS, RERANK, format_table, http, run_checks
from kit.run.stack import Stack, write_smoke_env
from kit.run.workflow import render_into
from tests.integration.conftest import BASE_IMAGE, DOOR_START_S, door_request, free_port, session_progress

SERVICE = "vllm-cpu-embed"
DOOR = "door-cpu-embed"  # its own front door: the only published port (kit/deploy/door.py)


def test_embedding_server_beside_the_chat_server(cpu_image, tmp_path):
    started = time.monotonic()
    chat_port, embed_port = free_port(), free_port()
    # cpu-embed as shipped, on a free port (the shared test host may have 8001 taken)
    embed_preset = tmp_path / "presets" / "cpu-embed.yaml"
    embed_preset.parent.mkdir()
    data = yaml.safe_load((PRESETS_DIR / "cpu-embed.yaml").read_text())
    data["runtime"]["port"] = embed_port
    embed_preset.write_text(yaml.safe_dump(data))

    out = tmp_path / "stack"
    prepared = prepare("cpu", [f"runtime.port={chat_port}"], base_image=BASE_IMAGE, with_presets=[str(embed_preset)])
    embed = prepared.companions[0]
    assert embed.image_ref == prepared.image_ref == cpu_image.prepared.image_ref, "the embedding server needs no build"
    render_into(prepared, out)
    env = write_smoke_env(out)
    assert not (out / "models").exists()

    stack = Stack(out, f"kit-test-embed-{os.getpid()}")
    try:
        # From compose.yaml (the include resolves the service); compose runs its one-shots first: model-make makes
        # the tiny Qwen3 embedder with the image's transformers, then model-fetch checks it is there.
        stack.run("up", "-d", "--no-build", SERVICE, DOOR)
        ready = stack.wait_healthy(embed.deployment.runtime.healthcheck_start_period + 120, session_progress, service=SERVICE)
        session_progress(f"embedding server healthy in {ready:.0f} s")
        wait_for_door(embed_port)
        made = stack.container(SERVICE).exec_run(["cat", "/models/tiny-qwen3-embed/config.json"])  # its own volume
        assert made.exit_code == 0 and json.loads(made.output)["architectures"] == ["Qwen3ForCausalLM"]
        assert not (out / "models").exists()

        status, text = http("POST", f"http://127.0.0.1:{embed_port}/v1/embeddings", key=env["VLLM_API_KEY"],
                            body={"model": "tiny-embed", "input": ["one", "two words", "and three words"]})
        assert status == 200, text
        vectors = [item["embedding"] for item in json.loads(text)["data"]]
        assert len(vectors) == 3 and {len(v) for v in vectors} == {128}  # hidden size of the tiny model
        # The pooler normalises: each vector has unit length.
        assert all(abs(sum(x * x for x in v) - 1) < 1e-2 for v in vectors)

        checks = run_checks(stack, embed, env, embed_port, service=SERVICE)
        table = format_table(checks)
        session_progress("\n" + table)
        by_name = {c.name: c for c in checks}
        assert all(c.ok for c in checks), table
        assert by_name[COMPLETION].skipped and by_name[CHAT].skipped
        assert not by_name[EMBEDDINGS].skipped and not by_name[RERANK].skipped
        # Only this service's containers ran: the chat server was not started.
        running = {c.labels["com.docker.compose.service"] for c in stack_containers(stack)}
        assert running == {"model-make-cpu-embed", "model-fetch-cpu-embed", SERVICE, DOOR}
    finally:
        stack.down(volumes=True)
        session_progress(f"embedding stack test took {time.monotonic() - started:.0f} s")


def stack_containers(stack: Stack):
    from kit.core.docker_engine import docker_client

    return docker_client().containers.list(all=True, filters={
        "label": f"com.docker.compose.project={stack.project}"})


def wait_for_door(port: int) -> None:
    """The door starts once its server is healthy and may still be binding its port: poll /health, bounded."""
    deadline = time.monotonic() + DOOR_START_S
    while True:
        try:
            if door_request(port, "GET", "/health")[0] == 200:
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"the door on 127.0.0.1:{port} did not answer /health in {DOOR_START_S} s"
        time.sleep(0.5)
