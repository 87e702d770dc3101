"""The paths users walk across commands, run as a user runs them: the `kit` console script in a shell, and every
command the kit prints (its `next:` line, the curl lines and the stop line of `kit up`) run exactly as printed.
Nothing is added to the folder's .env by the tests: what the stack requires (the API key, an add-on's passwords),
`kit render` writes there itself.

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

from kit.config.preset_files import preset_names
from kit.config.presetload import load_preset
from kit.core.datafiles import PRESETS_DIR
from kit.core.envfile import read_env_file
from kit.deploy.door import IMAGE_ENV
from kit.deploy.record import compose_project
from tests.conftest import require_tool

from .conftest import BASE_IMAGE, DOOR_START_S, door_request, free_port, session_progress

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


def get_json(url: str, key: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json",
                                                              "Authorization": f"Bearer {key}"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=60) as response:
        assert response.status == 200
        return json.loads(response.read())


def folder_key(out: Path) -> str:
    """The key `kit render` wrote into the folder's .env (read as compose reads it)."""
    key = read_env_file(out / ".env").get("VLLM_API_KEY")
    assert key, f"{out / '.env'} has no VLLM_API_KEY"
    return key


def up_line(out: Path) -> str:
    return f"cd {shlex.quote(str(out))} && docker compose -p {compose_project(out)} up -d --wait --remove-orphans"


def door_status(port: int, path: str, key: str | None = None) -> int:
    """A GET through the door, polled until it answers (it starts once its backend is healthy)."""
    import time

    deadline = time.monotonic() + DOOR_START_S
    while True:
        try:
            return door_request(port, "GET", path, key=key)[0]
        except OSError:
            assert time.monotonic() < deadline, f"nothing answers on 127.0.0.1:{port}"
            time.sleep(0.5)


def services_running(docker_client, out: Path) -> set[str]:
    label = f"com.docker.compose.project={compose_project(out)}"
    return {c.labels["com.docker.compose.service"] for c in docker_client.containers.list(filters={"label": label})}


def container_ids(docker_client, out: Path) -> dict[str, str]:
    label = f"com.docker.compose.project={compose_project(out)}"
    return {c.labels["com.docker.compose.service"]: c.id for c in docker_client.containers.list(filters={"label": label})}


def compose_down(out: Path) -> None:
    if (out / "compose.yaml").is_file():
        subprocess.run(["docker", "compose", "-p", compose_project(out), "down", "--volumes", "--remove-orphans",
                        "--timeout", "20"], cwd=out, capture_output=True, timeout=300)


def server_args(out: Path, docker_client) -> list[str]:
    project = compose_project(out)
    (container,) = docker_client.containers.list(filters={"label": [f"com.docker.compose.project={project}",
                                                                     "com.docker.compose.service=vllm"]})
    return container.attrs["Args"]


