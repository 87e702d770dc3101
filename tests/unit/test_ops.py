"""Operating a stack (kit ps / logs / status / down): finding what runs from a directory, reading a server's state,
and the commands' JSON shapes. The real-Docker half is tests/integration/test_ops_stack.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.errors import KitError
from kit.core.write import write_files
from kit.deploy.pipeline import prepare
from kit.run import ops

pytestmark = pytest.mark.unit

KEY = "sk-test-ops"
# What vLLM 0.32's /metrics prints for these gauges (names: kit/data/loadtest.yaml), two engines.
METRICS = """\
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny-llama"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="tiny-llama"} 0.5
vllm:num_requests_running{engine="0",model_name="tiny-llama"} 2.0
vllm:num_requests_running{engine="1",model_name="tiny-llama"} 1.0
vllm:num_requests_waiting{engine="0",model_name="tiny-llama"} 4.0
"""


class FakeServer(BaseHTTPRequestHandler):
    """Answers like a vLLM API server with --api-key: /health open, the rest behind the bearer key."""

    def do_GET(self) -> None:
        if self.path != "/health" and self.headers.get("Authorization") != f"Bearer {KEY}":
            self.send_response(401)
            self.end_headers()
            return
        body = {"/health": "", "/v1/models": json.dumps({"data": [{"id": "tiny-llama"}]}),
                "/metrics": METRICS}.get(self.path)
        self.send_response(404 if body is None else 200)
        self.end_headers()
        self.wfile.write((body or "").encode())

    def log_message(self, *_args) -> None:
        pass


@pytest.fixture()
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeServer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def labels(project: str, directory: Path, *files: str, service: str = "vllm") -> dict[str, str]:
    return {ops.LABEL_PROJECT: project, ops.LABEL_WORKING_DIR: str(directory), "com.docker.compose.service": service,
            ops.LABEL_CONFIG_FILES: ",".join(str(directory / f) for f in files)}


def test_projects_are_found_by_their_directory_whatever_their_name(tmp_path):
    here, elsewhere = tmp_path / "stack", tmp_path / "other"
    here.mkdir(), elsewhere.mkdir()
    found = ops.projects_from_labels(here, [
        labels("kit-test-cpu-1", here, "compose.yaml"),
        labels("kit-test-cpu-1", here, "compose.yaml", service="model-fetch"),
        labels("someone-else", elsewhere, "compose.yaml"),
        {"unrelated": "container"},
    ])
    assert found == [ops.Project("kit-test-cpu-1", (here.resolve() / "compose.yaml",))]


def test_a_cluster_head_and_worker_in_one_project_are_stopped_together(tmp_path):
    # CLUSTER.md's two commands run in one directory on one host: one default project, two config files.
    found = ops.projects_from_labels(tmp_path, [
        labels("stack", tmp_path, "compose.worker.yaml", service="ray-worker"),
        labels("stack", tmp_path, "compose.head.yaml"),
    ])
    assert found == [ops.Project("stack", (tmp_path / "compose.head.yaml", tmp_path / "compose.worker.yaml"))]
    assert found[0].argv("down")[-5:] == ["-f", str(tmp_path / "compose.head.yaml"), "-f",
                                          str(tmp_path / "compose.worker.yaml"), "down"]


def test_head_and_worker_under_their_own_project_names_are_both_found(tmp_path):
    found = ops.projects_from_labels(tmp_path, [labels("head", tmp_path, "compose.head.yaml"),
                                                labels("worker", tmp_path, "compose.worker.yaml", service="ray-worker")])
    assert [(p.name, [f.name for f in p.files]) for p in found] == [("head", ["compose.head.yaml"]),
                                                                    ("worker", ["compose.worker.yaml"])]


def test_compose_ps_json_both_shapes():
    line = {"Service": "vllm", "Name": "p-vllm-1", "State": "running", "Health": "healthy",
            "Publishers": [{"URL": "127.0.0.1", "TargetPort": 8000, "PublishedPort": 18000, "Protocol": "tcp"},
                           {"URL": "", "TargetPort": 6379, "PublishedPort": 0, "Protocol": "tcp"}]}
    assert ops.parse_ps(json.dumps(line) + "\n" + json.dumps(line)) == [line, line]  # Compose >= 2.21
    assert ops.parse_ps(json.dumps([line])) == [line]  # older Compose v2
    assert ops.parse_ps("") == []
    row = ops.ps_rows(ops.Project("p", ()), [line])[0]
    assert row["ports"] == "127.0.0.1:18000->8000/tcp" and row["health"] == "healthy"


def test_server_url_is_the_published_port_on_loopback(tmp_path):
    row = {"publishers": [{"URL": "0.0.0.0", "TargetPort": 8000, "PublishedPort": 18000}]}
    assert ops.server_url(row, None) == "http://127.0.0.1:18000"
    with pytest.raises(KitError, match="127.0.0.1 only"):
        ops.server_url({"publishers": [{"URL": "10.1.2.3", "PublishedPort": 18000}]}, None)


def test_host_network_head_is_asked_on_its_command_port(tmp_path):
    # A multi-node head with host networking publishes nothing: the port is the one its command gives vLLM.
    files = prepare("a100x8", ["hardware.nodes=2", "cluster.head_address=10.0.0.1", "runtime.port=8123"]).files
    write_files(files, tmp_path)
    assert ops.server_url({"publishers": []}, tmp_path / "compose.head.yaml") == "http://127.0.0.1:8123"


def test_read_status_from_a_server(server):
    data = ops.read_status(server, KEY)
    assert data["health"] == "ok" and data["models"] == ["tiny-llama"]
    # KV usage: the fullest engine; queue lengths add up over engines (kit/data/loadtest.yaml).
    assert (data["kv_cache_usage_perc"], data["requests_running"], data["requests_waiting"]) == (0.5, 3.0, 4.0)
    locked_out = ops.read_status(server, None)
    assert locked_out["health"] == "ok" and locked_out["models"] == [] and locked_out["models_http"] == 401


def test_read_status_of_nothing_says_unreachable():
    data = ops.read_status("http://127.0.0.1:9", KEY)  # the discard port: nothing listens
    assert data["health"] == "unreachable" and data["kv_cache_usage_perc"] is None


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize("command", ["ps", "status", "logs", "down"])
def test_a_directory_without_a_stack_is_one_error_naming_it(command, tmp_path):
    result = invoke(command, "--out", str(tmp_path), "--json")
    env = json.loads(result.stdout)
    assert result.exit_code == 1 and env["ok"] is False and env["command"] == command
    assert str(tmp_path) in env["problems"][0]["message"] and "--out" in env["problems"][0]["hint"]


def test_logs_follow_and_json_do_not_mix(tmp_path):
    result = invoke("logs", "-f", "--out", str(tmp_path), "--json")
    assert result.exit_code == 2 and "--follow" in json.loads(result.stdout)["problems"][0]["message"]


def test_status_json_shape_and_table(server, tmp_path, monkeypatch):
    (tmp_path / ".env").write_text(f"VLLM_API_KEY={KEY}\n")
    port = int(server.rsplit(":", 1)[1])
    rows = [{"project": "p", "service": "vllm", "container": "p-vllm-1", "state": "running", "health": "healthy",
             "publishers": [{"URL": "127.0.0.1", "TargetPort": 8000, "PublishedPort": port}]}]
    write_files(prepare("cpu").files, tmp_path)
    monkeypatch.setattr(ops, "ps", lambda _out: rows)  # stands in for Docker; the HTTP side is a real server
    result = invoke("status", "--out", str(tmp_path), "--json")
    env = json.loads(result.stdout)
    assert result.exit_code == 0 and env["ok"] is True and env["command"] == "status"
    assert {"health", "model", "models", "kv_cache_usage_perc", "requests_running", "requests_waiting", "url",
            "project", "container", "state", "container_health", "services"} <= set(env["data"])
    assert env["data"]["model"] == "tiny-llama" and env["data"]["kv_cache_usage_perc"] == 0.5
    text = invoke("status", "--out", str(tmp_path))
    assert "\x1b[" not in text.stdout and "tiny-llama" in text.stdout and "50.0 % used" in text.stdout
    rows[0]["publishers"][0]["PublishedPort"] = 9  # nothing answers there
    down = invoke("status", "--out", str(tmp_path), "--json")
    assert down.exit_code == 1 and json.loads(down.stdout)["data"]["health"] == "unreachable"


def test_status_of_a_rendered_folder_names_it_in_its_hints_and_its_project_once(server, tmp_path, monkeypatch):
    """The walk: `kit status` printed the compose project twice (the record's row and the running one's), and told
    to run `kit render --out DIR --diff` / `kit logs --out DIR` with DIR left for the user to fill in."""
    from kit.deploy.record import compose_project

    mine = tmp_path / "presets" / "mine.yaml"
    mine.parent.mkdir()
    mine.write_text((Path(__file__).parents[2] / "presets" / "cpu.yaml").read_text())
    out = tmp_path / "my deploy"
    assert invoke("render", f"preset={mine}", "--out", str(out)).exit_code == 0
    mine.write_text(mine.read_text().replace("max_num_seqs: 8", "max_num_seqs: 6"))
    port = int(server.rsplit(":", 1)[1])
    rows = [{"project": compose_project(out), "service": "vllm", "container": "c-vllm-1", "state": "running",
             "health": "healthy", "publishers": [{"URL": "127.0.0.1", "TargetPort": 8000, "PublishedPort": port}]}]
    monkeypatch.setattr(ops, "ps", lambda _out: rows)
    text = invoke("status", "--out", str(out)).stdout
    assert f"`kit render --out '{out}' --diff` shows what a render would change" in text
    assert [line.split()[-1] for line in text.splitlines() if "project" in line.split()[:2]] == [compose_project(out)]
    rows[0]["publishers"][0]["PublishedPort"] = 9  # nothing answers there
    down = json.loads(invoke("status", "--out", str(out), "--json").stdout)
    assert down["problems"][0]["hint"] == f"see `kit logs --out '{out}'`"


def test_a_stopped_single_node_stack_is_asked_on_the_port_its_file_publishes(tmp_path):
    write_files(prepare("cpu", ["runtime.port=18777"]).files, tmp_path)
    assert ops.server_url(None, tmp_path / "compose.yaml") == "http://127.0.0.1:18777"
