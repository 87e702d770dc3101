"""The `cpu` preset for real: built from a wheelhouse on the local base, served by vLLM's CPU build."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time

import pytest

from kit.core.errors import BuildError
from kit.deploy.pipeline import prepare
from kit.run.smoke import NO_JIT, format_table, infra_host, run_checks, server_pids
from kit.run.workflow import render_into
from tests.integration.conftest import BASE_IMAGE, free_port


def test_every_smoke_check_passes(cpu_stack):
    checks = run_checks(cpu_stack.stack, cpu_stack.prepared, cpu_stack.env, cpu_stack.port)
    assert all(c.ok for c in checks), format_table(checks)
    # 11 before the model manifest (skipped: a generated model), the front door's refusals, the plan, and the no-JIT
    # row (skipped: the cpu image runs no FlashInfer)
    names = [c.name for c in checks]
    assert len(names) == len(set(names)) == 14, names
    assert "the front door refuses routes beyond the inference API" in names
    assert [c.skipped for c in checks if c.name == NO_JIT] == [True]


def test_kv_cache_log_equals_the_plan(cpu_stack):
    """Issue 4: the live server's `CPU KV cache size: N tokens` is what `kit plan` predicts."""
    logs = cpu_stack.stack.container().logs().decode()
    logged = int(re.search(r"CPU KV cache size: ([\d,]+) tokens", logs).group(1).replace(",", ""))
    assert logged == cpu_stack.prepared.report.plan.kv_cache_tokens
    result = subprocess.run([sys.executable, "-m", "kit.cli.main", "plan", "preset=cpu", "--json"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["data"]["kv_cache_tokens"] == logged


def test_image_contract(cpu_image, docker_client):
    image = docker_client.images.get(cpu_image.prepared.image_ref)
    config = image.attrs["Config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"][1:] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert image.labels["io.vllm-kit.preset"] == "cpu" and image.labels["io.vllm-kit.vllm-version"] == "0.32.0"
    run = lambda *argv: docker_client.containers.run(  # noqa: E731
        image.id, list(argv), entrypoint=[], remove=True, network_disabled=True).decode()
    versions = run("python3", "-c", "import vllm, torch; print(vllm.__version__, torch.__version__)").split()
    assert versions == ["0.32.0", "2.13.0+cpu"]
    # Slim: no compiler, no package lists, none of the packages left out on purpose.
    leftovers = run("sh", "-c", "command -v gcc cc g++ || true; ls /var/lib/apt/lists | grep -v -x -e lock -e partial || true; "
                    "/opt/venv/bin/pip list 2>/dev/null | grep -i -E '^(torchvision|torchaudio|torchcodec|triton) ' || true")
    assert leftovers.strip() == ""


# A rebuild after a flag or model change reusing every layer: tests/integration/test_journeys.py (the tweak).


def test_server_killed_comes_back_with_volumes_intact(cpu_stack):
    stack, container = cpu_stack.stack, cpu_stack.stack.container()
    marker = "/home/vllm/.cache/huggingface/kit-fault-marker"
    container.exec_run(["sh", "-c", f"echo before > {marker}"])
    restarts = container.attrs["RestartCount"]
    host = infra_host(container.id)
    pids = server_pids(host)
    assert pids, "no server process to kill"
    killed = container.exec_run(["kill", "-9", str(pids[0])])
    assert killed.exit_code == 0, killed.output
    window = cpu_stack.prepared.deployment.runtime.healthcheck_start_period + 60
    deadline = time.monotonic() + window
    while time.monotonic() < deadline:
        container.reload()
        if container.attrs["RestartCount"] > restarts and container.attrs["State"].get("Health", {}).get("Status") == "healthy":
            break
        time.sleep(2)
    else:
        pytest.fail(f"not healthy again within {window} s: {stack.logs_tail(20)}")
    assert container.exec_run(["cat", marker]).output.decode().strip() == "before"
    from kit.run.smoke import http

    status, body = http("GET", f"http://127.0.0.1:{cpu_stack.port}/v1/models", key=cpu_stack.env["VLLM_API_KEY"])
    assert status == 200 and "tiny-llama" in body


def test_failed_build_names_the_step_and_the_log(cpu_wheelhouse, tmp_path, docker_client):
    broken = prepare("cpu", ["image.extra_pip=['kit-no-such-package==0.0.1']"], base_image=BASE_IMAGE)
    render_into(broken, tmp_path)
    # The wheelhouse's lock does not know the extra package: the offline install must fail at its step.
    (tmp_path / "requirements.txt").write_text((tmp_path / "requirements.txt").read_text())
    from kit.image.build import prepare_build_context

    context = prepare_build_context(tmp_path, tmp_path / ".kit" / "build-context", cpu_wheelhouse)
    lock = context / "wheels" / "requirements.lock.txt"
    lock.unlink()
    lock.write_text("kit-no-such-package==0.0.1\n")
    from kit.image.build import BuildRequest, build_image

    with pytest.raises(BuildError) as info:
        build_image(BuildRequest(context, [broken.image_ref], offline=True), tmp_path / ".kit")
    assert re.search(r"step \d+/\d+", info.value.message)
    assert str(tmp_path / ".kit" / "build.log") in info.value.hint
    assert "kit-no-such-package" in (tmp_path / ".kit" / "build.log").read_text()
    from kit.run.workflow import image_exists

    assert not image_exists(broken.image_ref), "a failed build must not leave the release tag"


def test_port_in_use_is_a_clear_error_and_nothing_runs(cpu_image, tmp_path, docker_client):
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen(1)
        result = subprocess.run(
            [sys.executable, "-m", "kit.cli.main", "smoke", "preset=cpu", "--port", str(port), "--out", str(tmp_path),
             "--base-image", BASE_IMAGE], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is in use" in result.stderr and "--port" in result.stderr
    assert not docker_client.containers.list(all=True, filters={"label": "com.docker.compose.project"})  \
        or all(not c.name.startswith("kit-smoke-cpu") for c in docker_client.containers.list(all=True))


def test_kit_smoke_cli_end_to_end(cpu_image, cpu_wheelhouse, tmp_path, docker_client):
    """Into a folder whose .env the user started (a line of their own, no key yet, as the render note's
    VLLM_KIT_DOOR_IMAGE line starts one): the stack gets its key there, and the checks use it."""
    port = free_port()
    (tmp_path / ".env").write_text("# the user's own\nKIT_TEST_USER_NOTE=kept\n")
    result = subprocess.run(
        [sys.executable, "-m", "kit.cli.main", "smoke", "preset=cpu", "--port", str(port), "--out", str(tmp_path),
         "--base-image", BASE_IMAGE, "--wheelhouse", str(cpu_wheelhouse), "--json"],
        capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    report = json.loads(result.stdout)["data"]
    assert report["ok"] and len(report["checks"]) == 14
    [auth] = [c for c in report["checks"] if c["name"] == "requests without the API key are refused"]
    assert auth["detail"] == "HTTP 401 without the key"
    env = (tmp_path / ".env").read_text()
    assert "KIT_TEST_USER_NOTE=kept" in env and "VLLM_API_KEY=" in env
    # Nothing it started is left: containers, networks, volumes of its project.
    leftovers = [c.name for c in docker_client.containers.list(all=True) if c.name.startswith("kit-smoke-cpu-")]
    networks = [n.name for n in docker_client.networks.list() if n.name.startswith("kit-smoke-cpu-")]
    volumes = [v.name for v in docker_client.volumes.list() if v.name.startswith("kit-smoke-cpu-")]
    assert leftovers == networks == volumes == []


def wait_restarted_healthy(container, restarts: int, window: float) -> float | None:
    """Seconds until the container has restarted and is healthy again, or None after ``window`` seconds."""
    start = time.monotonic()
    while time.monotonic() - start < window:
        container.reload()
        if container.attrs["RestartCount"] > restarts and container.attrs["State"].get("Health", {}).get("Status") == "healthy":
            return time.monotonic() - start
        time.sleep(2)
    return None


def test_hung_server_is_restarted_by_the_watchdog(cpu_stack):
    """Issue 11.7: SIGSTOP the API server (its process lives, /health never answers): the serve watchdog stops it
    and exits 1, the restart policy starts the container again, and /health answers. The stack's watchdog polls
    every 5 s with a 10 s timeout and gives up after 3 failures (conftest WATCHDOG_FAST)."""
    container = cpu_stack.stack.container()
    container.reload()
    restarts = container.attrs["RestartCount"]
    host = infra_host(container.id)
    pids = server_pids(host)
    assert pids, "no server process to stop"
    stopped = container.exec_run(["kill", "-STOP", str(pids[0])])
    assert stopped.exit_code == 0, stopped.output
    window = cpu_stack.prepared.deployment.runtime.healthcheck_start_period + 120
    took = wait_restarted_healthy(container, restarts, window)
    if took is None:
        pytest.fail(f"not restarted and healthy within {window} s: {cpu_stack.stack.logs_tail(30)}")
    logs = container.logs().decode(errors="replace")
    assert "failed 3 times in a row while the server process lives" in logs
    from kit.run.smoke import http

    status, _ = http("GET", f"http://127.0.0.1:{cpu_stack.port}/health")
    assert status == 200
    print(f"SIGSTOP -> healthy again after {took:.0f} s")


def test_model_folder_is_read_only_and_each_container_sees_only_its_secrets(cpu_stack):
    """The model (the stack's models volume here; a host folder with model.host_path) is mounted read-only in the
    server and the fetch (a write from inside fails);
    the fetch runs as the non-root user with no capabilities on a read-only root; the server's environment holds
    the API key but not the fetch's HF token, and the fetch's the token but not the key (no shared env_file)."""
    container = cpu_stack.stack.container()
    model = cpu_stack.prepared.deployment.serve.model_arg  # the folder the server is given, e.g. /models/tiny-llama
    write = container.exec_run(["sh", "-c", f"touch {model}/kit-write-probe"])
    assert write.exit_code != 0 and b"Read-only file system" in write.output
    server_env = container.exec_run(["env"]).output.decode()
    assert f"VLLM_API_KEY={cpu_stack.env['VLLM_API_KEY']}" in server_env.splitlines()
    assert "HF_TOKEN" not in server_env and cpu_stack.env["HF_TOKEN"] not in server_env
    probe = ("id -u; touch /kit-root-probe 2>&1; touch " + model + "/kit-write-probe 2>&1; "
             "grep CapEff /proc/self/status; env")
    result = cpu_stack.stack.run("run", "--rm", "--no-deps", "--entrypoint", "/bin/sh", "model-fetch", "-c", probe,
                                 timeout=180)
    lines = result.stdout.splitlines()
    assert lines[0] == str(cpu_stack.prepared.deployment.runtime.run_user.uid) != "0"
    assert lines[1].endswith("Read-only file system") and lines[2].endswith("Read-only file system")
    assert lines[3].split() == ["CapEff:", "0000000000000000"]
    assert f"HF_TOKEN={cpu_stack.env['HF_TOKEN']}" in lines
    assert not any(line.startswith("VLLM_API_KEY=") for line in lines)


def test_model_make_ran_as_the_server_user_into_a_volume_the_server_cannot_write(cpu_stack):
    """Issue 23 item 5: the stack's own model-make made the model (no docker run beside it), as the non-root uid, into
    the models volume; the server reads it there and cannot change it."""
    d = cpu_stack.prepared.deployment
    uid = str(d.runtime.run_user.uid)
    make = cpu_stack.stack.container("model-make")  # exited, kept by compose
    make.reload()
    assert make.attrs["Config"]["User"] == f"{uid}:{d.runtime.run_user.gid}" and uid != "0"
    assert make.attrs["State"]["Status"] == "exited" and make.attrs["State"]["ExitCode"] == 0
    host_config = make.attrs["HostConfig"]
    assert host_config["CapDrop"] == ["ALL"] and not host_config.get("CapAdd") and host_config["ReadonlyRootfs"] is True
    volume = f"{cpu_stack.stack.project}_{cpu_stack.prepared.preset.runtime.models_volume}"
    assert [m["Name"] for m in make.attrs["Mounts"] if m["Type"] == "volume"] == [volume]
    server = cpu_stack.stack.container()
    mount = next(m for m in server.attrs["Mounts"] if m.get("Name") == volume)
    assert mount["Destination"] == "/models" and mount["RW"] is False
    owners = server.exec_run(["sh", "-c", f"stat -c %u {d.serve.model_arg} {d.serve.model_arg}/config.json"])
    assert owners.exit_code == 0 and owners.output.decode().split() == [uid, uid], owners.output
    for probe in (f"touch {d.serve.model_arg}/kit-write-probe", f"rm {d.serve.model_arg}/config.json", "mkdir /models/kit-probe"):
        result = server.exec_run(["sh", "-c", probe])
        assert result.exit_code != 0 and b"Read-only file system" in result.output, (probe, result.output)
    assert server.exec_run(["test", "-f", f"{d.serve.model_arg}/config.json"]).exit_code == 0
    assert not (cpu_stack.out_dir / "models").exists()  # nothing written into the deployment folder


def test_a_held_port_names_the_container_that_holds_it_and_how_to_stop_it(cpu_stack, docker_client, tmp_path):
    """The port check before a start (kit up, kit smoke) names what publishes the port: a kit folder's stack (a folder
    with the record `kit render` writes: `kit down` works there) as this folder's own (stop it; another port would
    re-render the folder under it) or another's (its `kit down` line, or --port); any other compose project
    (`docker compose -p P down`: the shared stack's folder is written by the library, without the record); and a
    container that is no compose project (`docker stop`). The kit folder's container carries the two labels compose
    sets (project, working_dir), the only things the check reads of it."""
    import shlex

    from click.testing import CliRunner

    from kit.cli.main import cli
    from kit.core.errors import KitError
    from kit.run.stack import require_free_port

    def hint(port, out_dir):
        with pytest.raises(KitError) as caught:
            require_free_port("127.0.0.1", port, out_dir)
        assert caught.value.message == f"port {port} on 127.0.0.1 is in use"
        return caught.value.hint

    compose = hint(cpu_stack.port, tmp_path)
    assert compose.startswith("container ") and f"of compose project {cpu_stack.stack.project} holds it" in compose
    assert f"`docker compose -p {cpu_stack.stack.project} down`" in compose

    folder = tmp_path / "kit folder"
    rendered = CliRunner().invoke(cli, ["render", "preset=cpu", "--out", str(folder), "--base-image", BASE_IMAGE])
    assert rendered.exit_code == 0, rendered.output
    port = free_port()
    labels = {"com.docker.compose.project": "held-port-test", "com.docker.compose.project.working_dir": str(folder)}
    holders = [docker_client.containers.run(BASE_IMAGE, ["sleep", "120"], detach=True, remove=True, entrypoint=[],
                                            labels=labels, ports={"9/tcp": ("127.0.0.1", port)})]
    try:
        stop = f"`kit down --out {shlex.quote(str(folder))}`"
        assert hint(port, folder) == (f"this folder's own stack holds it (container {holders[0].name}, compose project "
                                      f"held-port-test): stop it with {stop} first")
        other = hint(port, tmp_path)
        assert other.startswith(f"the kit stack of {folder} holds it") and stop in other
        assert other.endswith("or pick another port with --port N")
        plain_port = free_port()
        holders.append(docker_client.containers.run(BASE_IMAGE, ["sleep", "120"], detach=True, remove=True,
                                                    entrypoint=[], ports={"9/tcp": ("127.0.0.1", plain_port)}))
        assert hint(plain_port, tmp_path) == (f"container {holders[1].name} holds it: stop it with `docker stop "
                                              f"{holders[1].name}`, or pick another port with --port N")
    finally:
        for holder in holders:
            holder.remove(force=True)