def test_render_then_the_printed_next_step_serves_and_a_tweak_survives_a_restart(cpu_image, cpu_wheelhouse,
                                                                                 docker_client, tmp_path):
    """The exact preset, with an embedding server beside it (`--with-preset`, the add-on that runs on this machine:
    the same image), served by `docker compose up` as `kit render` prints it (the stack makes its own tiny models,
    the key is the one render wrote into .env); the add-on taken out again (`--without`), whose printed line stops
    its services; then tweaked, re-rendered, rebuilt (`kit build --out DIR`: every layer from the cache) and started
    again with `kit up --out DIR` alone: the port given at the first render and the tweak both hold, and the commands
    `kit up` prints work as printed."""
    port, embed_port = free_port(), free_port()
    out = tmp_path / f"journey-{os.getpid()}"
    # cpu-embed as shipped, on a free port (a user's copy of it: the shared test host may have 8001 taken)
    embed = tmp_path / "presets" / "journey-embed.yaml"
    embed.parent.mkdir()
    data = yaml.safe_load((PRESETS_DIR / "cpu-embed.yaml").read_text())
    data["runtime"]["port"] = embed_port
    embed.write_text(yaml.safe_dump(data))
    rendered = kit("render", "preset=cpu", f"runtime.port={port}", "--base-image", BASE_IMAGE, "--with-preset",
                   str(embed), "--out", str(out))
    compose = yaml.safe_load((out / "compose.yaml").read_text())
    assert compose["services"]["vllm"]["image"] == cpu_image.prepared.image_ref  # the session's image: no build
    next_step = printed(rendered.stderr, "next: ")
    assert next_step == up_line(out)
    # A render for a host without a registry (--base-image) whose images this engine has: nothing to build first
    # (the line above has no `kit build`), nothing compose would pull, no note.
    assert not [line for line in rendered.stderr.splitlines() if line.startswith("note: ")], rendered.stderr
    assert f"wrote VLLM_API_KEY into {out / '.env'}" in rendered.stderr
    key = folder_key(out)
    assert key not in rendered.stdout + rendered.stderr
    try:
        up = shell(next_step, timeout=COMPOSE_TIMEOUT_S)
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-3000:]
        # The curl lines render prints after it, run where that line leaves the shell (the folder): the key from .env.
        tries = [line.strip() for line in rendered.stderr.splitlines() if line.startswith("  curl ")]
        assert len(tries) == 2 and key not in "".join(tries)
        for line in tries:
            answer = shell(line, timeout=120, cwd=out)
            assert answer.returncode == 0 and ('"tiny-llama"' in answer.stdout or '"choices"' in answer.stdout), \
                answer.stdout + answer.stderr
        # Made by the stack's model-make service, as the server's uid, in the stack's models volume (not in the folder).
        # typed in the folder without -p, as a user would: compose.yaml names the folder's project
        owner = shell(f"cd {shlex.quote(str(out))} && docker compose exec -T vllm "
                      "stat -c %u /models/tiny-llama/config.json", timeout=60)
        assert owner.returncode == 0 and owner.stdout.strip() == "10001", owner.stdout + owner.stderr
        assert not (out / "models").exists()
        # The key is required: without it the door refuses, with the one in .env both servers answer.
        assert door_status(port, "/v1/models") == 401
        models = get_json(f"http://127.0.0.1:{port}/v1/models", key)
        assert [m["id"] for m in models["data"]] == ["tiny-llama"]
        completion = get_json(f"http://127.0.0.1:{port}/v1/completions", key,
                              {"model": "tiny-llama", "prompt": "Hello", "max_tokens": 4})
        assert completion["usage"]["completion_tokens"] > 0
        assert door_status(embed_port, "/v1/models") == 401
        assert door_status(embed_port, "/v1/models", key) == 200
        assert {"vllm-journey-embed", "door-journey-embed"} <= services_running(docker_client, out)

        # The add-on out again: the printed line stops its services (compose would otherwise leave them running).
        removed = kit("render", "--out", str(out), "--without", str(embed))  # as it was given
        assert printed(removed.stderr, "next: ") == up_line(out)
        again = shell(printed(removed.stderr, "next: "), timeout=COMPOSE_TIMEOUT_S)
        assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
        assert services_running(docker_client, out) == {"vllm", "door"}
        assert get_json(f"http://127.0.0.1:{port}/v1/models", key)["data"][0]["id"] == "tiny-llama"

        # The tweak: only the folder and the new overrides (a flag and the served name); the recorded port stays.
        tweaked = kit("render", "--out", str(out), "engine.max_num_seqs=4", "model.served_model_name=journey")
        assert f"changed  {out / 'compose.yaml'}" in tweaked.stdout
        assert "note: " not in tweaked.stderr, tweaked.stderr  # the image's tag holds
        # Rebuilt from the folder alone: flags and the model's name are not image inputs, so every layer that can
        # come from the cache does (FROM and the global ARG never print "Using cache"), and the image is the same.
        rebuilt = json.loads(kit("build", "--out", str(out), "--wheelhouse", str(cpu_wheelhouse), "--json").stdout)
        data = rebuilt["data"]
        assert data["cached_steps"] >= data["total_steps"] - 3, data
        assert data["image_id"] == cpu_image.result.image_id
        assert data["next"] == up_line(out)  # the build names what comes after it: the render's line
        door_before = container_ids(docker_client, out)["door"]
        started = kit("up", "--out", str(out), "--wheelhouse", str(cpu_wheelhouse), timeout=COMPOSE_TIMEOUT_S)
        assert f"on http://127.0.0.1:{port}" in started.stdout, started.stdout
        # The stack ran: only the server, whose flags changed, is recreated; the door keeps running.
        assert "(updated vllm; the rest kept running)" in started.stdout, started.stdout + started.stderr
        ids = container_ids(docker_client, out)
        assert ids["door"] == door_before
        # Nothing changed since: `kit up` again leaves the healthy stack as it is, and says so.
        again = kit("up", "--out", str(out), timeout=COMPOSE_TIMEOUT_S)
        assert again.stdout.startswith(f"unchanged: cpu serves journey on http://127.0.0.1:{port}"), again.stdout
        assert container_ids(docker_client, out) == ids
        args = server_args(out, docker_client)
        assert args[args.index("--max-num-seqs") + 1] == "4"
        curls = [line.strip() for line in started.stdout.splitlines() if line.strip().startswith("curl ")]
        assert len(curls) == 2
        assert key not in started.stdout + started.stderr  # the lines read the key from .env; the kit prints none
        for line in curls:
            answer = shell(line, timeout=120)
            assert answer.returncode == 0, answer.stderr
            assert '"journey"' in answer.stdout or '"choices"' in answer.stdout, answer.stdout
        status = kit("status", "--out", str(out))
        assert "runtime.port=" in status.stdout and "engine.max_num_seqs=4" in status.stdout
        assert any(line.split()[:2] == ["model", "journey"] for line in status.stdout.splitlines()), status.stdout
        assert any(line.split()[:2] == ["health", "ok"] for line in status.stdout.splitlines()), status.stdout
        stop = printed(started.stdout, "stop it with: ")
        # `kit smoke` on the folder while its stack runs: refused before it renders or starts anything, with the
        # same stop line `kit up` printed (a smoke renders into the folder and starts a stack of its own from it).
        files = {path: path.read_bytes() for path in out.rglob("*") if path.is_file() and ".kit" not in path.parts}
        smoked = kit("smoke", "--out", str(out), ok=False)
        assert smoked.returncode != 0 and "the folder's own stack runs" in smoked.stderr, smoked.stderr
        assert f"stop it first with `{stop}`" in smoked.stderr, smoked.stderr
        assert {path: path.read_bytes() for path in out.rglob("*")
                if path.is_file() and ".kit" not in path.parts} == files
        assert container_ids(docker_client, out) == ids
        stopped = shell(stop, timeout=300)
        assert stopped.returncode == 0, stopped.stderr
        label = f"com.docker.compose.project={compose_project(out)}"
        assert not docker_client.containers.list(filters={"label": label})
    finally:
        compose_down(out)


