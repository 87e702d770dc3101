"""The monitoring profile (`kit render ... --with monitoring`): Prometheus and Grafana beside the vLLM servers.

Everything comes from kit/data/monitoring.yaml; this module lays it out as data (compose services, Prometheus and
Grafana provisioning files, the dashboard JSON) and is pure, like the rest of the render.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kit.core.datafiles import load_yaml
from kit.core.safevalue import check_text
from kit.core.yamlwrite import dump_with_comments
from kit.deploy.profile_parts import ProfileParts

if TYPE_CHECKING:
    from kit.deploy.render import RenderContext

DIR = "monitoring"
PROMETHEUS_FILE = f"{DIR}/prometheus.yml"
DATASOURCE_FILE = f"{DIR}/grafana/provisioning/datasources/prometheus.yaml"
DASHBOARD_PROVIDER_FILE = f"{DIR}/grafana/provisioning/dashboards/vllm-kit.yaml"
DASHBOARD_FILE = f"{DIR}/grafana/dashboards/vllm.json"
# Inside the containers. /etc/prometheus/prometheus.yml and /prometheus are the prom/prometheus image's paths.
PROMETHEUS_CONFIG = "/etc/prometheus/prometheus.yml"
PROMETHEUS_DATA = "/prometheus"
GRAFANA_PROVISIONING = "/etc/grafana/provisioning"
GRAFANA_DASHBOARDS = "/etc/grafana/dashboards/vllm-kit"
GRAFANA_DATA = "/var/lib/grafana"
PROMETHEUS_SERVICE = "prometheus"
GRAFANA_SERVICE = "grafana"
PROMETHEUS_VOLUME = "prometheus-data"
GRAFANA_VOLUME = "grafana-data"
# Where they listen inside their containers: the images' defaults (Prometheus --web.listen-address :9090,
# Grafana [server] http_port 3000).
PROMETHEUS_PORT = 9090
GRAFANA_PORT = 3000
ADMIN_PASSWORD_ENV = "GRAFANA_ADMIN_PASSWORD"  # noqa: S105 - the variable's name, not a password
JOB = "vllm"


def settings() -> dict[str, Any]:
    return load_yaml("monitoring.yaml")


def image_ref(name: str) -> str:
    image = settings()["images"][name]
    ref = f"{image['repository']}:{image['tag']}"
    return f"{ref}@{image['digest']}" if image.get("digest") else ref


def prometheus_config(targets: list[str], labels: dict[str, str]) -> dict[str, Any]:
    s = settings()
    return {
        "global": {"scrape_interval": s["scrape_interval"], "evaluation_interval": s["scrape_interval"]},
        "scrape_configs": [{
            "job_name": JOB,
            "metrics_path": "/metrics",
            "static_configs": [{"targets": [check_text(t, "a scrape target") for t in targets], "labels": labels}],
        }],
    }


def datasource_config(prometheus_url: str) -> dict[str, Any]:
    s = settings()
    return {"apiVersion": 1, "datasources": [{
        "name": s["datasource"]["name"], "uid": s["datasource"]["uid"], "type": "prometheus", "access": "proxy",
        "url": prometheus_url, "isDefault": True, "editable": False,
        # Grafana's smallest rate window ($__rate_interval) follows the scrape interval.
        "jsonData": {"timeInterval": s["scrape_interval"]},
    }]}


def dashboard_provider_config() -> dict[str, Any]:
    return {"apiVersion": 1, "providers": [{
        "name": "vllm-kit", "type": "file", "disableDeletion": True, "allowUiUpdates": False,
        "options": {"path": GRAFANA_DASHBOARDS},
    }]}


def dashboard() -> dict[str, Any]:
    """The kit's Grafana dashboard: two time-series panels per row, each query on the provisioned datasource."""
    s = settings()
    board = s["dashboard"]
    source = {"type": "prometheus", "uid": s["datasource"]["uid"]}
    panels = []
    for index, spec in enumerate(board["panels"]):
        defaults: dict[str, Any] = {"unit": spec["unit"], "min": 0}
        if "max" in spec:
            defaults["max"] = spec["max"]
        panels.append({
            "id": index + 1,
            "type": "timeseries",
            "title": spec["title"],
            "datasource": source,
            "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "none"}},
            "targets": [{"refId": chr(ord("A") + i), "datasource": source, "expr": t["expr"],
                         "legendFormat": t["legend"]} for i, t in enumerate(spec["targets"])],
        })
    return {
        "uid": board["uid"],
        "title": board["title"],
        "tags": ["vllm", "vllm-kit"],
        "editable": False,
        "schemaVersion": board["schema_version"],
        "version": 1,
        "refresh": board["refresh"],
        "time": {"from": "now-1h", "to": "now"},
        "timezone": "browser",
        "templating": {"list": []},
        "annotations": {"list": []},
        "panels": panels,
    }


def _hardened(service: dict[str, Any], tmpfs: list[str]) -> dict[str, Any]:
    # As the vLLM server: no capabilities (both listen on ports above 1024 as non-root users), no privilege gain,
    # read-only root with the data on a named volume.
    service["cap_drop"] = ["ALL"]
    service["security_opt"] = ["no-new-privileges:true"]
    service["read_only"] = True
    service["pids_limit"] = load_yaml("hardening.yaml")["pids_limit"]
    if tmpfs:
        service["tmpfs"] = tmpfs
    return service


