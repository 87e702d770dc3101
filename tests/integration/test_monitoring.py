"""The monitoring profile for real: the rendered Prometheus service and config scrape the shared CPU stack.

`kit render preset=cpu --with monitoring` is rendered; its `prometheus` compose service (command, config mount,
data volume, hardening) runs as rendered, with two changes only: the image is a stand-in built from Debian's
prometheus package (tests/integration/standins/prometheus/; no registry is reachable) and the published host port
is a free one. It joins the running cpu_stack's network, where the rendered prometheus.yml's target (the server's
service name) resolves. Then PromQL over Prometheus's HTTP API on 127.0.0.1: vLLM's KV-cache gauge has a sample from
the scrape, every metric the dashboard may use is in Prometheus, and every dashboard query is accepted by
Prometheus's own parser. Grafana is not run (no image); its files are checked offline (tests/unit/test_monitoring.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from kit.core.docker_engine import compose_argv
from kit.deploy.monitoring import PROMETHEUS_FILE, PROMETHEUS_SERVICE, settings
from kit.deploy.pipeline import prepare
from kit.image.build import BuildRequest, build_image
from kit.run.workflow import image_exists, render_into
from tests.integration.conftest import BASE_IMAGE, CACHE, free_port, session_progress

pytestmark = pytest.mark.integration

STANDIN_DIR = Path(__file__).parent / "standins" / "prometheus"
DEBS = CACHE / "debs"  # scripts/setup-host.sh: apt-get download prometheus
SCRAPE_DEADLINE_S = 60


def prometheus_deb() -> Path:
    found = sorted(DEBS.glob("prometheus_*.deb"))
    if not found:
        pytest.fail(f"no prometheus .deb in {DEBS}; run scripts/setup-host.sh")
    return found[-1]


@pytest.fixture(scope="module")
def prometheus_image(docker_client, tmp_path_factory) -> str:
    """Built once per content (Dockerfile + .deb) and kept, like the base images: a tag names what is in it."""
    started = time.monotonic()
    deb = prometheus_deb()
    dockerfile = (STANDIN_DIR / "Dockerfile").read_bytes()
    digest = hashlib.sha256(dockerfile + deb.read_bytes() + BASE_IMAGE.encode()).hexdigest()[:12]
    tag = f"vllm-kit/standin-prometheus:{digest}"
    if not image_exists(tag):
        context = tmp_path_factory.mktemp("prometheus-standin")
        shutil.copy2(STANDIN_DIR / "Dockerfile", context / "Dockerfile")
        shutil.copy2(deb, context / "prometheus.deb")
        build_image(BuildRequest(context_dir=context, tags=[tag], base_image=BASE_IMAGE),
                    tmp_path_factory.mktemp("prometheus-standin-log"), progress=session_progress)
    session_progress(f"prometheus stand-in {tag} ready in {time.monotonic() - started:.1f} s")
    return tag


def query(port: int, promql: str) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:  # 400: a query Prometheus cannot parse, with its error in the body
        return json.load(exc)


@pytest.fixture(scope="module")
def monitored(cpu_stack, prometheus_image, tmp_path_factory):
    """The rendered prometheus service, started beside the running CPU stack on its network."""
    out = tmp_path_factory.mktemp("monitoring-render")
    prepared = prepare("cpu", base_image=BASE_IMAGE, with_profiles=["monitoring"])
    render_into(prepared, out)
    rendered = yaml.safe_load((out / "compose.yaml").read_text())
    service = rendered["services"][PROMETHEUS_SERVICE]
    port = free_port()
    service["image"] = prometheus_image
    service["ports"] = [f"127.0.0.1:{port}:9090"]
    network = f"{cpu_stack.stack.project}_default"
    test_file = out / "compose.monitoring-test.yaml"
    test_file.write_text(yaml.safe_dump({
        "services": {PROMETHEUS_SERVICE: service},
        "volumes": {v: {} for v in rendered["volumes"] if v.startswith("prometheus")},
        "networks": {"default": {"name": network, "external": True}},
    }))
    project = f"kit-test-monitoring-{os.getpid()}"
    argv = [*compose_argv(), "-p", project, "-f", str(test_file)]
    started = time.monotonic()
    try:
        subprocess.run([*argv, "up", "-d", "--no-build"], cwd=out, check=True, capture_output=True, text=True,
                       timeout=120)
        session_progress(f"rendered prometheus service up in {time.monotonic() - started:.1f} s")
        yield out, port, cpu_stack
    finally:
        subprocess.run([*argv, "down", "--volumes", "--timeout", "10"], cwd=out, capture_output=True, timeout=120)


def test_rendered_config_passes_promtool(monitored, prometheus_image):
    out, _, _ = monitored
    done = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "/bin/promtool",
                           "-v", f"{out / PROMETHEUS_FILE}:/etc/prometheus/prometheus.yml:ro", prometheus_image,
                           "check", "config", "/etc/prometheus/prometheus.yml"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_prometheus_scrapes_vllm_metrics(monitored):
    out, port, stack = monitored
    started = time.monotonic()
    deadline = started + SCRAPE_DEADLINE_S
    answer: dict = {}
    while time.monotonic() < deadline:
        try:
            answer = query(port, "vllm:kv_cache_usage_perc")
        except OSError:  # Prometheus still starting
            answer = {}
        if answer.get("status") == "success" and answer["data"]["result"]:
            break
        time.sleep(1)
    session_progress(f"PromQL vllm:kv_cache_usage_perc after {time.monotonic() - started:.1f} s -> "
                     f"{json.dumps(answer.get('data', {}).get('result'))}")
    assert answer.get("status") == "success" and answer["data"]["result"], answer
    series = answer["data"]["result"][0]
    # The rendered job and target: the server's compose service on the stack's network, the preset's label.
    assert series["metric"]["job"] == "vllm"
    assert series["metric"]["instance"] == "vllm:8000"
    assert series["metric"]["preset"] == "cpu"
    assert 0.0 <= float(series["value"][1]) <= 1.0

    # Every metric the dashboard may use is exported by this vLLM (histograms as NAME_bucket).
    names = set(json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/label/__name__/values",
                                                 timeout=5))["data"])
    wanted = {name + ("_bucket" if kind == "histogram" else "") for name, kind in settings()["metrics"].items()}
    assert wanted - names == set()

    # Every dashboard query is accepted by Prometheus's parser ($__rate_interval is Grafana's; 1m stands in).
    for spec in settings()["dashboard"]["panels"]:
        for target in spec["targets"]:
            answer = query(port, target["expr"].replace("$__rate_interval", "1m"))
            assert answer["status"] == "success", (target["expr"], answer.get("error"))