def build_first(out: Path) -> str:
    """What render puts before the compose line when the engine lacks the kit's image (it is built, not pulled)."""
    return f"kit build --out {shlex.quote(str(out))} && "


def as_config(next_step: str) -> str:
    """The printed line with compose's `config` in place of `up` (nothing is started; no image is needed): compose
    reads exactly what `up` would, the folder's .env included, and refuses what `up` would refuse. A leading
    `kit build --out DIR && ` is left out: building is the image tests' part, and here no base image can be pulled."""
    assert next_step.endswith(" up -d --wait --remove-orphans"), next_step
    compose = next_step.split(" && ", 1)[1] if next_step.startswith("kit build --out ") else next_step
    return compose.removesuffix(" up -d --wait --remove-orphans") + " config --quiet"


def test_add_ons_added_and_removed(tmp_path):
    """`--with monitoring` adds its services; `--without monitoring` takes them out again, and compose agrees; each
    printed line runs with nothing added to .env (render wrote Grafana's password there)."""
    require_tool("docker")
    out = tmp_path / "addons"
    added = kit("render", "preset=cpu", "--with", "monitoring", "--out", str(out))
    # The session's stand-in door (VLLM_KIT_DOOR_IMAGE, conftest.py) goes into .env too, as a site's would.
    site = {IMAGE_ENV} if os.environ.get(IMAGE_ENV) else set()
    assert "GRAFANA_ADMIN_PASSWORD" in added.stderr and set(read_env_file(out / ".env")) == {
        "VLLM_API_KEY", "GRAFANA_ADMIN_PASSWORD", *site}
    checked = shell(as_config(printed(added.stderr, "next: ")))
    assert checked.returncode == 0, checked.stderr
    config = shell("docker compose config --services", cwd=out)
    assert config.returncode == 0, config.stderr
    assert {"prometheus", "grafana", "vllm"} <= set(config.stdout.split())
    removed = kit("render", "--out", str(out), "--without", "monitoring")
    assert f"removed  {out / 'monitoring' / 'prometheus.yml'}" in removed.stdout, removed.stdout
    assert not (out / "monitoring").exists()  # its files and the folders they were in
    checked = shell(as_config(printed(removed.stderr, "next: ")))
    assert checked.returncode == 0, checked.stderr
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


