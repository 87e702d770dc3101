"""The paths users walk across commands, run as a user runs them: the `kit` console script in a shell, and every
command the kit prints (its `next:` line, the curl lines and the stop line of `kit up`) run exactly as printed.

Shared with the rest of the session: the cpu image (the `cpu_image` fixture; a render with the same base image asks
for the same tag, which the first journey asserts, so nothing is built twice) and the host's wheelhouse. The
production pin (lock, build, push, render by digest) is walked in tests/integration/test_registry_lock.py, on the
locked builds made there.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from kit.config.preset import preset_names
from tests.conftest import require_tool

from .conftest import BASE_IMAGE, free_port, session_progress

KIT_BIN = Path(sys.executable).parent  # the environment's `kit` console script, as a user's PATH has it
COMPOSE_TIMEOUT_S = 900


def user_env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{KIT_BIN}{os.pathsep}{os.environ.get('PATH', '')}", "NO_COLOR": "1"}


def shell(line: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """One line as a user types it."""
    session_progress(f"$ {line}")
    result = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=timeout, env=user_env(),
                            cwd=cwd)
    return result


def kit(*args: str, timeout: float = 900, ok: bool = True) -> subprocess.CompletedProcess[str]:
    result = shell(shlex.join(["kit", *args]), timeout=timeout)
    if ok:
        assert result.returncode == 0, f"kit {' '.join(args)}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


def printed(text: str, prefix: str) -> str:
    """The one line of ``text`` that starts with ``prefix``, without it: a command the kit printed."""
    lines = [line.removeprefix(prefix) for line in text.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, f"expected one line starting {prefix!r} in:\n{text}"
    return lines[0]


def get_json(url: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200
        return json.loads(response.read())


def compose_down(out: Path) -> None:
    if (out / "compose.yaml").is_file():
        subprocess.run(["docker", "compose", "down", "--volumes", "--remove-orphans", "--timeout", "20"], cwd=out,
                       capture_output=True, timeout=300)


def server_args(out: Path, docker_client) -> list[str]:
    project = out.name
    (container,) = docker_client.containers.list(filters={"label": [f"com.docker.compose.project={project}",
                                                                     "com.docker.compose.service=vllm"]})
    return container.attrs["Args"]


def test_render_then_the_printed_next_step_serves_and_a_tweak_survives_a_restart(cpu_image, cpu_wheelhouse,
                                                                                 docker_client, tmp_path):
    """The exact preset served by `docker compose up` as `kit render` prints it (the stack makes its own tiny
    model), then tweaked, re-rendered, rebuilt (`kit build --out DIR`: every layer from the cache) and started again
    with `kit up --out DIR` alone: the port given at the first render and the tweak both hold, and the commands
    `kit up` prints work as printed."""
    port = free_port()
    out = tmp_path / f"journey-{os.getpid()}"
    rendered = kit("render", "preset=cpu", f"runtime.port={port}", "--base-image", BASE_IMAGE, "--out", str(out))
    compose = yaml.safe_load((out / "compose.yaml").read_text())
    assert compose["services"]["vllm"]["image"] == cpu_image.prepared.image_ref  # the session's image: no build
    next_step = printed(rendered.stderr, "next: ")
    assert next_step == f"cd {shlex.quote(str(out))} && docker compose up -d --wait"
    try:
        up = shell(next_step, timeout=COMPOSE_TIMEOUT_S)
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-3000:]
        # Made by the stack's model-make service, as the server's uid, in the stack's models volume (not in the folder).
        owner = shell(f"cd {shlex.quote(str(out))} && docker compose exec -T vllm stat -c %u /models/tiny-llama/config.json",
                      timeout=60)
        assert owner.returncode == 0 and owner.stdout.strip() == "10001", owner.stdout + owner.stderr
        assert not (out / "models").exists()
        models = get_json(f"http://127.0.0.1:{port}/v1/models")
        assert [m["id"] for m in models["data"]] == ["tiny-llama"]
        completion = get_json(f"http://127.0.0.1:{port}/v1/completions",
                              {"model": "tiny-llama", "prompt": "Hello", "max_tokens": 4})
        assert completion["usage"]["completion_tokens"] > 0

        # The tweak: only the folder and the new overrides (a flag and the served name); the recorded port stays.
        tweaked = kit("render", "--out", str(out), "engine.max_num_seqs=4", "model.served_model_name=journey")
        assert f"changed  {out / 'compose.yaml'}" in tweaked.stdout
        # Rebuilt from the folder alone: flags and the model's name are not image inputs, so every layer that can
        # come from the cache does (FROM and the global ARG never print "Using cache"), and the image is the same.
        rebuilt = json.loads(kit("build", "--out", str(out), "--wheelhouse", str(cpu_wheelhouse), "--json").stdout)
        data = rebuilt["data"]
        assert data["cached_steps"] >= data["total_steps"] - 3, data
        assert data["image_id"] == cpu_image.result.image_id
        started = kit("up", "--out", str(out), "--wheelhouse", str(cpu_wheelhouse), timeout=COMPOSE_TIMEOUT_S)
        assert f"on http://127.0.0.1:{port}" in started.stdout, started.stdout
        args = server_args(out, docker_client)
        assert args[args.index("--max-num-seqs") + 1] == "4"
        curls = [line.strip() for line in started.stdout.splitlines() if line.strip().startswith("curl ")]
        assert len(curls) == 2
        for line in curls:
            answer = shell(line, timeout=120)
            assert answer.returncode == 0, answer.stderr
            assert '"journey"' in answer.stdout or '"choices"' in answer.stdout, answer.stdout
        status = kit("status", "--out", str(out))
        assert "runtime.port=" in status.stdout and "engine.max_num_seqs=4" in status.stdout
        assert any(line.split()[:2] == ["model", "journey"] for line in status.stdout.splitlines()), status.stdout
        assert any(line.split()[:2] == ["health", "ok"] for line in status.stdout.splitlines()), status.stdout
        stop = printed(started.stdout, "stop it with: ")
        stopped = shell(stop, timeout=300)
        assert stopped.returncode == 0, stopped.stderr
        assert not docker_client.containers.list(filters={"label": f"com.docker.compose.project={out.name}"})
    finally:
        compose_down(out)


def test_add_ons_added_and_removed(tmp_path):
    """`--with monitoring` adds its services; `--without monitoring` takes them out again, and compose agrees."""
    require_tool("docker")
    out = tmp_path / "addons"
    kit("render", "preset=cpu", "--with", "monitoring", "--out", str(out))
    (out / ".env").write_text("GRAFANA_ADMIN_PASSWORD=journey-test\n")  # .env.example says the stack needs it
    config = shell("docker compose config --services", cwd=out)
    assert config.returncode == 0, config.stderr
    assert {"prometheus", "grafana", "vllm"} <= set(config.stdout.split())
    removed = kit("render", "--out", str(out), "--without", "monitoring")
    assert f"removed  {out / 'monitoring' / 'prometheus.yml'}" in removed.stdout, removed.stdout
    assert not (out / "monitoring").exists()  # its files and the folders they were in
    config = shell("docker compose config --services", cwd=out)
    assert config.returncode == 0, config.stderr
    assert set(config.stdout.split()) == {"model-make", "model-fetch", "vllm", "door"}


def test_kubernetes_from_render_to_kustomize(tmp_path):
    """A Kubernetes render, re-rendered from its folder alone, builds with kubectl's own kustomize."""
    kubectl = require_tool("kubectl")
    out = tmp_path / "k8s-journey"
    rendered = kit("render", "preset=cpu", "--target", "k8s", "--out", str(out))
    next_step = printed(rendered.stderr, "next: ")
    assert f"kubectl apply -k {out / 'k8s'}" in next_step
    kit("render", "--out", str(out), "engine.max_num_seqs=4")  # the recorded target holds
    assert not (out / "compose.yaml").exists()
    built = subprocess.run([kubectl, "kustomize", str(out / "k8s")], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    docs = [d for d in yaml.safe_load_all(built.stdout) if d]
    deployment = next(d for d in docs if d["kind"] in ("Deployment", "StatefulSet"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = container.get("args", [])
    assert args[args.index("--max-num-seqs") + 1] == "4"


@pytest.mark.parametrize("preset", preset_names())
def test_every_presets_printed_next_step_runs(preset, tmp_path):
    """`kit render` of each shipped preset ends with a command; here (no GPU) compose checks the very stack it would
    start (`config` in place of `up -d --wait`); cpu's is run for real by the first journey above."""
    require_tool("docker")
    out = tmp_path / preset
    rendered = kit("render", f"preset={preset}", "--out", str(out))
    next_step = printed(rendered.stderr, "next: ")
    assert next_step == f"cd {shlex.quote(str(out))} && docker compose up -d --wait"
    (out / ".env").write_text("VLLM_HOST_IP=192.0.2.10\n")  # a documentation address, for host-networked stacks
    checked = shell(next_step.replace("docker compose up -d --wait", "docker compose config --quiet"))
    assert checked.returncode == 0, checked.stderr
