"""`kit down` acts only on stacks the kit rendered: compose projects made by hand are left running, volumes and all.

Each stand-in is a one-service compose project on the local base image (a sleep, no network, no build), started
with `docker compose up -d` by the test and removed by it afterwards; about 10 s in all.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.docker_engine import compose_argv
from kit.core.write import write_files
from kit.deploy.record import RECORD_FILE, Record
from tests.integration.conftest import BASE_IMAGE

pytestmark = pytest.mark.integration

COMPOSE = (f"services:\n  vllm:\n    image: {BASE_IMAGE}\n    command: [sleep, '600']\n    init: true\n"
           "    network_mode: none\n    volumes: [hf-cache:/cache]\nvolumes:\n  hf-cache: {}\n")


def kit_json(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def compose(folder, project, *args):
    return subprocess.run([*compose_argv(), "-p", project, "-f", str(folder / "compose.yaml"), *args],
                          capture_output=True, text=True, timeout=120)


def running(docker_client, project):
    return [c.name for c in docker_client.containers.list(filters={"label": f"com.docker.compose.project={project}"})]


def volumes_of(docker_client, project):
    return [v.name for v in docker_client.volumes.list(filters={"label": f"com.docker.compose.project={project}"})]


def test_down_refuses_projects_the_kit_did_not_render(docker_client, tmp_path):
    project = f"kit-test-stranger-{os.getpid()}"
    by_hand = tmp_path / project
    by_hand.mkdir()
    (by_hand / "compose.yaml").write_text(COMPOSE)
    # a folder the kit wrote compose files into through its writer, but with no record: not a deployment either
    no_record = tmp_path / "no-record"
    write_files({"compose.yaml": COMPOSE}, no_record)
    # a kit deployment whose folder name is the stranger's project name, in another place, with nothing running
    twin = tmp_path / "kit" / project
    write_files({"compose.yaml": COMPOSE, RECORD_FILE: Record("cpu", "cpu", "").text()}, twin)
    try:
        assert compose(by_hand, project, "up", "-d").returncode == 0
        assert running(docker_client, project) and volumes_of(docker_client, project)
        code, env = kit_json("down", "--out", str(by_hand), "--volumes")
        assert code == 1 and env["problems"][0]["message"] == (
            f"{by_hand}: not a vllm-kit deployment (compose.yaml here, but no .vllm-kit.json that lists it)")
        code, env = kit_json("down", "--out", str(no_record), "--volumes")
        assert code == 1 and env["problems"][0]["message"] == (
            f"{no_record}: not a vllm-kit deployment (no {RECORD_FILE}, the kit's record of the render, beside "
            "its compose files)")
        # The twin's project is its own (its name and a hash of its path): nothing of it runs, the stranger stays.
        code, env = kit_json("down", "--out", str(twin), "--volumes")
        assert code == 0, env
        assert running(docker_client, project) and volumes_of(docker_client, project)  # nothing was touched
    finally:
        compose(by_hand, project, "down", "--volumes", "--timeout", "1")
    assert not volumes_of(docker_client, project)
