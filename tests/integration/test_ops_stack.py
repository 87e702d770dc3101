"""kit ps / status / logs against the shared running `cpu` stack, and kit down of a head and a worker on one host."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.docker_engine import compose_argv
from kit.core.write import write_files
from kit.deploy.record import RECORD_FILE, Record
from tests.integration.conftest import BASE_IMAGE

pytestmark = pytest.mark.integration


def kit_json(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


def test_ps_status_and_logs_of_the_running_stack(cpu_stack):
    out = str(cpu_stack.out_dir)
    # The fixture named its project itself (kit-test-cpu-PID): the kit finds it from the directory alone.
    code, env = kit_json("ps", "--out", out)
    server = next(r for r in env["data"] if r["service"] == "vllm")
    assert code == 0 and server["project"] == cpu_stack.stack.project and server["state"] == "running"
    # The server publishes nothing; its front door holds the stack's one published port (kit/deploy/door.py).
    assert server["ports"] == ""
    door = next(r for r in env["data"] if r["service"] == "door")
    assert door["state"] == "running" and f"127.0.0.1:{cpu_stack.port}->" in door["ports"]

    code, env = kit_json("status", "--out", out)
    data = env["data"]
    assert code == 0 and env["ok"] is True and data["health"] == "ok"
    assert data["model"] == cpu_stack.prepared.deployment.serve.served_model_name
    assert isinstance(data["kv_cache_usage_perc"], float) and 0.0 <= data["kv_cache_usage_perc"] <= 1.0
    assert data["requests_running"] is not None and data["url"] == f"http://127.0.0.1:{cpu_stack.port}"

    code, env = kit_json("logs", "--out", out, "vllm")
    assert code == 0 and any(re.search(r"KV cache size: [\d,]+ tokens", line) for line in env["data"]["lines"])
    tail = CliRunner().invoke(cli, ["logs", "--out", out, "--tail", "3", "vllm"])
    assert tail.exit_code == 0 and 1 <= len(tail.stdout.splitlines()) <= 3


def node_file(role: str) -> str:
    # A stand-in for each role of a cluster stack: a long sleep on the local base image, no build needed.
    service = "vllm" if role == "head" else "ray-worker"
    return (f"services:\n  {service}:\n    image: {BASE_IMAGE}\n    command: [sleep, '600']\n    init: true\n"
            f"    network_mode: none\n")


def test_down_stops_a_head_and_a_worker_started_on_this_host(tmp_path, docker_client):
    # Written as a render writes them (the manifest lists them): `kit down` acts only on a deployment the kit made.
    write_files({**{f"compose.{role}.yaml": node_file(role) for role in ("head", "worker")},
                 RECORD_FILE: Record("cpu", "cpu", "").text()}, tmp_path)
    projects = [f"kit-test-ops-{role}-{os.getpid()}" for role in ("head", "worker")]
    try:
        for role, project in zip(("head", "worker"), projects, strict=True):
            # As CLUSTER.md has a user start each side, each under a project name of its own.
            subprocess.run([*compose_argv(), "-p", project, "-f", str(tmp_path / f"compose.{role}.yaml"), "up", "-d"],
                           check=True, capture_output=True, timeout=120)
        code, env = kit_json("down", "--out", str(tmp_path))
        assert code == 0 and sorted(p["project"] for p in env["data"]["projects"]) == sorted(projects)
        assert len(env["data"]["containers_removed"]) == 2  # one per side, each named in the answer
        left = [c.name for p in projects
                for c in docker_client.containers.list(all=True, filters={"label": f"com.docker.compose.project={p}"})]
        assert left == []
    finally:
        for project in projects:
            subprocess.run([*compose_argv(), "-p", project, "down", "--timeout", "1"], capture_output=True, timeout=120)
