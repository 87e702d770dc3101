"""Several nodes: the head and worker stacks, the launcher, and the bad inputs refused before anything is written."""

from __future__ import annotations

import argparse
import importlib.util

import pytest
import yaml
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.errors import KitError
from kit.deploy.pipeline import prepare
from kit.deploy.render import launcher_text
from kit.launch import ray_node

HEAD = "cluster.head_address=ray-head.example.internal"


def files_for(*overrides: str, preset: str = "a100x8"):
    return prepare(preset, list(overrides)).files


def test_one_node_keeps_a_single_compose_file():
    files = files_for()
    assert "compose.yaml" in files
    assert not {"compose.head.yaml", "compose.worker.yaml", "ray_node.py", "CLUSTER.md"} & set(files)


def test_two_nodes_render_a_head_and_a_worker_stack():
    files = files_for("hardware.nodes=2", HEAD)
    assert {"compose.head.yaml", "compose.worker.yaml", "ray_node.py", "CLUSTER.md", ".env.example"} <= set(files)
    assert "compose.yaml" not in files
    assert files["ray_node.py"] == launcher_text()
    head = yaml.safe_load(files["compose.head.yaml"])["services"]["vllm"]
    worker = yaml.safe_load(files["compose.worker.yaml"])["services"]["ray-worker"]
    for service in (head, worker):
        assert service["network_mode"] == "host"
        assert "ports" not in service  # host networking publishes nothing
        assert service["entrypoint"] == ["python3", "/opt/kit/ray_node.py"]
        assert "./ray_node.py:/opt/kit/ray_node.py:ro" in service["volumes"]
        assert service["environment"]["VLLM_HOST_IP"].startswith("${VLLM_HOST_IP:?")
        assert service["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 8
    cmd = head["command"]
    assert cmd[:2] == ["head", "--nodes"] and cmd[2] == "2"
    server = cmd[cmd.index("--") + 1:]
    # The official image's own entrypoint, the model positional (`--model` is deprecated for `vllm serve`).
    assert server[:3] == ["vllm", "serve", "Qwen/Qwen3-32B-AWQ"] and "--model" not in server
    # vLLM's guide: tensor parallel within a node (8 GPUs), pipeline parallel across the 2 nodes, on Ray.
    assert server[server.index("--tensor-parallel-size") + 1] == "8"
    assert server[server.index("--pipeline-parallel-size") + 1] == "2"
    assert server[server.index("--distributed-executor-backend") + 1] == "ray"
    assert server[server.index("--host") + 1] == "127.0.0.1" and server[server.index("--port") + 1] == "8000"
    assert worker["command"] == ["worker", "--address", "ray-head.example.internal:6379", "--join-timeout", "600"]
    assert "healthcheck" in head and "healthcheck" not in worker
    assert "http://127.0.0.1:8000/health" in head["healthcheck"]["test"][-1]


def test_env_example_documents_the_node_variables():
    env = files_for("hardware.nodes=2", HEAD)[".env.example"]
    for name in ("VLLM_HOST_IP", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        assert name in env
    assert "VLLM_HOST_IP" not in files_for()[".env.example"]


def test_cluster_readme_says_what_runs_where():
    text = files_for("hardware.nodes=2", HEAD)["CLUSTER.md"]
    assert "## On the head host (ray-head.example.internal)" in text
    assert "docker compose -f compose.head.yaml up -d" in text
    assert "docker compose -f compose.worker.yaml up -d" in text
    assert "ray status" in text


def test_bridge_network_publishes_the_head_and_dials_it_by_service_name():
    files = files_for("hardware.nodes=3", "cluster.network=bridge", "runtime.port=18000")
    head = yaml.safe_load(files["compose.head.yaml"])["services"]["vllm"]
    worker = yaml.safe_load(files["compose.worker.yaml"])["services"]["ray-worker"]
    assert "network_mode" not in head and head["ports"] == ["127.0.0.1:18000:8000"]
    assert worker["command"][:3] == ["worker", "--address", "vllm:6379"]
    assert worker["deploy"]["replicas"] == 2
    assert "VLLM_HOST_IP" not in head["environment"]


def test_multi_node_image_installs_ray():
    d = prepare("cpu", ["hardware.nodes=2", "cluster.network=bridge"]).deployment
    assert any(r.startswith("ray[default]==") for r in d.image.requirements)
    assert d.runtime.shm.shm_size == "14336m"  # 4 GiB CPU + 10 GiB for Ray's object store


@pytest.mark.parametrize("overrides, field, words", [
    (["hardware.nodes=2"], "cluster.head_address", "needs the head's address"),
    (["hardware.nodes=2", HEAD, "engine.pipeline_parallel_size=4"], "engine.tensor_parallel_size", "32 GPUs"),
    (["hardware.nodes=2", HEAD, "hardware.count=4"], "engine.tensor_parallel_size", "16 GPUs"),
    (["hardware.nodes=2", HEAD, "runtime.port=6379"], "runtime.port", "cluster.ray_port"),
    (["hardware.nodes=2", HEAD, "runtime.port=8265"], "runtime.port", "cluster.dashboard_port"),
    (["hardware.nodes=2", HEAD, "cluster.dashboard_port=6379"], "cluster.ray_port", "cluster.dashboard_port"),
    (["hardware.nodes=2", HEAD, "runtime.port=12000"], "runtime.port", "worker port range"),
    (["hardware.nodes=2", "cluster.network=bridge", "cluster.ray_port=8000"], "cluster.ray_port", "8000"),
    (["hardware.nodes=2", HEAD, "engine.distributed_executor_backend=mp"], "engine.distributed_executor_backend",
     "ray"),
])
def test_bad_cluster_input_names_the_fields(overrides, field, words):
    with pytest.raises(KitError) as info:
        prepare("a100x8", overrides)
    lines = info.value.lines()
    # a field the file set is named with the file; one an override set, as that override
    assert any((f": {field}:" in line or line.startswith(f"override {field}:")) and words in line
               for line in lines), lines


def test_cpu_ranks_must_split_over_nodes():
    with pytest.raises(KitError) as info:
        prepare("cpu", ["hardware.nodes=2", "cluster.network=bridge", "engine.pipeline_parallel_size=3"])
    assert any("engine.pipeline_parallel_size" in line and "split evenly" in line for line in info.value.lines())


def test_cpu_cluster_warns_that_vllm_cpu_has_no_ray_device():
    report = prepare("cpu", ["hardware.nodes=2", "cluster.network=bridge"]).report
    assert any("does not support ray" in w.message for w in report.warnings)


def test_cli_writes_nothing_on_bad_cluster_input(tmp_path):
    out = tmp_path / "deploy"
    result = CliRunner().invoke(cli, ["render", "preset=a100x8", "hardware.nodes=2", "runtime.port=6379",
                                      "--out", str(out)])
    assert result.exit_code == 1
    assert "cluster.head_address" in result.output and "runtime.port" in result.output
    assert not out.exists()


def test_cli_renders_the_roles(tmp_path):
    result = CliRunner().invoke(cli, ["render", "preset=a100x8", "hardware.nodes=2", HEAD, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "compose.head.yaml").is_file() and (tmp_path / "compose.worker.yaml").is_file()
    assert "CLUSTER.md" in result.output


# ---- the launcher, without Ray


def test_launcher_is_standard_library_only():
    spec = importlib.util.spec_from_file_location("launcher_copy", ray_node.__file__)
    source = open(spec.origin).read()
    imports = {line.split()[1].split(".")[0] for line in source.splitlines()
               if line.startswith(("import ", "from ")) and "__future__" not in line}
    assert imports <= {"argparse", "os", "signal", "socket", "subprocess", "sys", "time", "collections"}


def test_launcher_parses_roles_and_the_server_after_the_separator():
    args = ray_node.parse_args(["head", "--nodes", "2", "--port", "6380", "--", "python", "-m", "x", "--port", "1"])
    assert (args.role, args.nodes, args.port, args.server) == ("head", 2, 6380, ["python", "-m", "x", "--port", "1"])
    worker = ray_node.parse_args(["worker", "--address", "h:6379"])
    assert (worker.role, worker.address) == ("worker", "h:6379")
    with pytest.raises(SystemExit):
        ray_node.parse_args(["worker"])  # a worker without a head address


def test_launcher_ray_commands_use_the_node_address_from_the_environment():
    args = argparse.Namespace(port=6379, dashboard_port=8265, address="h:6379")
    head = ray_node.head_start_argv(args, {"VLLM_HOST_IP": "192.0.2.1"})
    assert head[head.index("--node-ip-address") + 1] == "192.0.2.1" and "--head" in head
    worker = ray_node.worker_start_argv(args, {})
    assert "--block" in worker and "--node-ip-address" not in worker
    assert worker[worker.index("--address") + 1] == "h:6379"


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_wait_until_is_bounded():
    clock, calls = FakeClock(), []
    assert not ray_node.wait_until(lambda: calls.append(1) or False, 10, 2, clock=clock, sleep=clock.sleep)
    assert clock.now >= 10 and len(calls) <= 7


class FakeServer:
    def __init__(self, exits_after: int | None = None):
        self.polls, self.exits_after, self.terminated = 0, exits_after, False

    def poll(self):
        self.polls += 1
        if self.terminated:
            return -15
        return 0 if self.exits_after is not None and self.polls > self.exits_after else None

    def terminate(self):
        self.terminated = True

    def wait(self, timeout=None):
        return -15

    def kill(self):
        self.terminated = True


def test_supervisor_stops_the_server_when_a_node_stays_gone():
    clock, server = FakeClock(), FakeServer()
    counts = iter([2, 2, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1])  # a blip, then gone
    code = ray_node.supervise(server, lambda: next(counts), 2, grace=20, interval=5, clock=clock, sleep=clock.sleep)
    assert code == ray_node.EXIT_NODE_LOST and server.terminated
    assert clock.now >= 20


def test_supervisor_returns_the_server_exit_code():
    clock = FakeClock()
    code = ray_node.supervise(FakeServer(exits_after=3), lambda: 2, 2, grace=20, interval=5, clock=clock,
                              sleep=clock.sleep)
    assert code == 0
