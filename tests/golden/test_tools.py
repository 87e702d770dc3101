"""Rendered files through the tools that read them: `docker compose config` (the docker CLI and its Compose plugin,
no engine) and hadolint. These need tools on the host, so they live with the golden layer (`make test-golden`:
"golden files, hadolint and compose config"), not in tests/unit ("no Docker"). A missing tool fails in CI."""

from __future__ import annotations

import json
import os
import subprocess

from kit.core.safevalue import compose_escape
from kit.deploy.pipeline import prepare
from tests.conftest import require_compose, require_tool
from tests.unit.test_injection import override, structure
from tests.unit.test_multinode import HEAD, files_for
from tests.unit.test_router import compose


def write(files: dict[str, str], folder) -> None:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)


def test_compose_config_accepts_both_cluster_roles(tmp_path):
    docker = require_compose()
    write(files_for("hardware.nodes=2", HEAD), tmp_path)
    env = {**os.environ, "VLLM_HOST_IP": "192.0.2.10"}  # documentation range; nothing is contacted
    for name in ("compose.head.yaml", "compose.worker.yaml"):
        result = subprocess.run([docker, "compose", "-f", name, "config", "-q"], cwd=tmp_path, env=env,
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    missing = subprocess.run([docker, "compose", "-f", "compose.head.yaml", "config", "-q"], cwd=tmp_path,
                             env={k: v for k, v in os.environ.items() if k != "VLLM_HOST_IP"},
                             capture_output=True, text=True)
    assert missing.returncode != 0 and "VLLM_HOST_IP" in missing.stderr


def test_hardened_compose_passes_docker_compose_config(tmp_path):
    docker = require_compose()
    write(prepare("cpu").files, tmp_path)
    result = subprocess.run([docker, "compose", "-f", str(tmp_path / "compose.yaml"), "config", "--format", "json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    svc = json.loads(result.stdout)["services"]["vllm"]
    assert svc["read_only"] is True and svc["cap_drop"] == ["ALL"] and svc["pids_limit"] > 0
    assert "/tmp:size=2g,exec" in svc["tmpfs"]


def test_compose_config_reads_a_hostile_render_as_the_literal_values(tmp_path):
    docker = require_compose()
    value = "$(id) ${HOME} `x` #c 'q' \"d\" yes 1e3"
    files = prepare("cpu", [override("runtime.env.FOO", value)]).files
    (tmp_path / "compose.yaml").write_text(files["compose.yaml"])
    result = subprocess.run([docker, "compose", "-p", "inj", "config", "--format", "json"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    # Compose prints a literal `$` in its escaped form; an interpolated ${HOME} would print the home directory.
    assert json.loads(result.stdout)["services"]["vllm"]["environment"]["FOO"] == compose_escape(value)


def test_hadolint_passes_a_dockerfile_built_from_hostile_label_and_index_values(tmp_path):
    hadolint = require_tool("hadolint")
    files = prepare("orin", [override("image.pip_index_url", "https://x.example/a b\"$(id)`#")]).files
    (tmp_path / "Dockerfile").write_text(files["Dockerfile"])
    result = subprocess.run([hadolint, "--no-color", str(tmp_path / "Dockerfile")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert structure(files)["Dockerfile"] == structure(prepare("orin").files)["Dockerfile"]


def test_compose_and_hadolint_accept_the_router_stack(tmp_path):
    docker = require_compose()
    _, files = compose("runtime.replicas=2")
    write(files, tmp_path)
    result = subprocess.run([docker, "compose", "-f", str(tmp_path / "compose.yaml"), "config", "-q"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    hadolint = require_tool("hadolint")
    result = subprocess.run([hadolint, str(tmp_path / "router" / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_resolves_the_side_by_side_include(tmp_path):
    docker = require_compose()
    write(prepare("cpu", with_presets=["cpu-embed"]).files, tmp_path)
    out = subprocess.run([docker, "compose", "config", "--services"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr  # four services, no clash
    assert sorted(out.stdout.split()) == ["door", "door-cpu-embed", "model-fetch", "model-fetch-cpu-embed",
                                          "model-make", "model-make-cpu-embed", "vllm", "vllm-cpu-embed"]