ADD_ONS = [[], ["--with", "monitoring"], ["--with", "webui"], ["--with", "monitoring", "--with", "webui"]]
KEYLESS = ["runtime.require_api_key=false"]


def combinations(preset: str) -> list[tuple[list[str], list[str]]]:
    """(add-ons, options): every combination for the cpu family, which the add-ons are tested beside for real; for
    a GPU preset (its add-ons lay out the same services) none, both add-ons, and keyless, to keep CI's time."""
    if load_preset(preset)[2].hardware.gpu is None:
        return [(a, o) for a in ADD_ONS for o in ([], KEYLESS)]
    return [([], []), (ADD_ONS[-1], []), ([], KEYLESS)]


@pytest.mark.parametrize("preset", preset_names())
def test_every_presets_printed_next_step_runs_whatever_the_add_ons(preset, tmp_path):
    """`kit render` of each shipped preset, with add-ons and with the key turned off by name, ends with a command
    that runs as printed: here (no GPU, and no add-on image to pull) compose checks the very stack it would start,
    `config` in place of `up -d --wait`, with the .env render wrote and nothing else (the first journey above runs
    the cpu stack's for real). A keyless stack gets no key, and says so every time."""
    require_tool("docker")
    for number, (add_ons, options) in enumerate(combinations(preset)):
        out = tmp_path / f"{preset}-{number}"
        rendered = kit("render", f"preset={preset}", *options, *add_ons, "--out", str(out))
        next_step = printed(rendered.stderr, "next: ")
        # The line builds the kit's image first exactly when this engine lacks it (the session's cpu image is
        # built onto the stand-in base, so a default render's tag is another one; no GPU preset's image is built).
        ref = yaml.safe_load((out / "compose.yaml").read_text())["services"]["vllm"]["image"]
        have = subprocess.run(["docker", "image", "inspect", ref], capture_output=True, timeout=60).returncode == 0
        assert next_step == ("" if have else build_first(out)) + up_line(out), (add_ons, options, ref, have)
        checked = shell(as_config(next_step))
        assert checked.returncode == 0, f"{preset} {add_ons} {options}: {checked.stderr}"
        keyless = bool(options)
        assert ("VLLM_API_KEY" in read_env_file(out / ".env")) is not keyless
        assert ("warning: override runtime.require_api_key: false" in rendered.stderr) is keyless