def _services(restart: str, host_network: bool) -> dict[str, dict[str, Any]]:
    """The two compose services. On a compose network each publishes its container port on the host's 127.0.0.1;
    with host networking (the head of a Ray cluster over hosts) each listens on the host's 127.0.0.1 itself."""
    s = settings()
    host_ports = s["ports"]
    prometheus: dict[str, Any] = {"image": image_ref("prometheus")}
    grafana: dict[str, Any] = {"image": image_ref("grafana"), "depends_on": [PROMETHEUS_SERVICE]}
    command = [f"--config.file={PROMETHEUS_CONFIG}", f"--storage.tsdb.path={PROMETHEUS_DATA}",
               f"--storage.tsdb.retention.time={s['retention']}"]
    environment = {
        # Fixed text, compose interpolation meant: the admin password from .env, never from this file.
        "GF_SECURITY_ADMIN_PASSWORD": f"${{{ADMIN_PASSWORD_ENV}:?set {ADMIN_PASSWORD_ENV} in .env (see .env.example)}}",
        **{k: str(v) for k, v in s["grafana_env"].items()},
    }
    if host_network:
        prometheus["network_mode"] = grafana["network_mode"] = "host"
        command.append(f"--web.listen-address=127.0.0.1:{host_ports['prometheus']}")
        environment["GF_SERVER_HTTP_ADDR"] = "127.0.0.1"
        environment["GF_SERVER_HTTP_PORT"] = str(host_ports["grafana"])
    prometheus["command"] = command
    grafana["environment"] = environment
    if not host_network:
        prometheus["ports"] = [f"127.0.0.1:{host_ports['prometheus']}:{PROMETHEUS_PORT}"]
        grafana["ports"] = [f"127.0.0.1:{host_ports['grafana']}:{GRAFANA_PORT}"]
    prometheus["volumes"] = [f"./{PROMETHEUS_FILE}:{PROMETHEUS_CONFIG}:ro", f"{PROMETHEUS_VOLUME}:{PROMETHEUS_DATA}"]
    grafana["volumes"] = [f"./{DIR}/grafana/provisioning:{GRAFANA_PROVISIONING}:ro",
                          f"./{DIR}/grafana/dashboards:{GRAFANA_DASHBOARDS}:ro", f"{GRAFANA_VOLUME}:{GRAFANA_DATA}"]
    prometheus["restart"] = grafana["restart"] = restart
    return {PROMETHEUS_SERVICE: _hardened(prometheus, []), GRAFANA_SERVICE: _hardened(grafana, ["/tmp"])}


def monitoring_profile(ctx: RenderContext, servers: list[str]) -> ProfileParts:
    """Prometheus scraping each vLLM server of the stack (``servers``: their compose service names), and Grafana
    reading Prometheus; both reachable on the host's 127.0.0.1 only."""
    s = settings()
    host_ports = s["ports"]
    cluster = ctx.d.serve.cluster
    host_network = cluster is not None and cluster.host_network
    if host_network:
        # A Ray cluster over hosts: the head's server listens on the host itself (its healthcheck's address).
        targets = [urlsplit(ctx.health_url).netloc]
        prometheus_url = f"http://127.0.0.1:{host_ports['prometheus']}"
    else:
        targets = [f"{name}:{ctx.port}" for name in servers]
        prometheus_url = f"http://{PROMETHEUS_SERVICE}:{PROMETHEUS_PORT}"
    labels = {"preset": check_text(ctx.d.preset_name, "a preset name")}
    yaml_header = [f"Rendered by vllm-kit for preset {ctx.d.preset_name} (--with monitoring); `kit render` rewrites it."]
    files = {
        PROMETHEUS_FILE: dump_with_comments(prometheus_config(targets, labels), [
            *yaml_header,
            "vLLM serves /metrics outside --api-key's reach (only /v1 paths need the key): no credentials here."], {}),
        DATASOURCE_FILE: dump_with_comments(datasource_config(prometheus_url), yaml_header, {}),
        DASHBOARD_PROVIDER_FILE: dump_with_comments(dashboard_provider_config(), yaml_header, {}),
        DASHBOARD_FILE: json.dumps(dashboard(), indent=2) + "\n",
    }
    scraped = ", ".join(servers if not host_network else [f"the head's server ({targets[0]})"])
    comments: dict[tuple[str, ...], list[str]] = {
        ("services", PROMETHEUS_SERVICE): [
            f"Monitoring: Prometheus scrapes /metrics of {scraped} every {s['scrape_interval']} "
            f"({PROMETHEUS_FILE}); http://127.0.0.1:{host_ports['prometheus']}",
            *([] if cluster is None else [
                "Ray workers serve no /metrics of vLLM's: the head's API server reports the engine of every node."])],
        ("services", GRAFANA_SERVICE): [
            f"Grafana with the Prometheus datasource and the kit's vLLM dashboard; "
            f"http://127.0.0.1:{host_ports['grafana']} (admin / {ADMIN_PASSWORD_ENV} from .env)",
            "/tmp on tmpfs and console logs: what Grafana writes outside its data volume on a read-only root."],
    }
    env_example = [
        "# Grafana's admin password (the monitoring profile): required where Grafana runs (a Ray cluster's head host);",
        "# the stack refuses to start without it. kit render writes a random one into .env when there is none.",
        f"# {ADMIN_PASSWORD_ENV}=",
    ]
    return ProfileParts(
        services=_services(ctx.d.preset.runtime.restart, host_network),
        # Compose prefixes volume names with the project's, so fixed names do not clash between stacks.
        volumes={PROMETHEUS_VOLUME: {}, GRAFANA_VOLUME: {}},
        files=files, comments=comments, env_example=env_example,
    )
