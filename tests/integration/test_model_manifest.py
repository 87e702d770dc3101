"""`kit smoke`'s manifest row in a real container: the fetch's manifest checked with docker exec, inside.

The model is fetched on the host from the hub stand-in of tests/unit/test_fetch_hub.py (real huggingface_hub, real
downloads) into an HF cache that a container of the local base image mounts read-only, as the server container
mounts the stack's cache volume; kit.run.smoke.manifest_check then runs the fetch script's --verify in it. A blob
swapped afterwards fails the row naming the file. About 5 s; no image build.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
from http.server import ThreadingHTTPServer

import pytest

from kit.config.presetload import load_preset
from kit.run.smoke import manifest_check
from tests.conftest import require_module
from tests.integration.conftest import BASE_IMAGE
from tests.unit.test_fetch import host_command

pytestmark = pytest.mark.integration
require_module("huggingface_hub")


def test_the_manifest_is_checked_inside_the_container(docker_client, tmp_path):
    from tests.unit import test_fetch_hub as standin

    server = ThreadingHTTPServer(("127.0.0.1", 0), standin.Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _, _, preset = load_preset("rtx4090-awq", ["model.id=org/llama"])
        command = host_command("rtx4090-awq", preset, "org/llama", tmp_path)
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update(HF_ENDPOINT=f"http://127.0.0.1:{server.server_address[1]}", HF_HOME=str(tmp_path / "hf"),
                   HF_HUB_DISABLE_TELEMETRY="1")
        fetched = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        assert fetched.returncode == 0, fetched.stderr
    finally:
        server.shutdown()
        server.server_close()
    container = docker_client.containers.run(
        BASE_IMAGE, ["sleep", "120"], detach=True, user="65534:65534", network_mode="none",
        environment={"HF_HOME": "/cache/hf", "HF_HUB_OFFLINE": "1"},
        volumes={str(tmp_path / "hf"): {"bind": "/cache/hf", "mode": "ro"},
                 command[1]: {"bind": "/opt/vllm-kit/fetch_files.py", "mode": "ro"}})
    try:
        in_image = ["python3", "/opt/vllm-kit/fetch_files.py", command[2]]
        ok, detail = manifest_check(container, in_image)
        assert ok, detail
        assert detail == f"model org/llama@{standin.COMMIT}: manifest ok"
        snapshot = tmp_path / "hf" / "hub" / "models--org--llama" / "snapshots" / standin.COMMIT
        shard = json.loads(standin.REPOS["org/llama"]["model.safetensors.index.json"])["weight_map"]["b"]
        (snapshot / shard).resolve().write_bytes(b"Z" * 200_000)
        ok, detail = manifest_check(container, in_image)
        assert not ok
        assert detail.startswith(f"manifest check failed: org/llama (model.id): {shard}: sha256 "
                                 f"{hashlib.sha256(b'Z' * 200_000).hexdigest()}, the manifest says "), detail
    finally:
        container.remove(force=True)
