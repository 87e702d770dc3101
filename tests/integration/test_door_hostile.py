"""Hostile requests through the real rendered door (the cpu preset's door/haproxy.cfg) against a recording backend.

Issue 35: the door accepted any Host (a web page whose name was rebound to 127.0.0.1 drove the model), any body size
and a chunked body it could not measure. Here the door runs in its stand-in image (tests/integration/conftest.py)
in front of a backend that logs every request it receives (tests/integration/hostile_door.py): each attack gets
its status from the door and nothing outside the allowed routes and Hosts reaches the backend; legitimate requests
do. `make fuzz` runs the same bench with generated requests (bench/fuzz_door.py).
"""

from __future__ import annotations

import os
import time

import pytest

from kit.deploy.door import IMAGE_ENV, door_data, door_routes
from kit.deploy.pipeline import prepare
from tests.integration import hostile_door as hd
from tests.integration.conftest import session_progress

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def door_bench(docker_client):
    prepared = prepare("cpu")
    config = prepared.files["door/haproxy.cfg"]
    with hd.door_bench(docker_client, os.environ[IMAGE_ENV], config) as bench:
        yield bench, door_routes(prepared.preset)


def served_hosts_of(config: str) -> list[str]:
    line = next(x for x in config.splitlines() if "acl served_host" in x)
    return [v.strip('"').lower() for v in line.split(" -m str ", 1)[1].split()]


def test_hostile_requests_do_not_reach_the_server(door_bench):
    bench, routes = door_bench
    hosts = served_hosts_of(prepare("cpu").files["door/haproxy.cfg"])
    cases = hd.fixed_cases()
    result = hd.run_cases(bench, cases, routes, hosts)
    session_progress("door, hostile requests: " + "; ".join(f"{c.label.split(' ', 1)[1]} -> {c.status}"
                                                             for c in cases))
    assert not result["failures"], "\n".join(result["failures"]) + "\n" + bench.door_logs()
    assert result["reached"] == sum(1 for c in cases if c.must_reach)


def test_a_real_oversize_body_is_refused_before_the_server(door_bench):
    bench, _ = door_bench
    cap = int(door_data()["body_max_bytes"])
    body = b"x" * (cap + 1)
    case = hd.Case("big0 body over the cap", hd.request("POST", "/v1/chat/completions", hd.post("/", body), body,
                                                      case_id="big0"), expect={413}, read_timeout=30)
    assert hd.send(bench.port, case) == 413
    assert not [e for e in bench.entries() if ("X-Fuzz-Case", "big0") in map(tuple, e["headers"])]


def test_a_slow_body_is_cut_at_the_request_timeout(door_bench):
    """Headers in time, then a body that never comes: the door gives up after `timeout http-request` (408), not
    after the 10-minute idle timeout, and the server never sees the request."""
    import socket

    bench, _ = door_bench
    limit = int(str(door_data()["timeouts"]["http_request"]).rstrip("s"))
    head = hd.request("POST", "/v1/completions", hd.post("/", b"x" * 1000), case_id="slow0")
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", bench.port), timeout=5) as sock:
        sock.sendall(head + b'{"model": "m", ')  # 15 of the 1000 bytes promised
        sock.settimeout(limit + 15)
        answer = sock.recv(4096)
    took = time.monotonic() - start
    assert answer.split(b"\r\n", 1)[0].split()[1:2] == [b"408"], answer[:200]
    assert limit - 2 <= took <= limit + 10, took
    assert not [e for e in bench.entries() if ("X-Fuzz-Case", "slow0") in map(tuple, e["headers"])]


def test_the_kubernetes_door_answers_to_its_service_names_only(docker_client):
    """The k8s sidecar's config (k8s/door-configmap.yaml) in HAProxy 2.6, the backend on the pod's loopback (a shared
    network namespace): the Service's names in the pod's namespace pass (HAProxy expands POD_NAMESPACE), another
    namespace's, a rebound name and the server's own routes do not."""
    import yaml

    prepared = prepare("cpu", target="k8s")
    config = yaml.safe_load(prepared.files["k8s/door-configmap.yaml"])["data"]["haproxy.cfg"]
    routes = door_routes(prepared.preset)
    service = "vllm-cpu"
    with hd.door_bench(docker_client, os.environ[IMAGE_ENV], config, prefix="door-hostile-k8s",
                       pod_namespace="team-a", health_host="localhost") as bench:
        cases = []
        for number, (host, path, expect) in enumerate([
                (f"{service}.team-a.svc.cluster.local:8000", "/v1/models", {200}),
                (f"{service}.team-a:8000", "/v1/models", {200}),
                (f"{service}:8000", "/v1/models", {200}),
                ("localhost:8000", "/v1/models", {200}),
                ("localhost:9000", "/v1/models", {200}),  # kubectl port-forward svc/vllm-cpu 9000:8000
                (f"{service}.team-b.svc.cluster.local:8000", "/v1/models", {421}),
                (f"{service}.evil.example", "/v1/models", {421}),
                (f"{service}.${{POD_NAMESPACE}}", "/v1/models", {421}),
                ("evil.example", "/v1/models", {421}),
                (f"{service}:8000", "/invocations", {403}),
                (f"{service}:8000", "/tokenize", {403})]):
            case_id = f"k{number}"
            cases.append(hd.Case(f"{case_id} {host} {path}", hd.request("GET" if path == "/v1/models" else "POST",
                                                                      path, [("Host", host), hd.auth(),
                                                                             *([("Content-Length", "0")]
                                                                               if path != "/v1/models" else [])],
                                                                      case_id=case_id),
                                 expect=expect, must_reach=expect == {200}))
        allowed = [f"{service}.team-a.svc.cluster.local:8000", f"{service}.team-a:8000", f"{service}:8000",
                   "localhost:8000", "localhost:9000"]
        result = hd.run_cases(bench, cases, routes, allowed)
        assert not result["failures"], "\n".join(result["failures"]) + "\n" + bench.door_logs()
        assert result["reached"] == 5
