"""The fetch script against a hub stand-in on 127.0.0.1: real huggingface_hub, real downloads, then offline reads.

The stand-in answers the two calls the script makes (the repo tree, and HEAD/GET of resolve URLs) the way the
hub's API does, with the headers huggingface_hub reads (X-Repo-Commit, ETag, Content-Length).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from kit.config.preset import load_preset
from tests.conftest import require_module
from tests.unit.test_fetch import host_command

pytestmark = pytest.mark.unit
huggingface_hub = require_module("huggingface_hub")

COMMIT = "0123456789abcdef0123456789abcdef01234567"
WEIGHT_MAP = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
REPOS = {
    "org/llama": {
        "config.json": b'{"architectures": ["LlamaForCausalLM"]}',
        "tokenizer.json": b"{}",
        "model.safetensors.index.json": json.dumps({"weight_map": WEIGHT_MAP}).encode(),
        "model-00001-of-00002.safetensors": b"A" * 300_000,
        "model-00002-of-00002.safetensors": b"B" * 200_000,
        "pytorch_model.bin": b"C" * 500_000,
        "original/consolidated.00.pth": b"D" * 400_000,
        "original/params.json": b"{}",
    },
    "org/adapter": {"adapter_config.json": b"{}", "adapter_model.safetensors": b"E" * 1000, "README.md": b"x"},
}


class Hub(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass

    def _file(self):
        parts = unquote(urlparse(self.path).path).strip("/").split("/")
        # /{org}/{name}/resolve/{revision}/{path...}
        if len(parts) >= 5 and parts[2] == "resolve":
            repo = REPOS.get(f"{parts[0]}/{parts[1]}", {})
            return repo.get("/".join(parts[4:]))
        return None

    def _send_file(self, body: bytes, with_body: bool):
        self.send_response(200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", '"%s"' % hashlib.sha1(body).hexdigest())
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def do_HEAD(self):
        body = self._file()
        if body is None:
            self.send_error(404)
        else:
            self._send_file(body, False)

    def do_GET(self):
        path = urlparse(self.path).path
        if path.startswith("/api/models/") and "/tree/" in path:
            repo = REPOS["/".join(path.split("/")[3:5])]
            items = [{"type": "file", "oid": hashlib.sha1(body).hexdigest(), "size": len(body), "path": name}
                     for name, body in sorted(repo.items())]
            data = json.dumps(items).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        body = self._file()
        if body is None:
            self.send_error(404)
        else:
            self._send_file(body, True)


@pytest.fixture()
def hub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_fetch_downloads_what_vllm_reads_then_serves_offline(hub, tmp_path):
    _, _, preset = load_preset("rtx4090-awq", ["model.id=org/llama", 'engine.lora_modules=["sql=org/adapter"]'])
    command = host_command("rtx4090-awq", preset, "org/llama", tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=hub, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1")
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "model ready: org/llama, org/adapter"
    # progress: a summary per artefact and a line per file with bytes so far
    assert "model org/llama: 6 of 8 files" in result.stderr
    assert "[6/6]" in result.stderr and "lora sql org/adapter: 3 of 3 files" in result.stderr

    snapshot = tmp_path / "hf" / "hub" / "models--org--llama" / "snapshots" / COMMIT
    got = sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file())
    assert got == sorted(["config.json", "tokenizer.json", "model.safetensors.index.json", *WEIGHT_MAP.values(),
                          "original/params.json"])

    # What vLLM does at start with HF_HUB_OFFLINE=1: snapshot_download(local_files_only) of its weight pattern,
    # and of the adapter; both must resolve from the cache alone.
    offline = {**env, "HF_HUB_OFFLINE": "1"}
    probe = ("import huggingface_hub as h, pathlib; "
             "p = h.snapshot_download('org/llama', allow_patterns=[list(%r)], local_files_only=True); "
             "a = h.snapshot_download('org/adapter', local_files_only=True); "
             "print(sorted(x.name for x in pathlib.Path(p).glob('*.safetensors')), "
             "(pathlib.Path(a) / 'adapter_config.json').is_file())") % (sorted(WEIGHT_MAP.values()),)
    seen = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=offline, timeout=60)
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.strip() == f"{sorted(WEIGHT_MAP.values())} True"


def test_a_missing_repo_fails_naming_the_flag(hub, tmp_path):
    spec = json.dumps({"model": "org/nowhere", "num_speculative_tokens": 2})
    _, _, preset = load_preset("rtx4090-awq", ["model.id=org/llama", f"engine.speculative_config={spec}"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=hub, HF_HOME=str(tmp_path / "hf"))
    result = subprocess.run(host_command("rtx4090-awq", preset, "org/llama", tmp_path), capture_output=True,
                            text=True, env=env, timeout=120)
    assert result.returncode == 1
    assert result.stdout.strip() == "model missing: org/nowhere (engine.speculative_config.model)"
    assert "draft model org/nowhere:" in result.stderr
    assert Path(tmp_path / "hf" / "hub" / "models--org--llama").is_dir()  # the rest was still fetched
