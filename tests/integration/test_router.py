"""Two replicas of the `cpu` preset behind vLLM's router (`runtime.replicas=2`), for real.

The replicas run the session's `cpu` image (no second vLLM build); the router's own small image is built once
from its wheelhouse. Requests go only to the router's port on 127.0.0.1; each replica's count is read from its
own /metrics through `docker exec`. One replica is killed: after the router's health checks drop it, every
request still succeeds and all of them land on the survivor.
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from kit.core.datafiles import load_yaml
from kit.deploy.pipeline import prepare
from kit.deploy.router import ROUTER_SERVICE, ROUTER_VENV, replica_service, router_image_ref, router_spec
from kit.run.smoke import http
from kit.run.stack import write_smoke_env
from kit.run.workflow import render_into, start
from kit.deploy.door import SERVICE as DOOR_SERVICE
from tests.integration.conftest import BASE_IMAGE, assert_door_closed, free_port, removed_after, session_progress

pytestmark = pytest.mark.integration

REQUESTS = 12  # per phase: bounded
# vLLM's counter of finished requests, one series per finish reason (vllm/v1/metrics/loggers.py).
RETRIES = re.compile(r'^vllm_router_retries_total(?:\{[^}]*\})?\s+([0-9.e+]+)$', re.M)
SUCCESS = re.compile(r'^vllm:request_success_total\{[^}]*\}\s+([0-9.e+]+)$', re.M)


def metric_lines(container, python: str, url: str, prefix: str) -> str:
    """The lines of a Prometheus page served inside ``container`` that start with ``prefix``, filtered there: the
    whole page (about 25 KB from vLLM) once came back through the Docker SDK's exec stream with a byte that is not
    UTF-8 in it (CI, 2026-12-05), so only the few lines asked for cross the stream, stdout alone."""
    probe = (f"import urllib.request; page = urllib.request.urlopen({url!r}, timeout=10).read().decode(); "
             f"print(''.join(line + chr(10) for line in page.splitlines() if line.startswith({prefix!r})), end='')")
    code, (out, err) = container.exec_run([python, "-c", probe], demux=True)
    assert code == 0, (err or b"").decode(errors="replace")[-500:]
    return (out or b"").decode()


def finished_requests(stack, service: str, python: str) -> int:
    """Requests the replica finished, from its own /metrics (inside its container: it publishes no port)."""
    lines = metric_lines(stack.container(service), python, "http://127.0.0.1:8000/metrics", "vllm:request_success_total")
    return int(sum(float(v) for v in SUCCESS.findall(lines)))


def router_retries(router) -> int:
    """Retries the router made (a request first sent to a dead replica is retried): its Prometheus counter,
    served inside its container only (127.0.0.1, kit/data/router.yaml metrics_port)."""
    port = load_yaml("router.yaml")["metrics_port"]
    lines = metric_lines(router, f"{ROUTER_VENV}/bin/python", f"http://127.0.0.1:{port}/metrics",
                         "vllm_router_retries_total")
    return int(sum(float(v) for v in RETRIES.findall(lines)))


def router_workers(router, port: int) -> dict[str, bool]:
    probe = f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/workers', timeout=10).read().decode())"
    code, output = router.exec_run([f"{ROUTER_VENV}/bin/python", "-c", probe])
    if code != 0:
        return {}
    return {w["url"]: w["is_healthy"] for w in json.loads(output.decode())["workers"]}


def send(port: int, key: str, count: int) -> list[int]:
    statuses = []
    for i in range(count):
        status, text = http("POST", f"http://127.0.0.1:{port}/v1/completions", key=key, timeout=60,
                            body={"model": "tiny-llama", "prompt": f"request {i}", "max_tokens": 4})
        statuses.append(status)
        if status != 200:
            session_progress(f"request {i}: {status} {text[:200]}")
    return statuses


def test_two_replicas_behind_the_router_survive_one_killed(docker_client, cpu_image, cpu_wheelhouse, tmp_path):
    started = time.monotonic()
    port = free_port()
    overrides = [f"runtime.port={port}", "runtime.replicas=2",
                 # A killed replica stays dead (the restart policy would bring it back and blur the test).
                 "runtime.restart=no"]
    prepared = prepare("cpu", overrides, base_image=BASE_IMAGE)
    assert prepared.image_ref == cpu_image.prepared.image_ref, "the replicas run the session's image: no build"
    out = tmp_path / "stack"
    render_into(prepared, out)
    env = write_smoke_env(out)
    d = prepared.deployment
    spec = router_spec(d.preset)
    one, two = (replica_service("vllm", i) for i in (1, 2))
    with removed_after(docker_client, router_image_ref(d, prepared.files)):
        starting = time.monotonic()
        stack, _ = start(prepared, out, f"kit-test-router-{os.getpid()}", wheelhouse=cpu_wheelhouse,
                         progress=session_progress)
        # From the call: the router image build (when not cached), the tiny model, both replicas loading, the router.
        ready = time.monotonic() - starting
        try:
            session_progress(f"router image, 2 replicas and the router healthy in {ready:.0f} s")
            router = stack.container(ROUTER_SERVICE)
            attrs = router.attrs["HostConfig"]
            assert attrs["ReadonlyRootfs"] and attrs["CapDrop"] == ["ALL"] and attrs["PidsLimit"] == spec.pids_limit
            assert router.attrs["Config"]["User"] not in ("", "0", "root")
            # The router publishes nothing: its /add_worker takes no key. The front door publishes the port.
            published = router.attrs["NetworkSettings"]["Ports"] or {}
            assert all(bindings is None for bindings in published.values()), published
            ports = stack.container(DOOR_SERVICE).attrs["NetworkSettings"]["Ports"]
            assert [p["HostIp"] for p in ports["8000/tcp"]] == ["127.0.0.1"]
            seen = assert_door_closed(port, env["VLLM_API_KEY"], d.serve.served_model_name)
            session_progress("door, router: " + "; ".join(f"{k} -> {v}" for k, v in seen.items()))
            for name in (one, two):  # the replicas publish nothing (EXPOSE only): the router is the one endpoint
                published = stack.container(name).attrs["NetworkSettings"]["Ports"] or {}
                assert all(bindings is None for bindings in published.values()), published

            status, text = http("GET", f"http://127.0.0.1:{port}/v1/models", key=env["VLLM_API_KEY"])
            assert status == 200 and [m["id"] for m in json.loads(text)["data"]] == ["tiny-llama"], text

            before = {n: finished_requests(stack, n, d.serve.python) for n in (one, two)}
            assert send(port, env["VLLM_API_KEY"], REQUESTS) == [200] * REQUESTS
            spread = {n: finished_requests(stack, n, d.serve.python) - before[n] for n in (one, two)}
            session_progress(f"phase 1, both replicas up: requests per replica {spread}")
            assert sum(spread.values()) == REQUESTS and min(spread.values()) > 0, spread

            stack.container(two).kill()
            killed_at = time.monotonic()
            # The router notices through its own health checks: interval x failures, plus one check's timeout.
            bound = spec.health_check_interval_secs * (spec.health_failure_threshold + 1) \
                + spec.health_check_timeout_secs + 30
            noticed = None
            while time.monotonic() - killed_at < bound:
                # The router's own view of its workers (GET /workers inside its container: the door refuses it).
                health = router_workers(router, spec.container_port)
                if health.get(f"http://{two}:8000") is False:
                    noticed = time.monotonic() - killed_at
                    session_progress(f"router marked {two} unhealthy {noticed:.0f} s after the kill: {health}")
                    break
                time.sleep(1)
            assert noticed is not None, f"the router did not mark {two} unhealthy within {bound} s"

            survivor_before, retries_before = finished_requests(stack, one, d.serve.python), router_retries(router)
            statuses = send(port, env["VLLM_API_KEY"], REQUESTS)
            survivor = finished_requests(stack, one, d.serve.python) - survivor_before
            retried = router_retries(router) - retries_before
            session_progress(f"phase 2, {two} killed: {statuses.count(200)}/{REQUESTS} succeeded, "
                             f"{survivor} on {one}, 0 possible on {two}")
            assert statuses == [200] * REQUESTS
            assert survivor == REQUESTS
            assert retried == 0, f"{retried} requests were first sent to the dead replica"
            print(f"\nrouter test: phase 1 per replica {spread}; phase 2 ({two} killed) {one}={survivor}, "
                  f"{two}=0, retries {retried}; router noticed in {noticed:.0f} s; ready in {ready:.0f} s; "
                  f"test total {time.monotonic() - started:.0f} s")
        finally:
            stack.down(volumes=True)
