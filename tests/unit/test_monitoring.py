"""The monitoring profile offline: the Grafana dashboard and provisioning files, the Prometheus config, the compose
services and the `--with` option. (tests/integration/test_monitoring.py runs the rendered Prometheus for real.)"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.datafiles import load_yaml
from kit.core.errors import PresetError
from kit.deploy.monitoring import (
    DASHBOARD_FILE,
    DASHBOARD_PROVIDER_FILE,
    DATASOURCE_FILE,
    GRAFANA_DASHBOARDS,
    GRAFANA_SERVICE,
    PROMETHEUS_FILE,
    PROMETHEUS_SERVICE,
    settings,
)
from kit.deploy.pipeline import prepare
from kit.deploy.profiles import builders, profile_help

pytestmark = pytest.mark.unit

# PromQL words that are not metric names: functions and aggregations the dashboard may call, and modifiers.
FUNCTIONS = {"sum", "max", "min", "avg", "count", "rate", "irate", "increase", "histogram_quantile"}
MODIFIERS = {"by", "without", "on", "ignoring", "offset", "bool", "and", "or", "unless"}
# Functions whose argument must be a counter (a histogram's _bucket/_sum/_count series are counters).
COUNTER_FUNCTIONS = {"rate", "irate", "increase"}


@pytest.fixture(scope="module")
def files():
    return prepare("cpu", with_profiles=["monitoring"]).files


def series_kind(name: str, metrics: dict[str, str]) -> str | None:
    if name in metrics:
        return metrics[name]
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and metrics.get(name.removesuffix(suffix)) == "histogram":
            return "counter"  # the series of a histogram are counters
    return None


def check_promql(expr: str, metrics: dict[str, str]) -> list[str]:
    """Problems of one dashboard expression: brackets that do not pair, unknown functions, metric names vLLM does not
    export, rate() over a gauge, histogram_quantile() over anything but a _bucket series. A small reading of PromQL,
    enough for the kit's own queries; Prometheus's parser reads every one in the integration test."""
    problems = []
    depth = {"(": 0, "[": 0, "{": 0}
    pairs = {")": "(", "]": "[", "}": "{"}
    for ch in expr:
        if ch in depth:
            depth[ch] += 1
        elif ch in pairs:
            depth[pairs[ch]] -= 1
            if depth[pairs[ch]] < 0:
                problems.append(f"unpaired {ch!r}")
    problems += [f"unclosed {k!r}" for k, v in depth.items() if v > 0]
    text = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors: [1m], [$__rate_interval]
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", text)  # label lists
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*(?=\s*\()?", text):
        word = match.group(0)
        called = text[match.end():].lstrip().startswith("(")
        if called:
            if word not in FUNCTIONS:
                problems.append(f"unknown function {word}")
            continue
        if word in MODIFIERS:
            continue
        kind = series_kind(word, metrics)
        if kind is None:
            problems.append(f"{word} is not a vLLM metric of kit/data/monitoring.yaml")
    for fn, arg in re.findall(r"\b(rate|irate|increase|histogram_quantile)\s*\(([^()]*(?:\([^()]*\))?[^()]*)", expr):
        names = [n for n in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", re.sub(r"\[[^\]]*\]", "", arg))
                 if series_kind(n, metrics)]
        if fn in COUNTER_FUNCTIONS and any(series_kind(n, metrics) != "counter" for n in names):
            problems.append(f"{fn}() over a gauge: {names}")
    for arg in re.findall(r"histogram_quantile\s*\(\s*[0-9.]+\s*,(.*)\)\s*$", expr):
        names = [n for n in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", arg) if series_kind(n, metrics)]
        if not names or not all(n.endswith("_bucket") for n in names):
            problems.append(f"histogram_quantile() needs a _bucket series, got {names}")
    return problems


def test_promql_check_finds_mistakes():
    """The checker itself can fail: each of these is wrong in one way."""
    metrics = settings()["metrics"]
    assert check_promql("sum(rate(vllm:generation_tokens_total[1m]))", metrics) == []
    assert check_promql("sum(rate(vllm:generation_tokens_total[1m])", metrics) == ["unclosed '('"]
    assert check_promql("vllm:time_per_output_token_seconds_bucket", metrics)  # the pre-v1 name
    assert check_promql("rate(vllm:kv_cache_usage_perc[1m])", metrics)  # a gauge
    assert check_promql("histogram_quantile(0.9, rate(vllm:time_to_first_token_seconds_sum[1m]))", metrics)
    assert check_promql("sum(ratee(vllm:prompt_tokens_total[1m]))", metrics)


def test_dashboard_has_what_grafana_requires(files):
    board = json.loads(files[DASHBOARD_FILE])
    source_uid = yaml.safe_load(files[DATASOURCE_FILE])["datasources"][0]["uid"]
    assert board["uid"] and board["title"] and isinstance(board["schemaVersion"], int)
    assert isinstance(board["panels"], list) and board["panels"]
    ids = [p["id"] for p in board["panels"]]
    assert len(set(ids)) == len(ids)
    cells = set()
    for panel in board["panels"]:
        assert panel["type"] == "timeseries" and panel["title"]
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in ("h", "w", "x", "y")) and grid["x"] + grid["w"] <= 24
        cell = (grid["x"], grid["y"])
        assert cell not in cells, f"panels overlap at {cell}"
        cells.add(cell)
        assert panel["datasource"] == {"type": "prometheus", "uid": source_uid}
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs) and refs
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == source_uid
            assert target["expr"].strip()


def test_every_dashboard_query_reads_vllm_metrics(files):
    metrics = settings()["metrics"]
    board = json.loads(files[DASHBOARD_FILE])
    problems = {t["expr"]: check_promql(t["expr"], metrics) for p in board["panels"] for t in p["targets"]}
    assert {expr: p for expr, p in problems.items() if p} == {}
    used = " ".join(problems)
    # What the issue asks the dashboard to show.
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_preemptions_total"):
        assert name in used


def test_grafana_provisioning_points_at_prometheus_and_the_dashboard(files):
    source = yaml.safe_load(files[DATASOURCE_FILE])["datasources"][0]
    assert source["url"] == f"http://{PROMETHEUS_SERVICE}:{settings()['ports']['prometheus']}"
    assert source["type"] == "prometheus" and source["isDefault"] is True
    provider = yaml.safe_load(files[DASHBOARD_PROVIDER_FILE])["providers"][0]
    assert provider["type"] == "file" and provider["options"]["path"] == GRAFANA_DASHBOARDS
    grafana = yaml.safe_load(files["compose.yaml"])["services"][GRAFANA_SERVICE]
    assert f"./monitoring/grafana/dashboards:{GRAFANA_DASHBOARDS}:ro" in grafana["volumes"]


def test_prometheus_scrapes_every_server_of_the_stack():
    one = yaml.safe_load(prepare("cpu", with_profiles=["monitoring"]).files[PROMETHEUS_FILE])
    two = yaml.safe_load(prepare("cpu", with_presets=["cpu-embed"], with_profiles=["monitoring"]).files[PROMETHEUS_FILE])
    assert one["scrape_configs"][0]["static_configs"][0]["targets"] == ["vllm:8000"]
    assert two["scrape_configs"][0]["static_configs"][0]["targets"] == ["vllm:8000", "vllm-cpu-embed:8000"]
    assert "authorization" not in one["scrape_configs"][0]  # /metrics is outside --api-key's reach


def test_services_are_pinned_hardened_and_local(files):
    services = yaml.safe_load(files["compose.yaml"])["services"]
    for name in (PROMETHEUS_SERVICE, GRAFANA_SERVICE):
        service = services[name]
        ref, _, digest = service["image"].partition("@")
        repository, _, tag = ref.partition(":")
        assert tag and tag != "latest" and repository in {"prom/prometheus", "grafana/grafana"}
        # By digest wherever one is on record (kit/data/image_evidence.yaml): Grafana 13.3.0 has none yet.
        recorded = load_yaml("image_evidence.yaml")["images"][ref].get("digest")
        assert digest == (recorded or "") and (not digest or re.fullmatch(r"sha256:[0-9a-f]{64}", digest))
        assert service["cap_drop"] == ["ALL"] and service["read_only"] is True
        assert service["security_opt"] == ["no-new-privileges:true"]
        assert all(p.startswith("127.0.0.1:") for p in service["ports"])
        assert all(v.endswith(":ro") for v in service["volumes"] if v.startswith("./"))
        assert "env_file" not in service  # .env holds the server's secrets: they stay out of these containers
    password = services[GRAFANA_SERVICE]["environment"]["GF_SECURITY_ADMIN_PASSWORD"]
    assert password.startswith("${GRAFANA_ADMIN_PASSWORD:?")
    assert "GRAFANA_ADMIN_PASSWORD=" in files[".env.example"]


def test_without_the_profile_nothing_changes():
    plain = prepare("cpu").files
    assert not any(path.startswith("monitoring/") for path in plain)
    assert "prometheus" not in plain["compose.yaml"] and "GRAFANA" not in plain[".env.example"]


def test_profiles_in_data_have_builders():
    assert set(profile_help()) == set(builders())


def test_with_an_unknown_profile_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(cli, ["render", "preset=cpu", "--with", "graphana", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "'graphana' is not a profile (choose from monitoring" in result.output
    assert not any(tmp_path.iterdir())


def test_profiles_need_the_compose_target():
    with pytest.raises(PresetError, match="--with monitoring: profiles add compose services; --target k8s has none"):
        prepare("cpu", target="k8s", with_profiles=["monitoring"])


def test_a_cluster_on_one_docker_host_is_scraped_at_the_heads_server():
    files = prepare("cpu", ["hardware.nodes=2", "cluster.network=bridge"], with_profiles=["monitoring"]).files
    head, worker = (yaml.safe_load(files[f"compose.{role}.yaml"]) for role in ("head", "worker"))
    assert {PROMETHEUS_SERVICE, GRAFANA_SERVICE} <= set(head["services"])
    assert PROMETHEUS_SERVICE not in worker["services"]  # one Prometheus per stack, beside the head
    config = yaml.safe_load(files[PROMETHEUS_FILE])
    assert config["scrape_configs"][0]["static_configs"][0]["targets"] == ["vllm:8000"]
    assert head["services"][PROMETHEUS_SERVICE]["ports"] == ["127.0.0.1:9090:9090"]


def test_a_cluster_over_hosts_monitors_on_the_heads_loopback():
    files = prepare("a100x8", ["hardware.nodes=2", "cluster.head_address=ray-head.example.internal"],
                    with_profiles=["monitoring"]).files
    services = yaml.safe_load(files["compose.head.yaml"])["services"]
    prometheus, grafana = services[PROMETHEUS_SERVICE], services[GRAFANA_SERVICE]
    # Host networking, as the head's server: nothing published, both listen on the host's loopback only.
    assert prometheus["network_mode"] == grafana["network_mode"] == "host"
    assert "ports" not in prometheus and "ports" not in grafana
    assert "--web.listen-address=127.0.0.1:9090" in prometheus["command"]
    assert grafana["environment"]["GF_SERVER_HTTP_ADDR"] == "127.0.0.1"
    config = yaml.safe_load(files[PROMETHEUS_FILE])
    assert config["scrape_configs"][0]["static_configs"][0]["targets"] == ["127.0.0.1:8000"]
    assert yaml.safe_load(files[DATASOURCE_FILE])["datasources"][0]["url"] == "http://127.0.0.1:9090"
    assert PROMETHEUS_SERVICE not in files["compose.worker.yaml"]


def test_render_with_monitoring_writes_the_files(tmp_path):
    result = CliRunner().invoke(cli, ["render", "preset=cpu", "--with", "monitoring", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)["data"]
    assert data["profiles"] == ["monitoring"]
    for path in (PROMETHEUS_FILE, DATASOURCE_FILE, DASHBOARD_PROVIDER_FILE, DASHBOARD_FILE):
        assert data["files"][path] == "create"
        assert (tmp_path / path).is_file()


def test_with_completes_profile_names_from_data():
    from tests.unit.test_cli_completion import completions

    assert completions("kit render preset=cpu --with mon") == ["monitoring"]
    assert completions("kit render preset=cpu --with ") == sorted(profile_help())
